"""The training benchmark's part of the cluster report, as a person reads it: the runs with their spread and
efficiency, per node images/s per GPU beside the fleet median and the published figure, the named node, and CPU
ranks said as such, in the rendered Markdown, HTML and terminal summary."""

from __future__ import annotations

import copy
import html
import re

from gpucheck.report.cluster.html import render_html
from gpucheck.report.cluster.markdown import render_markdown
from gpucheck.report.cluster.summary import render_summary

TRAINING = {
    "check": "cluster.training.tf-horovod", "framework": "tf-horovod", "device": "GPU", "precision": "amp",
    "unit": "images/s", "note": "",
    "model": {"name": "ResNet-50", "width": 64, "image_size_px": 224, "batch_size_per_gpu": 256},
    "runs": [
        {"run": "1 GPU", "gpus": 1, "images_per_s": 2000.0, "images_per_s_per_gpu": 2000.0, "iteration_min": 1960.0,
         "iteration_max": 2020.0, "efficiency": 1.0},
        {"run": "node01", "gpus": 8, "images_per_s": 15200.0, "images_per_s_per_gpu": 1900.0,
         "iteration_min": 14896.0, "iteration_max": 15352.0, "efficiency": 0.95},
        {"run": "2 nodes", "gpus": 16, "images_per_s": 28800.0, "images_per_s_per_gpu": 1800.0,
         "iteration_min": 28000.0, "iteration_max": 29000.0, "efficiency": 0.9},
    ],
    "nodes": [
        {"node": "node01", "sku": "a100-sxm4-40gb", "images_per_s_per_gpu": 1900.0, "fleet_median": 1615.0,
         "of_median": 1.176, "reference": 2375, "of_reference": 0.8, "status": "pass", "why": ""},
        {"node": "node02", "sku": "a100-sxm4-40gb", "images_per_s_per_gpu": 1330.0, "fleet_median": 1615.0,
         "of_median": 0.824, "reference": 2375, "of_reference": 0.56, "status": "warn",
         "why": "node02 trains at 1,330 images/s per GPU, 0.82 x the fleet median 1,615 of its SKU (below 0.9 x)"},
    ],
}


def doc(training: dict) -> dict:
    return {"exit_code": 1, "complete": True, "cluster": [], "nodes": {}, "training": training}


def test_markdown_shows_runs_nodes_and_the_named_slow_node():
    text = render_markdown(doc(TRAINING))
    assert "## Training benchmark" in text
    assert "ResNet-50, tf-horovod, amp, 224 px, batch 256 per GPU." in text
    assert "| 2 nodes | 16 | 28800 | 1800 | 28000–29000 | 90% |" in text  # figures as values.figure writes them
    assert "| node02 | a100-sxm4-40gb | 1330 | 1615 | 0.82 x | 2375 | 0.56 x | WARN |" in text
    assert "- node02 trains at 1,330 images/s per GPU, 0.82 x the fleet median" in text
    assert "CPU ranks" not in text


def test_html_shows_the_same_with_status_badges():
    page = render_html(doc(TRAINING))
    part = page[page.index("<h2>Training benchmark</h2>"):]
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", part)]
    assert "28000–29000" in cells and "2375" in cells and "0.82 x" in cells
    assert "node02 trains at 1,330 images/s per GPU" in html.unescape(part)
    assert part.count("badge") >= 2


def test_cpu_ranks_are_said_as_such_and_have_no_published_figure():
    cpu = copy.deepcopy(TRAINING)
    cpu.update(device="CPU", precision="fp32", note="CPU ranks, not a GPU measurement: a small model")
    cpu["model"].update(name="ResNet-50 at width 8", width=8, image_size_px=32, batch_size_per_gpu=16)
    for row in cpu["nodes"]:
        row.update(reference=None, of_reference=None)
    text = render_markdown(doc(cpu))
    assert "**CPU ranks, not GPUs.** CPU ranks, not a GPU measurement: a small model." in text
    assert "| run | ranks | images/s | per rank |" in text and "none published" in text
    assert "batch 16 per CPU" in text
    summary = render_summary(doc(cpu), "/tmp/r")
    assert "training: ResNet-50 at width 8" in summary and "CPU ranks, not a GPU measurement" in summary


def test_the_summary_names_the_nodes_and_no_training_means_no_section():
    summary = render_summary(doc(TRAINING), "/tmp/r")
    line = next(x for x in summary.splitlines() if x.startswith("training:"))
    assert "2 nodes 28800 images/s (90%)" in line and "1 node named: node02" in line
    assert "Training benchmark" not in render_markdown(doc({})) and "training:" not in render_summary(doc({}), "/r")
    odd = copy.deepcopy(TRAINING)
    odd["runs"][0].update(images_per_s="fast", efficiency=None)
    assert "| 1 GPU | 1 | — |" in render_markdown(doc(odd))
