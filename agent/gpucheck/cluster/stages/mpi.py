"""MPI stage: one rank on every node, started by `mpirun` from the first usable node (the launcher; the
nodes reach each other over SSH as mpirun needs). Every rank prints its host's name; a node whose
rank did not report, or reported another host's name, is named.

When the job as a whole fails, each node is tried alone with the launcher (2-rank jobs, in parallel)
so the report names the node(s) MPI cannot start on, not just "mpirun failed"; when every such job
fails too, the launcher itself is tried with one rank."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from ...model import Result, Status
from .. import launchers
from ..context import ClusterContext, ClusterResult
from ..layout import Layout
from ..nodes import address, hostname, participants, remote_hosts
from ..ssh.client import RemoteHosts
from ..ssh.result import Remote

CHECK = "cluster.mpi"
# OpenMPI --tag-output: "[1,3]<stdout>:node04"; srun --label: "3: node04"
_TAGGED = re.compile(r"^(?:\[(?P<job>\d+),(?P<rank>\d+)\]<stdout>:|(?P<task>\d+):)\s?(?P<text>.*)$")
REMEDIATION = ("check from the launcher: ssh to the node as the MPI user (keys, known_hosts), the same OpenMPI "
               "on every node (orted on PATH), and the MCA network settings (/etc/openmpi/openmpi-mca-params.conf)")


def ranks_of(stdout: str) -> dict[int, str]:
    """rank -> first line it printed (from --tag-output)."""
    out: dict[int, str] = {}
    for line in stdout.splitlines():
        m = _TAGGED.match(line.strip())
        if m:
            out.setdefault(int(m["rank"] or m["task"]), m["text"].strip())
    return out


def hello(ctx: ClusterContext, run: RemoteHosts, targets: list[tuple[str, str]],
          timeout: float) -> tuple[Remote, dict[int, str]]:
    """targets: (node, address) in rank order, the first the launcher. Returns the run and rank -> hostname."""
    done = launchers.of(ctx).mpi_job(ctx, run, Layout([(node, 1) for node, _ in targets]), ["hostname"], {}, timeout)
    return done, ranks_of(done.stdout)


def judge(ctx: ClusterContext, targets: list[tuple[str, str]], ranks: dict[int, str]) -> dict[str, str]:
    """node -> what is wrong with its rank (missing, or another host's name)."""
    wrong: dict[str, str] = {}
    for rank, (node, where) in enumerate(targets):
        got = ranks.get(rank)
        want = hostname(ctx, node)
        if got is None:
            wrong[node] = f"rank {rank} ({where}) reported nothing"
        elif got != want:
            wrong[node] = f"rank {rank} ({where}) ran on host {got!r}, expected {want!r} (two inventory entries " \
                          "for one machine, or a wrong address?)"
    return wrong


def mpi_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    began = time.monotonic()
    cast = participants(ctx)
    if not cast.nodes:
        return [cast.skip(CHECK, "no usable node")]
    run = run or remote_hosts(ctx)
    timeout = ctx.options.stage_timeout
    launcher = cast.nodes[0]
    started = launchers.of(ctx).mpi_from(launcher)
    targets = [(n, address(ctx, n, data=False)) for n in cast.nodes]
    done, ranks = hello(ctx, run, targets, timeout)
    wrong = judge(ctx, targets, ranks)
    measured = {"launcher": launcher, "ranks_expected": len(targets), "ranks_reported": len(ranks),
                "hosts": {n: ranks.get(i) for i, (n, _) in enumerate(targets)}}
    expected = f"{len(targets)} ranks, one on each node, each printing its own hostname"
    if done.ok and not wrong:
        return [ClusterResult(CHECK, Status.PASS, measured, expected,
                              f"{len(targets)} ranks on {len(targets)} nodes {started}, each on its own host "
                              f"({done.wall_s:.1f} s)" + cast.note(), evidence=done.evidence(),
                              duration_s=time.monotonic() - began)]
    if done.error and done.kind not in ("timeout",):  # could not even reach the launcher
        where = launchers.of(ctx).job_place(launcher)
        return [ClusterResult(CHECK, Status.ERROR, measured, expected, f"cannot run the MPI job {where}: "
                              f"{done.describe()}", REMEDIATION, done.evidence(),
                              time.monotonic() - began)]
    if not done.ok and len(targets) > 1:
        wrong = locate(ctx, run, launcher, targets, timeout) or wrong
    how = done.describe() if not done.ok else "every rank ran but some on the wrong host"
    if not wrong:
        return [ClusterResult(CHECK, Status.FAIL, measured, expected,
                              f"mpirun across {len(targets)} nodes failed ({how}) but every node starts a rank "
                              f"with the launcher alone: intermittent, or too many nodes at once?"
                              + cast.note(), REMEDIATION, done.evidence(), time.monotonic() - began)]
    measured["not_started"] = sorted(wrong)
    all_but_launcher = set(wrong) >= {n for n, _ in targets if n != launcher} and len(targets) > 2
    nodes_blamed = {} if all_but_launcher and launcher not in wrong else wrong
    reason = "; ".join(f"{n}: {why}" for n, why in wrong.items())
    if all_but_launcher and launcher not in wrong:
        reason = (f"MPI fails from the launcher {launcher} to every other node (the launcher's own rank runs): "
                  f"check {launcher}'s SSH to the others; " + reason)
    return [ClusterResult(CHECK, Status.FAIL, measured, expected, f"{reason} (mpirun: {how})"
                          + cast.note(), REMEDIATION, done.evidence(), time.monotonic() - began,
                          nodes=nodes_blamed)]


def locate(ctx: ClusterContext, run: RemoteHosts, launcher: str, targets: list[tuple[str, str]],
           timeout: float) -> dict[str, str]:
    """The job across all nodes failed: try each node with the launcher alone (2 ranks), in parallel."""
    where = dict(targets)
    others = [(n, a) for n, a in targets if n != launcher]

    def one(target: tuple[str, str]) -> tuple[str, str | None]:
        node, addr = target
        pair = [(launcher, where[launcher]), (node, addr)]
        done, ranks = hello(ctx, run, pair, timeout)
        bad = judge(ctx, pair, ranks)
        if done.ok and not bad:
            return node, None
        if not done.ok:
            return node, f"2-rank job with {launcher} failed: {done.describe()}"
        return node, bad.get(node) or f"2-rank job with {launcher}: {'; '.join(bad.values())}"

    with ThreadPoolExecutor(max_workers=max(1, min(ctx.options.forks, len(others), 16)),
                            thread_name_prefix="gpucheck-mpi") as pool:
        found = {node: why for node, why in pool.map(one, others) if why}
    if others and len(found) == len(others):
        alone, ranks = hello(ctx, run, [(launcher, where[launcher])], timeout)
        bad = judge(ctx, [(launcher, where[launcher])], ranks)
        if not alone.ok or bad:
            return {launcher: bad.get(launcher) or f"mpirun with one rank on the launcher itself fails: "
                    f"{alone.describe()}"}
    return found
