"""--launcher ssh (the default): every node checked over SSH, the jobs started from the first node with mpirun (or
one torchrun per node), the workload files copied with SFTP, each node's burn one SSH command."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...model import Status
from ...workloads import launch
from .. import agent_report, fanout, jobs
from ..context import ClusterContext, NodeOutcome
from ..layout import Layout
from ..nodes import address
from ..ssh.client import RemoteHosts, command
from ..ssh.result import Remote
from .base import Launcher


class SshLauncher(Launcher):
    through = "over SSH"

    def check_nodes(self, ctx: ClusterContext, done: Callable[[NodeOutcome], None]) -> None:
        fanout.fan_out(ctx.inventory.hosts, ctx.options, done)

    def mpi_from(self, first: str) -> str:
        return f"from {first}"

    def job_place(self, first: str) -> str:
        return f"on the launcher {first}"

    def distribute(self, ctx: ClusterContext, run: RemoteHosts, nodes: Sequence[str], script: Path,
                   timeout: float = 60.0) -> tuple[str, dict[str, Remote]]:
        """Into jobs.REMOTE_DIR on every node, in parallel."""
        files = launch.workload_files(script)

        def one(node: str) -> tuple[str, Remote]:
            for path in files:
                done = run.put(node, path, jobs.REMOTE_DIR, timeout)
                if not done.ok:
                    break
            return node, done

        with ThreadPoolExecutor(max_workers=max(1, min(ctx.options.forks, len(nodes))),
                                thread_name_prefix="gpucheck-copy") as pool:
            failed = {n: r for n, r in pool.map(one, nodes) if not r.ok}
        return f"{jobs.REMOTE_DIR}/{script.name}", failed

    def mpi_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                env: Mapping[str, str], timeout: float) -> Remote:
        """mpirun from the layout's first node, every rank with `env` (exported with -x). As root on Debian's
        OpenMPI it needs --allow-run-as-root; --oversubscribe for more ranks than cores (CPU nodes)."""
        first = lay.slots[0][0]
        slots = [(address(ctx, n, data=False), k) for n, k in lay.slots]
        try:
            argv = launch.mpirun_command(list(program), slots, as_root=True, oversubscribe=True,
                                         env_names=list(env), extra=jobs.MPIRUN_EXTRA)
        except ValueError as exc:  # an address mpirun's --host cannot take (an IPv6 address)
            return Remote(first, "mpirun", error=f"cannot start mpirun: {exc}", kind="usage")
        return run.run(first, command(argv, env=dict(env)), timeout)

    def torch_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, python: str, path: str,
                  args: Sequence[str], gpus: bool, port: int, timeout: float) -> Remote:
        """One torchrun per node of the layout (static rendezvous), all at once."""
        master = address(ctx, lay.slots[0][0], data=False)
        torchrun = python.rsplit("/", 1)[0] + "/torchrun"
        starts = []
        for i, (node, k) in enumerate(lay.slots):
            argv = launch.torchrun_command(path, list(args), nnodes=len(lay.slots), node_rank=i, nproc_per_node=k,
                                           master_addr=master, master_port=port, torchrun=torchrun)
            starts.append((node, command(argv, env=jobs.rank_env(gpus))))
        return jobs.combined(jobs.start_all(run, starts, timeout))

    def task_job(self, ctx: ClusterContext, run: RemoteHosts, lay: Layout, program: Sequence[str],
                 envs: Sequence[Mapping[str, str]], timeout: float) -> Remote:
        """One SSH command per task, all at once."""
        starts = [(node, command(list(program), env=dict(env))) for (node, _), env in zip(lay.slots, envs, strict=True)]
        return jobs.combined(jobs.start_all(run, starts, timeout))

    def burns(self, ctx: ClusterContext, run: RemoteHosts, nodes: list[str], cmd: str, limit: float) -> SshBurns:
        return SshBurns(run, nodes, cmd, limit)


class SshBurns:
    """One SSH command per node; stop kills those started (and starts no more)."""

    def __init__(self, run: RemoteHosts, nodes: list[str], cmd: str, limit: float):
        self.remote, self.nodes, self.cmd, self.limit = run, nodes, cmd, limit
        self.started: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.stopped = False

    def run(self) -> dict[str, NodeOutcome]:
        for node in self.nodes:
            with self.lock:
                if self.stopped:
                    break
                self.started[node] = self.remote.start(node, self.cmd, self.limit)
        return {node: self.outcome(node, background.wait()) for node, background in list(self.started.items())}

    def outcome(self, node: str, done: Any) -> NodeOutcome:
        if done.error and agent_report.find(done.stdout) is None:
            return NodeOutcome(node, Status.ERROR, f"its burn did not report: {done.describe()}", done.kind or "ssh",
                               done.wall_s, done.exit, evidence=done.evidence())
        return fanout.interpret(node, done.stdout, done.stderr, done.exit, done.wall_s, self.limit)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            started = list(self.started.values())
        for background in started:
            background.kill()


SSH = SshLauncher()
