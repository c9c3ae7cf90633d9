"""The training jobs `gpucheck cluster --framework` picks for the smoke stage, in one table: the stack
whose python runs each, its workload script, the node frameworks it imports and how its ranks start.
Standard library only: the command line reads the names before anything heavy loads."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import HOROVOD, TENSORFLOW, TORCH


@dataclass(frozen=True)
class Framework:
    stack: str  # the virtualenv (frameworks role: /opt/stacks/<stack>) whose python runs the job
    workload: str  # its script: workloads/launch.py script_path(workload)
    needs: tuple[str, ...]  # what it imports, as the node reports it in facts.frameworks.<stack>
    start: str  # mpirun: every rank from the launcher | torchrun: one per node | tasks: one process per PS task
    # the training benchmark (docs/training.md) this --framework runs: the framework of its synchronous job
    # (tf-ps has none of its own: Horovod's), and for that one, its workload script
    benchmark: str = ""
    benchmark_workload: str = ""


FRAMEWORKS: dict[str, Framework] = {
    "tf-horovod": Framework("tf-horovod", "horovod", (TENSORFLOW, HOROVOD), "mpirun", "tf-horovod", "resnet-horovod"),
    "torch": Framework("torch", "torch", (TORCH,), "torchrun", "torch", "resnet-torch"),
    "tf-ps": Framework("tf-horovod", "tf-ps", (TENSORFLOW,), "tasks", "tf-horovod"),
}
DEFAULT_FRAMEWORK = "tf-horovod"
# The built-in all-reduce benchmark runs under Horovod too, with the default job's python.
HOROVOD_STACK = FRAMEWORKS[DEFAULT_FRAMEWORK].stack
