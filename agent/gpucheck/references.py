"""Published scaling figures the smoke job's efficiency is read against, with their sources: the one
list the cluster stage, the report and the docs quote."""

from __future__ import annotations

from typing import Any

# Published scaling figures the report puts beside ours. Efficiency = speed-up / number of GPUs.
REFERENCES: list[dict[str, Any]] = [
    {
        "name": "TensorFlow 0.8 distributed Inception",
        "gpus": 16, "speedup": 15.0, "efficiency": 15.0 / 16,
        "note": "speed-up chart of the announcement (15x at 16 GPUs); its text gives 56x on 100 GPUs",
        "source": "Derek Murray, 'Announcing TensorFlow 0.8 - now with distributed computing support!', "
                  "Google Research blog, 2016-04-13, "
                  "https://research.google/blog/announcing-tensorflow-08-now-with-distributed-computing-support/",
    },
    {
        "name": "IBM PowerAI DDL, Caffe ResNet-101 (ImageNet-22K)",
        "gpus": 256, "speedup": 0.95 * 256, "efficiency": 0.95,
        "note": "64 Power8 S822LC servers, 4 P100 each",
        "source": "Cho et al., 'PowerAI DDL', arXiv:1708.02188 (2017); IBM blog 'Scaling TensorFlow and "
                  "Caffe to 256 GPUs', https://www.ibm.com/blogs/systems/scaling-tensorflow-and-caffe-to-256-gpus/",
    },
    {
        "name": "Horovod, Inception V3 and ResNet-101 (tf_cnn_benchmarks)",
        "gpus": 512, "speedup": 0.90 * 512, "efficiency": 0.90,
        "note": "128 servers with 4 Pascal GPUs, 25 Gbit/s RoCE; VGG-16 reached 68%",
        "source": "Horovod README and docs/benchmarks.rst, https://github.com/horovod/horovod; Sergeev & "
                  "Del Balso, 'Horovod: fast and easy distributed deep learning in TensorFlow', "
                  "arXiv:1802.05799 (2018)",
    },
]
