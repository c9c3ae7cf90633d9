"""The burn stage's node burns, started together and waited for: over SSH (one command per node) or, with
`--launcher slurm`, as one step of the allocation the stage holds (one task per node, beside the all-reduce's
steps). `run` blocks until every node's burn ended and gives each node's outcome, judged as the fan-out judges a
node's output; `stop` (from another thread: Ctrl-C) ends every burn on the nodes."""

from __future__ import annotations

import threading
from typing import Any

from ...model import Status
from .. import agent_report, fanout
from ..context import ClusterContext, NodeOutcome
from ..slurm import allocation, srun
from ..slurm import fanout as slurm_fanout
from ..slurm.jobs import slurm_name
from ..ssh.client import RemoteHosts


class SshBurns:
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


class SlurmBurns:
    def __init__(self, ctx: ClusterContext, nodes: list[str], cmd: str, limit: float):
        self.ctx, self.nodes, self.cmd, self.limit = ctx, nodes, cmd, limit

    def run(self) -> dict[str, NodeOutcome]:
        job = srun.Job("burn", [slurm_name(self.ctx, n) for n in self.nodes], ["/bin/sh", "-c", self.cmd],
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
        allocation.release(self.ctx.slurm_job)  # every step of the allocation with it
