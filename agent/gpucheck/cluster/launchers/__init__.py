"""How `gpucheck cluster` starts its work on the nodes (--launcher): the node checks, the stages' jobs (an MPI
program, PyTorch DDP, TensorFlow's tasks each with an environment of its own), the workload files they need, the
burn's node burns and the nodes a long stage holds. One interface (base.Launcher), one class per way: ssh.py,
slurm.py and kubernetes.py (the node checks only, yet). The stages ask the run's launcher (`of(ctx)`), never which
one it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Burns, Launcher, LauncherError

if TYPE_CHECKING:
    from ..context import ClusterContext

__all__ = ["NAMES", "Burns", "Launcher", "LauncherError", "named", "of"]

NAMES = ("ssh", "slurm", "kubernetes")  # --launcher's choices, the default first


def named(name: str) -> Launcher:
    """The launcher called `name` (its module loads only here: a run over SSH never loads Slurm's code)."""
    if name == "slurm":
        from .slurm import SLURM

        return SLURM
    if name == "ssh":
        from .ssh import SSH

        return SSH
    if name == "kubernetes":
        from .kubernetes import KUBERNETES

        return KUBERNETES
    raise ValueError(f"no launcher {name!r}: one of {', '.join(NAMES)}")


def of(ctx: ClusterContext) -> Launcher:
    """The run's launcher (--launcher, in its options)."""
    return named(ctx.options.launcher)
