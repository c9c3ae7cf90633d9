"""--launcher slurm: the node checks as one srun (over SSH where Slurm runs no job now), the jobs as srun from
this machine (cluster/slurm/jobs.py), a long stage's jobs as steps of one allocation it holds, the burns one step
of it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ... import slurm
from ...model import Status
from .. import jobs
from ..context import ClusterContext, NodeOutcome, Options
from ..layout import Layout
from ..nodes import address
from ..slurm import allocation, srun
from ..slurm import fanout as slurm_fanout
from ..slurm import jobs as slurm_jobs
from ..ssh.client import RemoteHosts
from ..ssh.result import Remote
from .base import Launcher, LauncherError


class SlurmLauncher(Launcher):
    through = "through Slurm"

    def read_nodes(self, options: Options | None = None) -> dict[str, Any]:
        try:
            return slurm.all_nodes()
        except slurm.SlurmError as exc:
            raise LauncherError(f"--launcher slurm: {exc}") from exc

    def check_nodes(self, ctx: ClusterContext, done: Callable[[NodeOutcome], None]) -> None:
        states = ctx.scheduler_nodes if ctx.scheduler_nodes is not None else self.read_nodes(ctx.options)
        slurm_fanout.fan_out(ctx.inventory.hosts, ctx.options, states, done)

    def summary(self, ctx: ClusterContext) -> str:
        return slurm_fanout.summary(ctx.nodes)

    def mpi_from(self, first: str) -> str:
        return "through srun --mpi=pmix"

    def distribute(self, ctx: ClusterContext, run: RemoteHosts, nodes: Sequence[str], script: Path,
                   timeout: float = 60.0) -> tuple[str, dict[str, Remote]]:
        return slurm_jobs.distribute(ctx, nodes, script, jobs.REMOTE_DIR, timeout)

    def mpi_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                env: Mapping[str, str], timeout: float) -> Remote:
        return slurm_jobs.mpi_job(ctx, lay, program, env, timeout)

    def torch_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, python: str, path: str,
                  args: Sequence[str], gpus: bool, port: int, timeout: float) -> Remote:
        master = address(ctx, lay.slots[0][0], data=False)
        return slurm_jobs.torch_job(ctx, lay, python, path, args, jobs.rank_env(gpus), master, port, timeout)

    def task_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                 envs: Sequence[Mapping[str, str]], timeout: float) -> Remote:
        return slurm_jobs.per_task_job(ctx, lay, program, envs, timeout)

    @contextlib.contextmanager
    def holding(self, ctx: ClusterContext, what: str, nodes: Sequence[str], seconds: float) -> Iterator[str]:
        names = [slurm_jobs.slurm_name(ctx, n) for n in nodes]
        ctx.slurm_job, why = allocation.allocate(what, names, seconds, slurm_jobs.gpus_per_node(ctx, names))
        if not ctx.slurm_job:
            yield why
            return
        try:
            yield ""
        finally:
            allocation.release(ctx.slurm_job)
            ctx.slurm_job = ""

    def burns(self, ctx: ClusterContext, run: RemoteHosts, nodes: list[str], cmd: str, limit: float) -> SlurmBurns:
        return SlurmBurns(ctx, nodes, cmd, limit)


class SlurmBurns:
    """One step of the allocation the stage holds, a task per node; stop ends the allocation, every step with it."""

    def __init__(self, ctx: ClusterContext, nodes: list[str], cmd: str, limit: float):
        self.ctx, self.nodes, self.cmd, self.limit = ctx, nodes, cmd, limit

    def run(self) -> dict[str, NodeOutcome]:
        job = srun.Job("burn", [slurm_jobs.slurm_name(self.ctx, n) for n in self.nodes], ["/bin/sh", "-c", self.cmd],
                       self.limit, jobid=self.ctx.slurm_job)
        step = srun.run(job)
        done = step.remote
        found = {}
        for number, node in enumerate(self.nodes):
            task = step.tasks.get(number)
            if done.error and task is None:  # Slurm ran nothing there: its reason is the node's
                found[node] = NodeOutcome(node, Status.ERROR, f"its burn did not start: {done.error}", "slurm",
                                          done.wall_s, evidence=done.evidence(), via="srun")
            else:
                found[node] = slurm_fanout.outcome(node, task, self.limit, done.wall_s, done.stderr)
        return found

    def stop(self) -> None:
        allocation.release(self.ctx.slurm_job)


SLURM = SlurmLauncher()
