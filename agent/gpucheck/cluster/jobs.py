"""Running a workload script (agent/gpucheck/workloads/*.py) across nodes, for the all-reduce, smoke and training
stages: which nodes and which python, how ranks lie on the nodes, what every rank gets, and which node a missing or
failed rank was on. The run's launcher (launchers/) copies the script and starts the job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..model import Status
from .context import ClusterContext, ClusterResult
from .frameworks import Framework
from .layout import Layout
from .nodes import Participants, participants, stack_python, thresholds, unknown_thresholds
from .ssh.client import RemoteHosts
from .ssh.result import Remote

REMOTE_DIR = "/var/tmp/gpucheck"  # where workload scripts are copied on the nodes
# ssh as mpirun starts it: never wait on a prompt (a missing key or host key), give up on a dead node.
RSH_ARGS = "-o BatchMode=yes -o ConnectTimeout=10"
# --tag-output: each line says its rank ("[1,3]<stdout>:..."), how a missing or failed rank is traced to its node.
MPIRUN_EXTRA = ("--tag-output", "--mca", "plm_rsh_args", RSH_ARGS)
# What every rank gets: quiet frameworks, one OpenMP thread per rank (CPU ranks share the cores).
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
CPU_RANK_ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def stack_cast(ctx: ClusterContext, check: str, framework: Framework, name: str) -> Participants | ClusterResult:
    """The nodes a job of `framework` can run on (usable, with its stack's frameworks), or the stage's one
    result when there are none: an error where a node's profile requires the frameworks, else a skip."""
    stack, needs = framework.stack, framework.needs
    cast = participants(ctx, gpu_work=True)
    if not cast.nodes:
        return cast.skip(check, "no usable node")
    lacking = {n: f"no {'/'.join(needs)} in its {stack} stack" for n in cast.nodes
               if not all(_has(ctx, n, stack, f) for f in needs)}
    if len(lacking) == len(cast.nodes):
        status = Status.ERROR if _required(ctx, cast.nodes, needs) else Status.SKIP
        if ctx.job_image is not None:  # the jobs run in their own image: it is what lacks them
            image = ctx.job_image
            said = "; ".join(f"{k}: {v}" for k, v in (image.get("errors") or {}).items() if k in needs)
            where = f"missing in the jobs' image ({image.get('python')}{': ' + said if said else ''})"
            remedy = "use a --job-template whose image has them (its python: the annotation gpucheck/python)"
        else:
            where = "missing on every node (no node reports it in facts.frameworks)"
            remedy = f"install the {stack} stack (site.yml, frameworks role)"
        return ClusterResult(check, status, reason=f"the {stack} stack with {' and '.join(needs)} is {where}: "
                             f"cannot run the {name} job" + unknown_thresholds(ctx, cast.nodes),  # their profile's
                             remediation=f"{remedy} or pick another --framework")
    return Participants([n for n in cast.nodes if n not in lacking], {**cast.left_out, **lacking})


def _has(ctx: ClusterContext, node: str, stack: str, framework: str) -> bool:
    versions = (ctx.stack_facts(node).get("frameworks") or {}).get(stack) or {}
    return versions.get(framework) is not None


def _required(ctx: ClusterContext, nodes: list[str], frameworks: tuple[str, ...]) -> bool:
    for node in nodes:
        profile = thresholds(ctx, node)
        if profile and set(frameworks) & set(profile.get("frameworks", "required", []) or []):
            return True
    return False


def on_gpus(ctx: ClusterContext, nodes: Sequence[str]) -> bool:
    """Ranks go on GPUs when the nodes' thresholds say the frameworks must use them (gpu_required); CPU
    lab nodes (tensorflow-cpu under simulated GPUs) run one CPU rank per node. A node whose report has
    no thresholds (an older agent): GPUs when it reports some."""
    def one(node: str) -> bool:
        profile = thresholds(ctx, node)
        if profile is not None:
            return bool(profile.get("frameworks", "gpu_required", True))
        return int((ctx.nodes[node].facts or {}).get("gpu_count") or 0) > 0

    return bool(nodes) and all(one(n) for n in nodes)


def ranks_per_node(ctx: ClusterContext, node: str, gpus: bool) -> int:
    if not gpus:
        return 1
    return max(1, int((ctx.nodes[node].facts or {}).get("gpu_count") or 1))


def layout(ctx: ClusterContext, nodes: Sequence[str], gpus: bool) -> Layout:
    return Layout([(n, ranks_per_node(ctx, n, gpus)) for n in nodes])


def pythons(ctx: ClusterContext, nodes: Sequence[str], stack: str) -> tuple[str | None, dict[str, str]]:
    """(the stack's python path every node shares, node -> why not usable)."""
    found = {n: stack_python(ctx, n, stack) for n in nodes}
    missing = {n: f"no {stack} stack reported by its agent (facts.frameworks)" for n, p in found.items() if not p}
    paths = {p for p in found.values() if p}
    if len(paths) > 1:
        first = found[nodes[0]] or sorted(paths)[0]
        missing.update({n: f"{stack} python at {p}, not {first} as on {nodes[0]}" for n, p in found.items()
                        if p and p != first})
        return first, missing
    return (next(iter(paths)) if paths else None), missing


def start_all(run: RemoteHosts, starts: list[tuple[str, str]], timeout: float) -> list[Remote]:
    """Start one command per (node, command) at once and wait for every one."""
    started = [run.start(node, cmd, timeout) for node, cmd in starts]
    with ThreadPoolExecutor(max_workers=max(1, len(started)), thread_name_prefix="gpucheck-task") as pool:
        return list(pool.map(lambda bg: bg.wait(), started))


def combined(parts: list[Remote]) -> Remote:
    """One Remote standing for several: ok when all are; the first failure's error."""
    first_bad = next((p for p in parts if not p.ok), None)
    return Remote(parts[0].host if parts else "", "\n".join(p.command for p in parts),
                  "".join(p.stdout for p in parts), "\n".join(p.stderr for p in parts if p.stderr),
                  0 if first_bad is None else first_bad.exit, first_bad.error if first_bad else None,
                  first_bad.kind if first_bad else "", max((p.wall_s for p in parts), default=0.0))


def rank_watchdog_s(stage_timeout: float) -> float:
    """Each rank's own watchdog: a little under the launcher's limit, so a hung rank reports itself."""
    return max(30.0, stage_timeout - 15)


def rank_env(gpus: bool) -> dict[str, str]:
    return {**RANK_ENV, **({} if gpus else CPU_RANK_ENV)}


def blame_ranks(verdict: Mapping[str, Any], lay: Layout, timed_out: bool) -> dict[str, str]:
    """node -> what its ranks did wrong, from a judge_smoke/judge_allreduce verdict. Nobody is blamed
    when every rank went wrong the same way (the stack or the launcher, not one node)."""
    why: dict[str, list[str]] = {}
    silent = "hung (no result before the timeout)" if timed_out else "reported nothing (crashed?)"
    for rank in verdict.get("missing_ranks") or []:
        node = lay.node_of(rank)
        if node:
            why.setdefault(node, []).append(f"rank {rank} {silent}")
    for item in verdict.get("failed_ranks") or []:
        node = lay.node_of(item.get("rank")) if isinstance(item.get("rank"), int) else None
        if node:
            why.setdefault(node, []).append(f"rank {item.get('rank')} failed: {str(item.get('error'))[:120]}")
    for item in verdict.get("weights_odd") or []:
        node = lay.node_of(item.get("rank")) if isinstance(item.get("rank"), int) else None
        if node and verdict.get("weights_majority"):
            why.setdefault(node, []).append(f"rank {item.get('rank')} ended with different weights")
    for item in verdict.get("loss_not_fallen") or []:
        node = lay.node_of(item.get("rank")) if isinstance(item.get("rank"), int) else None
        if node:
            why.setdefault(node, []).append(f"rank {item.get('rank')}: {verdict.get('loss_rule', 'loss did not fall')}")
    if len(why) == len(lay.slots) and len(lay.slots) > 1:
        return {}
    return {node: "; ".join(items) for node, items in why.items()}
