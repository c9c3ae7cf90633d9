"""Stage `burn` (opt-in, docs/burn.md): every GPU of every node under the sustained GEMM at once while an all-reduce
across the nodes keeps the fabric loaded, for --burn-minutes. The failures that matter at scale come from the whole
cluster at full load: a rack's cooling or power, links that fail only when hot.

Each node runs its own burn-in (`gpucheck node --only gpu.burn --burn-seconds S`: NVML sampled throughout, its
clock-event reasons, temperatures, power and Xids judged by the node's rules) over SSH, all nodes started together.
Meanwhile the all-reduce (all_reduce_perf where the launcher has it, else the built-in benchmark: the allreduce
stage's) runs again and again from the launcher, after measuring it once cold, before the burn. A long burn runs in
rounds of at most ROUND_S, the report rewritten after each, so progress shows and Ctrl-C loses one round at most:
it ends the nodes' burns, keeps the finished rounds and the report is written (interrupted). burn_verdict judges."""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any

from ...model import Result, Status
from ...redact import for_terminal
from ...report.cluster.burnin import finite
from .. import jobs, launchers
from ..context import ClusterContext, ClusterResult, NodeOutcome
from ..nodes import Participants, participants, remote_hosts
from ..ssh.client import RemoteHosts, command
from . import allreduce, burn_record, burn_verdict

STAGE, CHECK = "burn", "cluster.burn"
ROUND_S = 300.0  # the longest round: how often a long burn says where it is and rewrites the report
SETTLE_S = 20.0  # after the burns start, before an all-reduce counts as under load (agents start, GPUs heat)
AGENT_MARGIN_S = 180.0  # a node's run beyond its burn: the agent's start, the workers' start, the verdict
POLL_S = 0.5  # how often the waiting main thread looks up (Ctrl-C is seen between looks)


def say(text: str) -> None:
    print(for_terminal(f"burn: {text}"), flush=True)


def burn_command(ctx: ClusterContext, seconds: float) -> str:
    """The node's own burn, as JSON: its verdict, and facts.burnin with its GPUs' series."""
    argv = [*ctx.options.agent_argv(), "node", "--format", "json", "--only", "gpu.burn", "--burn-seconds",
            f"{seconds:g}", "--bench-timeout", f"{seconds + AGENT_MARGIN_S / 2:g}"]
    if ctx.options.profile:
        argv += ["--profile", ctx.options.profile]
    if ctx.options.node_timeout:
        argv += ["--timeout", f"{ctx.options.node_timeout:g}"]
    return command(argv)


def rounds_of(seconds: float) -> tuple[int, float]:
    """(rounds, seconds each): equal rounds, none longer than ROUND_S."""
    count = max(1, math.ceil(seconds / ROUND_S - 1e-9))
    return count, seconds / count


def burn_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    options = ctx.options
    if STAGE not in options.stages_asked:
        return [ClusterResult(CHECK, Status.SKIP, reason="opt-in: it takes every GPU of the cluster for its "
                              "duration; run it with --burn-minutes M or --stages ...,burn")]
    cast = participants(ctx, gpu_work=True)
    if not cast.nodes:
        return [cast.skip(CHECK, "no usable node to burn")]
    launcher = launchers.of(ctx)
    held_s = options.burn_seconds + 2 * AGENT_MARGIN_S + 2 * options.stage_timeout
    with launcher.holding(ctx, "burn", cast.nodes, held_s) as why:
        if why:
            return [ClusterResult(CHECK, Status.ERROR, reason=f"cannot burn {launcher.through}: {why}" + cast.note())]
        return burn_all(ctx, cast, run or remote_hosts(ctx))


def burn_all(ctx: ClusterContext, cast: Participants, run: RemoteHosts) -> list[Result]:
    """The rounds, each said as it ends and the report rewritten; the verdicts (on Ctrl-C: of the rounds done)."""
    options, nodes = ctx.options, cast.nodes
    count, each = rounds_of(options.burn_seconds)
    racks = {h.name: (str(h.vars["rack"]) if h.vars.get("rack") else None) for h in ctx.inventory.hosts
             if h.name in nodes}
    record = burn_record.new_record(options.burn_seconds, count, racks, options.launcher)
    ctx.burn = record
    floor, source = allreduce.minimum_for(ctx, nodes)
    floor = floor if jobs.on_gpus(ctx, nodes) else None  # CPU ranks: the GPUs' floor says nothing of them
    tool: list[str] = []
    try:
        if len(nodes) > 1:
            say(f"all-reduce across {len(nodes)} nodes, cold")
            burn_record.add_allreduce(record, allreduce.measure(ctx, run, nodes, options.stage_timeout, tool), "cold")
        for i in range(count):
            say(f"round {i + 1} of {count}: {len(nodes)} node(s) burning for {each:g} s"
                + (", the all-reduce looping across them" if len(nodes) > 1 else ""))
            outcomes = one_round(ctx, run, nodes, each, record, tool)
            burn_record.add_round(record, outcomes)
            say(round_text(record, outcomes))
            if ctx.checkpoint:
                ctx.checkpoint()
    except KeyboardInterrupt:
        record["interrupted"] = True
        ctx.results.extend(finish(ctx, record, floor, source, cast.note()))
        raise
    return finish(ctx, record, floor, source, cast.note())


def finish(ctx: ClusterContext, record: dict[str, Any], floor: float | None, source: str,
           note: str) -> list[ClusterResult]:
    """The verdicts, and each node's slowest GPU under the burn among the figures stragglers compares."""
    results = burn_verdict.judge(record, floor, source, ctx.options.burn_fabric_fraction)
    results[0].reason += note
    for node, entry in record["nodes"].items():
        medians = [g["burn_TFLOPS_median"] for g in entry["gpus"].values()
                   if finite(g.get("burn_TFLOPS_median"))]
        if medians:
            ctx.figures.setdefault("burn_all_nodes_TFLOPS_min_gpu", {})[node] = min(medians)
    return results


def round_text(record: dict[str, Any], outcomes: dict[str, NodeOutcome]) -> str:
    statuses = [r["rounds"][-1]["status"] for r in record["nodes"].values() if r["rounds"]]
    bad = [f"{n} {record['nodes'][n]['rounds'][-1]['status']}" for n in outcomes
           if record["nodes"][n]["rounds"][-1]["status"] not in ("pass", "skip")]
    loaded = [r["busbw_GBps"] for r in record["fabric"]["loaded"] if finite(r.get("busbw_GBps"))]
    cold = (record["fabric"]["cold"] or {}).get("busbw_GBps")
    fabric = (f"; all-reduce {loaded[-1]:g} GB/s under load" + (f" (cold {cold:g})" if cold else "")) if loaded else ""
    return (f"round {record['rounds_done']} of {record['rounds']} done: {statuses.count('pass')} of {len(statuses)} "
            f"node(s) pass" + (f" ({', '.join(bad[:8])})" if bad else "") + fabric)


def one_round(ctx: ClusterContext, run: RemoteHosts, nodes: list[str], seconds: float, record: dict[str, Any],
              tool: list[str]) -> dict[str, NodeOutcome]:
    """Every node's burn at once and, across them meanwhile, the all-reduce again and again; each node's outcome.
    The waiting is done in threads, so the main thread sees Ctrl-C: it ends every node's burn, then re-raises."""
    limit = seconds + AGENT_MARGIN_S
    cmd = burn_command(ctx, seconds)
    burns = launchers.of(ctx).burns(ctx, run, nodes, cmd, limit)
    began = time.monotonic()
    ended: dict[str, NodeOutcome] = {}
    stop = threading.Event()  # the burns have ended (or Ctrl-C): no further all-reduce

    def fabric() -> None:
        if stop.wait(min(SETTLE_S, seconds / 4)):
            return
        last = 0.0
        while not stop.is_set() and time.monotonic() - began + last < seconds:
            took = time.monotonic()
            result = allreduce.measure(ctx, run, nodes, ctx.options.stage_timeout, tool)
            if stop.is_set() and result.status == Status.PASS:
                return  # the burns ended during this run: not a figure under load
            burn_record.add_allreduce(record, result, "loaded")
            last = time.monotonic() - took
            if result.status not in (Status.PASS, Status.WARN):
                return  # a broken all-reduce stays broken: say it once

    failed: list[str] = []

    def burn() -> None:
        try:
            ended.update(burns.run())
        except Exception as exc:  # a bug below the stage: each node's error, and no burn left running
            failed.append(f"{type(exc).__name__}: {exc}")
            burns.stop()

    burner = threading.Thread(target=burn, daemon=True, name="gpucheck-burn-nodes")
    loader = threading.Thread(target=fabric, daemon=True, name="gpucheck-burn-fabric")
    try:
        burner.start()
        if len(nodes) > 1:
            loader.start()
        while burner.is_alive():
            burner.join(POLL_S)
        stop.set()
        while loader.is_alive():
            loader.join(POLL_S)
    except KeyboardInterrupt:
        stop.set()
        print("gpucheck: ending the burn on every node ...", file=sys.stderr, flush=True)
        burns.stop()
        raise
    lost = f"its burn gave no outcome: gpucheck lost track of it ({failed[0] if failed else 'no reason known'})"
    return {n: ended.get(n) or NodeOutcome(n, Status.ERROR, lost, "ssh") for n in nodes}
