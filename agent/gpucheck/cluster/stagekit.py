"""What the lab stages (network, mpi, allreduce, smoke) share: their options, the nodes they run on,
each node's profile, the node address other nodes reach it at, and the way to reach the nodes.

StageOptions extends context.Options with the stages' own settings; `settings(ctx)` gives them for
any context (defaults when the context was built with plain Options, e.g. by other tests)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields
from typing import Any

from .. import profiles
from ..model import Status
from .context import ClusterContext, ClusterResult, Options
from .ssh import RemoteHosts

ALL_STAGES = ("consistency", "network", "mpi", "allreduce", "smoke", "stragglers")
FRAMEWORKS = {  # --framework -> (stack whose python runs it, workload key in workloads/launch.py)
    "tf-horovod": ("tf-horovod", "horovod"),
    "torch": ("torch", "torch"),
    "tf-ps": ("tf-horovod", "tf-ps"),
}
STACKS_DIR = "/opt/stacks"  # the frameworks role's convention: /opt/stacks/<stack>/bin/python
REMOTE_DIR = "/var/tmp/gpucheck"  # where workload scripts are copied on the nodes


@dataclass
class StageOptions(Options):
    stages: tuple[str, ...] = ALL_STAGES
    framework: str = "tf-horovod"
    pair_seconds: float = 3.0
    pair_fraction: float = 0.7
    stage_timeout: float = 600.0
    smoke_steps: int = 20  # steps per epoch on every rank (2 epochs)
    allreduce_size: str = "64M"
    scaling_efficiency_min: float | None = None  # warn below; None: reported beside the published figures only


def settings(ctx: ClusterContext) -> StageOptions:
    if isinstance(ctx.options, StageOptions):
        return ctx.options
    known = {f.name for f in fields(Options)}
    return StageOptions(**{k: v for k, v in vars(ctx.options).items() if k in known})


def runner(ctx: ClusterContext) -> RemoteHosts:
    return RemoteHosts(ctx.inventory.hosts, ctx.options)


def blamed_so_far(ctx: ClusterContext) -> dict[str, str]:
    """Nodes a failed cluster check has named so far (drift, a bad link, MPI not starting on them)."""
    out: dict[str, str] = {}
    for result in ctx.results:
        if isinstance(result, ClusterResult) and result.status == Status.FAIL:
            for node, why in result.nodes.items():
                out.setdefault(node, f"{result.check}: {why}")
    return out


def participants(ctx: ClusterContext, exclude_blamed: bool = True) -> tuple[list[str], dict[str, str]]:
    """(nodes a stage runs on, node -> why left out). Usable nodes (reported, did not fail their own
    checks) less those already blamed by a failed cluster check: one bad node must not fail every
    collective after it."""
    usable = ctx.usable()
    left_out = {n: "no report: " + ctx.nodes[n].reason for n in ctx.nodes if n not in ctx.checked()}
    left_out.update({n: "failed its node checks" for n in ctx.checked() if n not in usable})
    if exclude_blamed:
        blamed = blamed_so_far(ctx)
        left_out.update({n: why for n, why in blamed.items() if n in usable})
        usable = [n for n in usable if n not in blamed]
    return usable, left_out


def left_out_text(left_out: dict[str, str], limit: int = 6) -> str:
    if not left_out:
        return ""
    items = list(left_out.items())
    shown = "; ".join(f"{n} ({why[:80]})" for n, why in items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return f"; left out: {shown}{more}"


_PROFILE_CACHE: dict[str, profiles.Profile | None] = {}


def node_profile(ctx: ClusterContext, node: str) -> profiles.Profile | None:
    """The profile the node was checked against (--profile wins), loaded here; None if unknown here."""
    name = ctx.options.profile
    if not name and node in ctx.nodes:
        name = (ctx.nodes[node].report or {}).get("profile")
    if not name:
        return None
    if name not in _PROFILE_CACHE:
        try:
            _PROFILE_CACHE[name] = profiles.load(str(name))
        except profiles.ProfileError:
            _PROFILE_CACHE[name] = None
    return _PROFILE_CACHE[name]


def profile_value(ctx: ClusterContext, nodes: list[str], section: str, key: str) -> Any:
    """The value the nodes' profiles agree on (the first node's when they differ; None if none has it)."""
    for node in nodes:
        profile = node_profile(ctx, node)
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


def agent_argv(ctx: ClusterContext) -> list[str]:
    return shlex.split(ctx.options.remote_command)


def stack_python(ctx: ClusterContext, node: str, stack: str) -> str | None:
    """The stack's python on the node: from the node's facts when it reports the path
    (facts.stacks.<stack>.python), else by convention /opt/stacks/<stack>/bin/python if the node
    reports the stack at all; None when the node has no such stack."""
    facts = ctx.nodes[node].facts or {}
    declared = (facts.get("stacks") or {}).get(stack)
    if isinstance(declared, dict) and declared.get("python"):
        return str(declared["python"])
    if stack in (facts.get("frameworks") or {}):
        return f"{STACKS_DIR}/{stack}/bin/python"
    return None


def hostname(ctx: ClusterContext, node: str) -> str:
    """The node's own hostname as its agent reported it (what a rank running there prints)."""
    return str((ctx.nodes[node].report or {}).get("host") or node)
