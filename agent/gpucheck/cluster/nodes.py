"""Questions the cluster stages ask about the nodes: which take part (and why the others do not), the
thresholds each was judged against, where other nodes reach it, its hostname and its stacks' python,
and the way to reach the nodes at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Status
from ..profiles import Profile
from . import duplicates
from .context import ClusterContext, ClusterResult
from .ssh.client import RemoteHosts

STACKS_DIR = "/opt/stacks"  # the frameworks role's convention: /opt/stacks/<stack>/bin/python
SHOW_LEFT_OUT = 6


@dataclass
class Participants:
    """The nodes a stage runs on, and node -> why it was left out."""

    nodes: list[str]
    left_out: dict[str, str]

    def note(self) -> str:
        """'; left out: ...' for the end of a stage's reason ('' when nobody was)."""
        if not self.left_out:
            return ""
        items = list(self.left_out.items())
        shown = "; ".join(f"{n} ({why[:80]})" for n, why in items[:SHOW_LEFT_OUT])
        more = f" and {len(items) - SHOW_LEFT_OUT} more" if len(items) > SHOW_LEFT_OUT else ""
        return f"; left out: {shown}{more}"

    def skip(self, check: str, why: str) -> ClusterResult:
        """The stage's result when too few nodes take part."""
        return ClusterResult(check, Status.SKIP, reason=why + self.note())


def blamed_so_far(ctx: ClusterContext) -> dict[str, str]:
    """Nodes a failed cluster check has named so far (drift, a bad link, MPI not starting on them)."""
    out: dict[str, str] = {}
    for result in ctx.results:
        if isinstance(result, ClusterResult) and result.status == Status.FAIL:
            for node, why in result.nodes.items():
                out.setdefault(node, f"{result.check}: {why}")
    return out


def busy_gpus(ctx: ClusterContext, node: str) -> str:
    """Which of the node's GPUs another program used when its agent looked, in words ('' when none)."""
    facts = ((ctx.nodes[node].report or {}).get("facts") or {}) if node in ctx.nodes else {}
    found = facts.get("gpu_processes") or {}
    if not isinstance(found, dict):
        return ""
    return "; ".join(f"{gpu}: " + ", ".join(f"pid {p.get('pid')}" for p in procs if isinstance(p, dict))
                     for gpu, procs in found.items() if isinstance(procs, list) and procs)


def participants(ctx: ClusterContext, gpu_work: bool = False) -> Participants:
    """Usable nodes (reported, did not fail their own checks) less those already blamed by a failed
    cluster check: one bad node must not fail every collective after it. `gpu_work`: a job that may load the
    GPUs also leaves out a node whose GPUs another program uses (its agent saw them busy: node/busy.py)."""
    usable = ctx.usable()
    left_out = {n: ("" if ctx.nodes[n].kind == duplicates.KIND else "no report: ") + ctx.nodes[n].reason
                for n in ctx.nodes if n not in ctx.checked()}
    if gpu_work:
        left_out.update({n: f"its GPUs are in use by another program ({busy})" for n in usable
                         if (busy := busy_gpus(ctx, n))})
    left_out.update({n: "failed its node checks" for n in ctx.checked() if n not in usable})
    # --launcher slurm checked it over SSH: its jobs go through Slurm, which runs none there now
    left_out.update({n: f"Slurm runs no job there: {ctx.nodes[n].slurm_state}" for n in usable
                     if ctx.nodes[n].slurm_state})
    blamed = blamed_so_far(ctx)
    left_out.update({n: why for n, why in blamed.items() if n in usable})
    return Participants([n for n in usable if n not in blamed and n not in left_out], left_out)


def thresholds(ctx: ClusterContext, node: str) -> Profile | None:
    """The profile the node was judged against, as its own report carries it (inheritance resolved,
    a site profile that exists only on the node included). None when the report has none: an agent
    older than the `thresholds` key; callers say so with `unknown_thresholds`."""
    outcome = ctx.nodes.get(node)
    report = (outcome.report if outcome else None) or {}
    data = report.get("thresholds")
    if not isinstance(data, dict) or not data:
        return None
    return Profile(str(report.get("profile") or data.get("name") or node), None, data)


def unknown_thresholds(ctx: ClusterContext, nodes: Sequence[str]) -> str:
    """'; ...' naming the nodes whose report has no thresholds, for the reason of a stage that judged
    them without their profile ('' when every node has them)."""
    missing = [n for n in nodes if thresholds(ctx, n) is None]
    if not missing:
        return ""
    shown = ", ".join(missing[:SHOW_LEFT_OUT]) + (f" and {len(missing) - SHOW_LEFT_OUT} more"
                                                  if len(missing) > SHOW_LEFT_OUT else "")
    return (f"; no thresholds in the report of {shown} (an older gpucheck agent: update it): "
            "judged without its profile")


def threshold(ctx: ClusterContext, nodes: Sequence[str], section: str, key: str) -> Any:
    """The value the nodes' thresholds agree on (the first node's when they differ; None if none has it)."""
    for node in nodes:
        profile = thresholds(ctx, node)
        if profile is not None and profile.get(section, key) is not None:
            return profile.get(section, key)
    return None


def address(ctx: ClusterContext, node: str, data: bool = True) -> str:
    """Where other nodes reach `node`: its ib_address (the data network) when data and set, else the
    inventory address (ansible_host)."""
    host = next(h for h in ctx.inventory.hosts if h.name == node)
    if data and host.vars.get("ib_address"):
        return str(host.vars["ib_address"])
    return host.address


def hostname(ctx: ClusterContext, node: str) -> str:
    """The node's own hostname as its agent reported it (what a rank running there prints)."""
    return str((ctx.nodes[node].report or {}).get("host") or node)


def stack_python(ctx: ClusterContext, node: str, stack: str) -> str | None:
    """The stack's python on the node: from the node's facts when it reports the path
    (facts.stacks.<stack>.python), else by convention /opt/stacks/<stack>/bin/python if the node
    reports the stack at all; None when the node has no such stack. (The jobs' own image's, where they run in
    one: ctx.stack_facts.)"""
    facts = ctx.stack_facts(node)
    declared = (facts.get("stacks") or {}).get(stack)
    if isinstance(declared, dict) and declared.get("python"):
        return str(declared["python"])
    if stack in (facts.get("frameworks") or {}):
        return f"{STACKS_DIR}/{stack}/bin/python"
    return None


def remote_hosts(ctx: ClusterContext) -> RemoteHosts:
    """The stages' way to run commands on the nodes by name (over SSH, as the fan-out connected)."""
    return RemoteHosts(ctx.inventory.hosts, ctx.options)
