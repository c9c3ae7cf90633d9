"""Simulated GPU compute: the fake CuPy (lab/fakecupy) for the agent on every GPU host, so that `gpucheck node
--full` and the cluster's burn stage run in the lab as they do on real GPUs.

The fake NVML (lab/fakenvml) answers what NVML reads; nothing in it can run CUDA, so the real CuPy that the
gpucheck_agent role installs fails with cudaErrorInsufficientDriver. The lab does not touch what the role
installed: it binds lab/fakecupy read-only into each GPU host and names it first on the agent's Python path in
/etc/default/gpucheck, the file every way of starting the agent reads (Slurm's health check, the scheduled
checks, and the lab's `gpucheck` on root's PATH below, which an SSH session reaches first). Ansible's own
commands never see it: the role's check that its CuPy imports still meets the real one.

The fake's GEMMs run on a modelled clock (FAKECUPY_TFLOPS) and its memory is a small numpy arena, so the lab's
GPUs compute at a known speed however busy the build machine is; checks/lab.yaml's floors sit below that model.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "fakecupy"
HOST_DIR = "/usr/lib/gpucheck-lab/python"  # where a GPU host sees SOURCE (bound read-only)
AGENT_ENV_FILE = "/etc/default/gpucheck"
# Before /usr/local/bin (the role's gpucheck_agent_link) on root's PATH, in SSH sessions and Slurm's wrapper alike.
AGENT_SHIM = "/usr/local/sbin/gpucheck"
AGENT_LINK = "/usr/local/bin/gpucheck"

# The model: at 0.0002 TFLOP/s per GPU numpy computes each modelled GEMM in a fraction of its time with a host's 8
# workers on two cores (the burn test's 32 workers use a slower rate of their own). 4 MiB of memory is the least
# that leaves the memtest its verify chunks beside the 0.9 it tests (4.25 x 64 KiB); total just above free, as on
# an idle GPU (the memtest's coverage counts against the total). A healthy host's `--full` takes about 2.5 min.
TFLOPS = 0.0002
FREE_BYTES = 4 * 2**20
TOTAL_BYTES = FREE_BYTES + 64 * 2**10


def environment() -> dict[str, str]:
    """The variables that put the simulated compute under the agent (VAR=value lines of AGENT_ENV_FILE)."""
    return {"PYTHONPATH": HOST_DIR, "FAKECUPY_TFLOPS": str(TFLOPS), "FAKECUPY_FREE_BYTES": str(FREE_BYTES),
            "FAKECUPY_TOTAL_BYTES": str(TOTAL_BYTES),
            # numpy's BLAS threads spin between calls and would starve the other GPUs' workers
            "OPENBLAS_NUM_THREADS": "1"}


def agent_shim() -> str:
    """The lab's `gpucheck` on root's PATH: the agent with AGENT_ENV_FILE read, as Slurm's wrapper reads it."""
    return f"""#!/bin/sh
# Written by the gpucheck lab at every start of this host (lab/compute.py): the agent with {AGENT_ENV_FILE} read
# first, where the lab names its simulated GPU compute. A site's agent is {AGENT_LINK}.
if [ -r {AGENT_ENV_FILE} ]; then set -a; . {AGENT_ENV_FILE}; set +a; fi
exec {AGENT_LINK} "$@"
"""
