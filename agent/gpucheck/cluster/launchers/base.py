"""The one interface of the ways `gpucheck cluster` starts work on the nodes (launchers/__init__.py)."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..context import ClusterContext, NodeOutcome, Options
    from ..layout import Layout
    from ..ssh.client import RemoteHosts
    from ..ssh.result import Remote


class LauncherError(Exception):
    """The launcher cannot serve this run at all (said in one line, before anything runs)."""


class Burns(Protocol):
    """Every node's burn, started together: `run` waits for them all and gives each node's outcome (judged as
    the fan-out judges a node's output); `stop`, from another thread (Ctrl-C), ends them."""

    def run(self) -> dict[str, NodeOutcome]: ...

    def stop(self) -> None: ...


class Launcher(ABC):
    through = ""  # how its jobs start, as a reason says it: "through Slurm"
    # the stages of stages.order.ACROSS_NODES whose work it does not start across the nodes (yet): a run leaves
    # them out
    not_across: frozenset[str] = frozenset()
    drains_in = "slurm"  # the scheduler --drain tells: report.json's key for what it did, its lines' prefix

    def cannot_run(self, stage: str, options: Options) -> str:
        """Why it does not start stage `stage`'s work across the nodes ("": it does; a stage that only reads the
        reports runs with every launcher)."""
        return f"not run {self.through} yet" if stage in self.not_across else ""

    def read_nodes(self, options: Options) -> dict[str, Any] | None:
        """What it must know of the nodes before the run (Slurm: each node's state; Kubernetes: its Nodes);
        LauncherError if it cannot."""
        return None

    @abstractmethod
    def check_nodes(self, ctx: ClusterContext, done: Callable[[NodeOutcome], None]) -> None:
        """`gpucheck node` on every host of the inventory; `done` gets each outcome as it ends."""

    def summary(self, ctx: ClusterContext) -> str:
        """A line after the node checks ("": nothing to say)."""
        return ""

    def probe(self, ctx: ClusterContext, run: RemoteHosts, node: str, command: str, timeout: float) -> Remote:
        """A shell command where a job on `node` would run (over SSH: the node itself): what a stage asks before
        it starts one (which all_reduce_perf is there)."""
        return run.run(node, command, timeout)

    def job_stacks(self, ctx: ClusterContext, run: RemoteHosts) -> str:
        """Where the jobs do not run on the nodes' own stacks (Kubernetes: its job image's), learn theirs into
        ctx.job_image once (ctx.stack_facts answers from it then); why they cannot be known ("": they are, or the
        nodes' reports say)."""
        return ""

    @abstractmethod
    def mpi_from(self, first: str) -> str:
        """How an MPI job starts, for a reason: "from node01", "through srun --mpi=pmix"."""

    def job_place(self, first: str) -> str:
        """Where a job that could not start was to start, for a reason: "through Slurm"."""
        return self.through

    @abstractmethod
    def distribute(self, ctx: ClusterContext, run: RemoteHosts, nodes: Sequence[str], script: Path,
                   timeout: float = 60.0) -> tuple[str, dict[str, Remote]]:
        """`script` and the modules it imports from its folder onto every node: (its path there, node -> the
        failed copy)."""

    @abstractmethod
    def mpi_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                env: Mapping[str, str], timeout: float) -> Remote:
        """An MPI program, one rank per slot of the layout in its order, each with `env`."""

    @abstractmethod
    def torch_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, python: str, path: str,
                  args: Sequence[str], gpus: bool, port: int, timeout: float) -> Remote:
        """PyTorch DDP: the layout's ranks, the rendezvous on its first node's `port`."""

    @abstractmethod
    def task_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                 envs: Sequence[Mapping[str, str]], timeout: float) -> Remote:
        """One task per slot of the layout (one rank each), task i running `program` with envs[i]."""

    @contextlib.contextmanager
    def holding(self, ctx: ClusterContext, what: str, nodes: Sequence[str], seconds: float) -> Iterator[str]:
        """Hold the nodes whole for the block (Slurm: one allocation, the block's jobs its steps). Yields why it
        could not ("" when held, or nothing to hold)."""
        yield ""

    def drain(self, ctx: ClusterContext, doc: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
        """--drain: the written report's verdicts told to the scheduler, node by node ({"node", "action", "text"}:
        drain, resume, keep, held or error), and the error that stopped it or None. Slurm through scontrol here,
        whichever way the checks ran (cluster/slurm/drain.py)."""
        from ..slurm.drain import apply_drain

        return apply_drain(ctx, doc)

    @abstractmethod
    def burns(self, ctx: ClusterContext, run: RemoteHosts, nodes: list[str], cmd: str, limit: float) -> Burns:
        """Every node's burn (`cmd`, a shell command), each given `limit` seconds."""
