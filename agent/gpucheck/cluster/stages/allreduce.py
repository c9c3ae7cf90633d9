"""All-reduce stage: bus bandwidth of one all-reduce across every node, against the profile.

Where nccl-tests is installed on the launcher (`all_reduce_perf` on PATH): one rank per node driving
all its GPUs (`mpirun ... all_reduce_perf -b SIZE -e SIZE -g GPUS -c 1`, one large size: "Avg bus
bandwidth" would average a whole sweep), parsed by parsers.nccl_tests, busbw against the profile's
bandwidth.nccl_allreduce_internode_busbw_GBps_min. Otherwise the built-in benchmark
(workloads/allreduce_bench.py) with the stack's Horovod under mpirun: NCCL on GPU nodes, MPI/Gloo on
CPU nodes, computed as nccl-tests computes busbw.

Across nodes the data crosses the network, slower than NVLink inside one node: the stage is judged
against the inter-node minimum, and against the node's own (intra-node) nccl_allreduce_busbw_GBps_min
only when the profile states no inter-node one. The reason names the key that judged it."""

from __future__ import annotations

import time

from ...model import Result, Status
from ...parsers import ParseError, parse
from ...report import values
from ...workloads.launch import script_path
from ...workloads.results import judge_allreduce, parse_results
from .. import jobs, launchers
from ..context import ClusterContext, ClusterResult, Options
from ..frameworks import HOROVOD_STACK
from ..layout import Layout
from ..nodes import participants, remote_hosts, threshold, unknown_thresholds
from ..ssh.client import RemoteHosts

CHECK = "cluster.allreduce"
INTERNODE_KEY = "nccl_allreduce_internode_busbw_GBps_min"
INTRANODE_KEY = "nccl_allreduce_busbw_GBps_min"
DEFAULT_SIZE_B = 8 * 1024**3
BUILTIN = "builtin"  # no all_reduce_perf on the launcher: workloads/allreduce_bench.py
REMEDIATION = ("run it by hand with NCCL_DEBUG=INFO (which transport: NET/IB or Socket?); check the IB links "
               "(cluster.network), GPUDirect RDMA and the NCCL version on every node")


def minimum_for(ctx: ClusterContext, nodes: list[str]) -> tuple[float | None, str]:
    """(the bus bandwidth minimum, the words naming where it came from) for an all-reduce across `nodes`."""
    if len(nodes) > 1:
        internode = threshold(ctx, nodes, "bandwidth", INTERNODE_KEY)
        if internode is not None:
            return internode, f"bandwidth.{INTERNODE_KEY}"
        fallback = threshold(ctx, nodes, "bandwidth", INTRANODE_KEY)
        if fallback is not None:
            return fallback, f"bandwidth.{INTRANODE_KEY}: the profile sets no {INTERNODE_KEY}"
        return None, f"the profile sets neither {INTERNODE_KEY} nor {INTRANODE_KEY}: not judged"
    minimum = threshold(ctx, nodes, "bandwidth", INTRANODE_KEY)
    return minimum, (f"bandwidth.{INTRANODE_KEY}" if minimum is not None
                     else f"the profile sets no {INTRANODE_KEY}: not judged")


def allreduce_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    began = time.monotonic()
    cast = participants(ctx, gpu_work=True)
    nodes = cast.nodes
    if len(nodes) < 2:
        return [cast.skip(CHECK, f"{len(nodes)} usable node(s): a multi-node all-reduce needs two")]
    result = measure(ctx, run or remote_hosts(ctx), nodes, ctx.options.stage_timeout)
    result.reason += cast.note() + unknown_thresholds(ctx, nodes)  # the minimum is theirs
    result.duration_s = time.monotonic() - began
    return [result]


def measure(ctx: ClusterContext, run: RemoteHosts, nodes: list[str], timeout: float,
            tool: list[str] | None = None) -> ClusterResult:
    """One all-reduce across `nodes`, judged against the profile: all_reduce_perf where the launcher has it, else
    the built-in benchmark. `tool`: where the caller keeps which one was found (probed once, then reused)."""
    launcher, tool = nodes[0], [] if tool is None else tool
    if not tool:
        probe = launchers.of(ctx).probe(ctx, run, launcher, "command -v all_reduce_perf", 30)
        if probe.error and probe.kind != "timeout":
            return ClusterResult(CHECK, Status.ERROR, reason=f"cannot reach the launcher {launcher}: "
                                 f"{probe.describe()}")
        tool.append(probe.stdout.strip().splitlines()[-1] if probe.ok and probe.stdout.strip() else BUILTIN)
    minimum, source = minimum_for(ctx, nodes)
    if tool[0] != BUILTIN:
        return _nccl_tests(ctx, run, nodes, tool[0], minimum, source, timeout)
    return _builtin(ctx, run, nodes, minimum, source, ctx.options, timeout)


def _nccl_tests(ctx: ClusterContext, run: RemoteHosts, nodes: list[str], binary: str, minimum: float | None,
                source: str, timeout: float) -> ClusterResult:
    size = int(threshold(ctx, nodes, "bandwidth", "nccl_allreduce_size_B") or DEFAULT_SIZE_B)
    gpus = min(jobs.ranks_per_node(ctx, n, True) for n in nodes)
    lay = Layout([(n, 1) for n in nodes])
    program = [binary, "-b", str(size), "-e", str(size), "-g", str(gpus), "-n", "20", "-w", "5", "-c", "1"]
    done = launchers.of(ctx).mpi_job(ctx, run, lay, program, {}, timeout)
    expected = f">= {minimum:g} GB/s" if minimum else None
    where = f"{len(nodes)} nodes x {gpus} GPUs, {values.size(size)}"
    try:
        parsed = parse("nccl-tests", done.stdout)
    except ParseError as exc:
        return ClusterResult(CHECK, Status.ERROR, None, expected,
                             f"all_reduce_perf across {where}: {done.describe() if not done.ok else exc}",
                             REMEDIATION, done.evidence())
    busbw = parsed.get("busbw_largest_GBps")
    measured = {"busbw_GBps": busbw, "tool": "all_reduce_perf", "size_B": size, "nodes": len(nodes),
                "gpus_per_node": gpus, "hosts": parsed.get("hosts"), "wrong": parsed.get("wrong_total")}
    if parsed.get("failed") or not done.ok:
        errors = "; ".join(parsed.get("errors") or []) or done.describe()
        if parsed.get("wrong_total"):
            errors = f"{parsed['wrong_total']} wrong values; " + errors
        return ClusterResult(CHECK, Status.FAIL if parsed.get("failed") else Status.ERROR, measured, expected,
                             f"all_reduce_perf across {where} failed: {errors}", REMEDIATION, done.evidence())
    if busbw is None:
        return ClusterResult(CHECK, Status.ERROR, measured, expected, f"all_reduce_perf across {where}: no result row",
                             REMEDIATION, done.evidence())
    if minimum and busbw < minimum:
        return ClusterResult(CHECK, Status.FAIL, measured, expected,
                             f"bus bandwidth {busbw:g} GB/s < {minimum:g} GB/s ({source}) across {where}",
                             REMEDIATION, done.evidence())
    judged = f", >= {minimum:g} GB/s ({source})" if minimum else f" ({source})"
    return ClusterResult(CHECK, Status.PASS, measured, expected,
                         f"bus bandwidth {busbw:g} GB/s across {where} (all_reduce_perf){judged}",
                         evidence=done.evidence())


def _builtin(ctx: ClusterContext, run: RemoteHosts, nodes: list[str], minimum: float | None, source: str,
             options: Options, timeout: float) -> ClusterResult:
    stack = HOROVOD_STACK
    if why := launchers.of(ctx).job_stacks(ctx, run):
        return ClusterResult(CHECK, Status.ERROR, reason=f"no all_reduce_perf on {nodes[0]}, and the built-in "
                             f"benchmark's stack cannot be known: {why}")
    python, unusable = jobs.pythons(ctx, nodes, stack)
    if python is None or unusable:
        why = "; ".join(f"{n}: {w}" for n, w in unusable.items())
        return ClusterResult(CHECK, Status.ERROR, reason=f"no all_reduce_perf on {nodes[0]} and the built-in benchmark "
                             f"cannot run: {why or 'no ' + stack + ' stack'}",
                             remediation="install nccl-tests (build with MPI=1) or the tf-horovod stack (site.yml)")
    gpus = jobs.on_gpus(ctx, nodes)
    lay = jobs.layout(ctx, nodes, gpus)
    path, failed = launchers.of(ctx).distribute(ctx, run, nodes, script_path("allreduce"))
    if failed:
        return ClusterResult(CHECK, Status.ERROR, reason="cannot copy the benchmark to " + "; ".join(
            r.describe() for r in failed.values()))
    size = options.allreduce_size
    program = [python, path, "--framework", "horovod", "--size", size, "--timeout-s", f"{max(30.0, timeout - 15):g}"]
    done = launchers.of(ctx).mpi_job(ctx, run, lay, program, jobs.rank_env(gpus), timeout)
    rows = parse_results(done.stdout)
    judged_min = minimum if gpus else None
    verdict = judge_allreduce(rows, lay.ranks, judged_min)
    busbw = verdict.get("busbw_GBps")
    backend = next((r.get("backend") for r in rows if r.get("backend")), None)
    said_size = values.size(verdict["bytes"]) if isinstance(verdict.get("bytes"), int) else f"{size}B"
    where = (f"{lay.ranks} ranks on {len(nodes)} nodes ({'GPUs' if gpus else 'CPU'}, Horovod/{backend or '?'}), "
             f"{said_size}")
    measured = {"busbw_GBps": busbw, "algbw_GBps": verdict.get("algbw_GBps"), "tool": "allreduce_bench",
                "backend": backend, "bytes": verdict.get("bytes"), "ranks": lay.ranks, "nodes": len(nodes)}
    expected = f">= {judged_min:g} GB/s" if judged_min else None
    if not verdict["passed"] or not done.ok:
        bad_rows = [r for r in rows if isinstance(r.get("rank"), int) and (r.get("wrong") or not r.get("ok"))]
        ranks = {**verdict, "failed_ranks": [{"rank": r["rank"], "error": r.get("error") or f"{r.get('wrong')} wrong "
                                              "element(s)"} for r in bad_rows]}
        blamed = jobs.blame_ranks(ranks, lay, done.timed_out)
        reasons = "; ".join(verdict["reasons"]) or done.describe()
        if judged_min:
            reasons += f" (minimum: {source})"
        status = Status.FAIL if verdict["reasons"] else Status.ERROR
        return ClusterResult(CHECK, status, measured, expected, f"all-reduce across {where}: {reasons}", REMEDIATION,
                             done.evidence(), nodes=blamed if status == Status.FAIL else {})
    if gpus:
        note = f", >= {minimum:g} GB/s ({source})" if minimum else f" ({source})"
    else:
        note = (" (CPU ranks: not judged against the GPU minimum"
                + (f" {minimum:g} GB/s, {source}" if minimum else f"; {source.split(':')[0]}") + ")")
    return ClusterResult(CHECK, Status.PASS, measured, expected,
                         f"bus bandwidth {busbw:.4g} GB/s across {where}, every element correct{note}",
                         evidence=done.evidence())

