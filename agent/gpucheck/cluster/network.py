"""Network stage: bandwidth between pairs of nodes, and which node to blame for a slow pair.

Pairs come from the round-robin schedule (schedule.round_robin, or --network-sample K rounds of it);
a round's pairs are disjoint, so they run at once. Each pair is measured one way, a -> b:
- where the nodes' profiles require InfiniBand: perftest `ib_write_bw --report_gbits` (server on b,
  client on a to b's ib_address, or its address), parsed by parsers.perftest;
- otherwise the agent's own TCP test: `gpucheck net serve` on b, `gpucheck net send` on a.

A slow pair is below --pair-fraction of the reference figure: the median, over the nodes, of each
node's best pair (a bad node drags down every pair it is in: with 3 nodes and one bad, two pairs of
three are slow and the plain median of the pairs would be the slow figure). Over InfiniBand a pair is
also slow below the profile's bandwidth.ib_write_bw_Gbps_min. Slow pairs are re-tested against
known-good partners (schedule.suspects/blame): a node slow with every good partner is the bad one
(fail; drained); a slow pair with neither node to blame is re-measured once, and is a slow path (the
link or switch between them: warn) only if it is slow again.

Fills ctx.pairs (one entry per pair, its first figure; re-tests under "retest") and
ctx.figures["net_Gbps"] (each node's median over its pairs) for the straggler comparison."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..model import Result, Status
from ..netbench import DEFAULT_PORT
from ..parsers import ParseError, parse
from . import schedule
from .context import ClusterContext, ClusterResult
from .ssh import RemoteHosts, command
from .stagekit import address, agent_argv, left_out_text, node_profile, participants, runner, settings

CHECK = "cluster.network"
METRIC = "net_Gbps"
UNIT = "Gb/s"
ACCEPT_TIMEOUT_S = 20.0
IB_CONNECT_ATTEMPTS = 3
REMEDIATION_NODE = ("check the node's link: cable/transceiver, port speed and errors (ethtool -S, ibstat, "
                    "perfquery), its switch port; re-run gpucheck cluster --stages network after the fix")
REMEDIATION_PATH = ("both nodes are fast with other partners: check the path between them (switch, "
                    "uplink, routing, ECMP hashing)")


@dataclass
class Measured:
    a: str
    b: str
    method: str
    value: float | None = None
    error: str | None = None
    evidence: str = ""
    wall_s: float = 0.0


@dataclass
class Plan:
    method: str  # tcp | ib_write_bw
    note: str = ""
    minimum: float | None = None  # the profile's floor (InfiniBand), Gb/s


@dataclass
class Outcome:
    first: dict[schedule.Pair, Measured] = field(default_factory=dict)
    retest: dict[schedule.Pair, list[Measured]] = field(default_factory=dict)


def choose_method(ctx: ClusterContext, nodes: list[str]) -> Plan:
    """InfiniBand when every node's profile requires it; TCP otherwise (said so when some do)."""
    wants_ib = {n: bool(p and p.get("infiniband", "required", False)) for n in nodes
                for p in [node_profile(ctx, n)]}
    if nodes and all(wants_ib.values()):
        minima = [p.get("bandwidth", "ib_write_bw_Gbps_min") for n in nodes for p in [node_profile(ctx, n)] if p]
        minima = [float(m) for m in minima if m is not None]
        return Plan("ib_write_bw", minimum=min(minima) if minima else None)
    some = sorted(n for n, ib in wants_ib.items() if ib)
    note = (f"TCP for every pair: only {len(some)} of {len(nodes)} nodes' profiles have InfiniBand "
            "(compare one kind of node at a time with --pattern)") if some else ""
    return Plan("tcp", note)


def _last_json(text: str, key: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and key in doc:
                return doc
    return None


def measure_tcp(ctx: ClusterContext, run: RemoteHosts, a: str, b: str, seconds: float,
                port: int = DEFAULT_PORT) -> Measured:
    """a streams to b for `seconds` with the agent's built-in test; b's figure counts what arrived."""
    began = time.monotonic()
    agent = agent_argv(ctx)
    found = Measured(a, b, "tcp")
    serve = command([*agent, "net", "serve", "--port", port, "--timeout", f"{ACCEPT_TIMEOUT_S:g}"])
    server = run.start(b, serve, ACCEPT_TIMEOUT_S + seconds + 30)
    if not server.wait_for('"listening"', ACCEPT_TIMEOUT_S):
        done = server.wait(5)
        found.error = f"the receiver on {b} did not start: {done.describe()}"
        found.evidence = done.evidence()
        found.wall_s = time.monotonic() - began
        return found
    send = command([*agent, "net", "send", address(ctx, b), "--port", port, "--seconds", f"{seconds:g}"])
    client = run.run(a, send, seconds + ACCEPT_TIMEOUT_S + 10)
    if not client.ok:
        server.kill()
    done = server.wait(seconds + 30)
    found.evidence = f"{client.evidence()}\n{done.evidence()}"
    report = _last_json(done.stdout, "Gbps") if done.stdout else None
    if report and isinstance(report.get("Gbps"), int | float) and client.ok:
        found.value = round(float(report["Gbps"]), 3)
    elif not client.ok:
        sent = _last_json(client.stdout, "error")
        found.error = f"the sender on {a} failed: {sent['error'] if sent else client.describe()}"
    else:
        reason = (report or {}).get("error") or _last_json(done.stdout, "error") or done.describe()
        found.error = f"the receiver on {b} reported no figure: {reason}"
    found.wall_s = time.monotonic() - began
    return found


def measure_ib(ctx: ClusterContext, run: RemoteHosts, a: str, b: str, seconds: float) -> Measured:
    """perftest ib_write_bw, a (client) -> b (server), in duration mode, figures in Gb/s."""
    began = time.monotonic()
    found = Measured(a, b, "ib_write_bw")
    base = ["ib_write_bw", "--report_gbits", "-F", "-D", str(max(1, round(seconds)))]
    server = run.start(b, command(base), seconds + 60)
    # perftest may buffer its "Waiting for client" banner when not on a terminal: a short wait, then
    # the client retries while the server is not listening yet.
    server.wait_for("Waiting for client", 2.0)
    client = None
    for _ in range(IB_CONNECT_ATTEMPTS):
        client = run.run(a, command([*base, address(ctx, b)]), seconds + 30)
        if client.ok or not any(x in client.output for x in ("Couldn't connect", "Unable to connect")):
            break
        time.sleep(1.0)
    assert client is not None
    if not client.ok:
        server.kill()
    done = server.wait(seconds + 30 if client.ok else 5)
    found.evidence = f"{client.evidence()}\n{done.evidence()}"
    found.wall_s = time.monotonic() - began
    try:
        parsed = parse("perftest", client.stdout)
    except ParseError as exc:
        found.error = f"ib_write_bw {a} -> {b}: {client.describe() if not client.ok else exc}"
        return found
    if parsed.get("bw_avg_Gbps") is not None and client.ok:
        found.value = round(float(parsed["bw_avg_Gbps"]), 3)
    else:
        errors = "; ".join(parsed.get("errors") or []) or client.describe()
        found.error = f"ib_write_bw {a} -> {b}: {errors}"
    return found


def measure_round(ctx: ClusterContext, run: RemoteHosts, pairs: Iterable[schedule.Pair], plan: Plan,
                  seconds: float) -> list[Measured]:
    """Disjoint pairs, all at once (bounded by --forks)."""
    pairs = list(pairs)
    if not pairs:
        return []
    measure = measure_ib if plan.method == "ib_write_bw" else measure_tcp
    with ThreadPoolExecutor(max_workers=max(1, min(ctx.options.forks, len(pairs))),
                            thread_name_prefix="gpucheck-pair") as pool:
        return list(pool.map(lambda p: measure(ctx, run, p[0], p[1], seconds), pairs))


def reference(values: dict[schedule.Pair, float]) -> float:
    """The median over nodes of each node's best pair figure."""
    best: dict[str, float] = {}
    for (a, b), value in values.items():
        for node in (a, b):
            best[node] = max(best.get(node, 0.0), value)
    return statistics.median(best.values()) if best else 0.0


def _rounds_of(pairs: list[schedule.Pair]) -> list[list[schedule.Pair]]:
    """Lay pairs out in rounds where no node is in two pairs."""
    rounds: list[list[schedule.Pair]] = []
    todo = list(pairs)
    while todo:
        busy: set[str] = set()
        this, later = [], []
        for a, b in todo:
            if a in busy or b in busy:
                later.append((a, b))
            else:
                this.append((a, b))
                busy.update((a, b))
        rounds.append(this)
        todo = later
    return rounds


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def network_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    s = settings(ctx)
    began = time.monotonic()
    nodes, left_out = participants(ctx)
    if len(nodes) < 2:
        return [ClusterResult(CHECK, Status.SKIP, reason=f"{len(nodes)} usable node(s): no pair to test"
                              + left_out_text(left_out))]
    run = run or runner(ctx)
    plan = choose_method(ctx, nodes)
    rounds = schedule.sample(schedule.round_robin(nodes), s.network_sample)
    outcome = Outcome()
    for pairs in rounds:
        for m in measure_round(ctx, run, pairs, plan, s.pair_seconds):
            outcome.first[schedule.pair(m.a, m.b)] = m
    first = {p: m.value for p, m in outcome.first.items() if m.value is not None}
    errors = [m for m in outcome.first.values() if m.error]
    if not first:
        shown = "; ".join(m.error or "" for m in errors[:4])
        return [ClusterResult(CHECK, Status.ERROR, {"pairs": len(outcome.first), "errors": len(errors)}, None,
                              f"no pair could be measured ({plan.method}): {shown}",
                              "check that the agent runs on the nodes and that nodes reach each other on the "
                              f"test port {DEFAULT_PORT}/tcp" if plan.method == "tcp" else
                              "check ib_write_bw (perftest) and the HCAs on the nodes",
                              evidence="\n\n".join(m.evidence for m in errors[:4]),
                              duration_s=time.monotonic() - began)]
    ref = reference(first)
    threshold = s.pair_fraction * ref
    if plan.minimum is not None:
        threshold = max(threshold, plan.minimum)

    def remeasure(pairs: list[schedule.Pair]) -> dict[schedule.Pair, float]:
        got: dict[schedule.Pair, float] = {}
        for round_pairs in _rounds_of(pairs):
            for m in measure_round(ctx, run, round_pairs, plan, s.pair_seconds):
                key = schedule.pair(m.a, m.b)
                outcome.retest.setdefault(key, []).append(m)
                if m.value is not None:
                    got[key] = m.value
                else:
                    errors.append(m)
        return got

    suspects = schedule.suspects(first, threshold)
    retest = remeasure([p for r in suspects.rounds for p in r]) if suspects.rounds else {}
    blame = schedule.blame(suspects, retest, threshold)
    # A slow pair with neither node to blame: measured once more before it is called a slow path.
    again = remeasure(blame.slow_paths) if blame.slow_paths else {}
    slow_paths = [p for p in blame.slow_paths if again.get(p, 0.0) < threshold]
    transient = [p for p in blame.slow_paths if p not in slow_paths]

    _fill_pairs(ctx, outcome, threshold, blame.bad, slow_paths)
    _fill_figures(ctx, outcome)
    return [_verdict(ctx, s, plan, outcome, first, ref, threshold, blame, slow_paths, transient, errors, left_out,
                     time.monotonic() - began)]


def _fill_pairs(ctx: ClusterContext, outcome: Outcome, threshold: float, bad: dict[str, Any],
                slow_paths: list[schedule.Pair]) -> None:
    seen: dict[schedule.Pair, dict[str, Any]] = {}
    everything = [(p, m, False) for p, m in outcome.first.items()]
    everything += [(p, m, True) for p, ms in outcome.retest.items() for m in ms]
    for key, m, is_retest in everything:
        if m.value is None:
            continue
        entry = seen.get(key)
        if entry is None:
            entry = seen[key] = {"a": m.a, "b": m.b, "value": m.value, "unit": UNIT, "method": m.method,
                                 "status": "pass"}
            if is_retest:
                entry["retest_only"] = True
            ctx.pairs.append(entry)
        else:
            entry.setdefault("retest", []).append(m.value)
        if m.value < threshold:
            if m.a in bad or m.b in bad:
                entry["status"] = "fail"
            elif entry["status"] != "fail" and (key in slow_paths or not is_retest):
                entry["status"] = "warn"
    for entry in seen.values():  # a first-pass slow pair whose re-test was fast and blamed nobody
        key = schedule.pair(entry["a"], entry["b"])
        if entry["status"] == "warn" and key not in slow_paths and not (set(key) & set(bad)) \
                and any(v >= threshold for v in entry.get("retest", [])):
            entry["status"] = "pass"


def _fill_figures(ctx: ClusterContext, outcome: Outcome) -> None:
    per_node: dict[str, list[float]] = {}
    measured = list(outcome.first.values()) + [m for ms in outcome.retest.values() for m in ms]
    for m in measured:
        if m.value is not None:
            per_node.setdefault(m.a, []).append(m.value)
            per_node.setdefault(m.b, []).append(m.value)
    if per_node:
        figures = ctx.figures.setdefault(METRIC, {})
        for node, values in per_node.items():
            figures[node] = round(statistics.median(values), 3)


def _verdict(ctx: ClusterContext, s: Any, plan: Plan, outcome: Outcome, first: dict[schedule.Pair, float],
             ref: float, threshold: float, blame: schedule.Blame, slow_paths: list[schedule.Pair],
             transient: list[schedule.Pair], errors: list[Measured], left_out: dict[str, str],
             duration: float) -> ClusterResult:
    values = list(first.values())
    how = "ib_write_bw" if plan.method == "ib_write_bw" else "TCP (gpucheck net)"
    basis = f"{s.pair_fraction:g} x reference {_fmt(ref)} {UNIT} (median of each node's best pair)"
    if plan.minimum is not None:
        basis += f", and >= the profile's ib_write_bw_Gbps_min {plan.minimum:g} {UNIT}"
    expected = f">= {_fmt(threshold)} {UNIT} ({basis})"
    measured: dict[str, Any] = {
        "method": plan.method, "pairs": len(outcome.first), "rounds_seconds_each": s.pair_seconds,
        "median_Gbps": round(statistics.median(values), 3), "min_Gbps": min(values), "max_Gbps": max(values),
        "reference_Gbps": round(ref, 3), "threshold_Gbps": round(threshold, 3),
        "slow_pairs": [f"{a}-{b}" for a, b in sorted(p for p, v in first.items() if v < threshold)],
        "bad_nodes": sorted(blame.bad), "slow_paths": [f"{a}-{b}" for a, b in slow_paths],
        "inconclusive": blame.inconclusive, "errors": [m.error for m in errors],
    }
    node_count = len({n for p in first for n in p})
    summary = (f"{len(values)} pair(s) by {how} between {node_count} nodes: median {_fmt(statistics.median(values))}, "
               f"min {_fmt(min(values))} {UNIT}")
    notes = [plan.note] if plan.note else []
    if transient:
        notes.append("slow once, fast when re-measured: " + ", ".join(f"{a}-{b}" for a, b in transient))
    if errors:
        notes.append(f"{len(errors)} measurement(s) failed: " + "; ".join(m.error or "" for m in errors[:3]))
    tail_text = ("; " + "; ".join(notes) if notes else "") + left_out_text(left_out)
    evidence = "\n\n".join(m.evidence for m in errors[:3])
    if blame.bad:
        nodes = {node: "slow with every known-good partner: " + ", ".join(f"{g} {_fmt(v)} {UNIT}" for g, v in got)
                 + f" (threshold {_fmt(threshold)} {UNIT})" for node, got in blame.bad.items()}
        reason = "; ".join(f"{n} {why}" for n, why in nodes.items())
        return ClusterResult(CHECK, Status.FAIL, measured, expected, f"{reason}; {summary}{tail_text}",
                             REMEDIATION_NODE, evidence, duration, nodes=nodes)
    below_floor = plan.minimum is not None and any(v < plan.minimum for v in first.values())
    if below_floor and not blame.cleared and not slow_paths:
        return ClusterResult(CHECK, Status.FAIL, measured, expected,
                             f"pairs below the profile's minimum {plan.minimum:g} {UNIT} and no node to blame "
                             f"(fabric-wide?): {', '.join(measured['slow_pairs'][:8])}; {summary}{tail_text}",
                             "check the fabric: subnet manager, switch firmware, link rates (ibstat, iblinkinfo)",
                             evidence, duration)
    if slow_paths or blame.inconclusive:
        parts = [f"slow path {a}-{b}: {_fmt(first.get((a, b), 0.0))} {UNIT}" for a, b in slow_paths]
        parts += [f"{n}: {why}" for n, why in blame.inconclusive.items()]
        return ClusterResult(CHECK, Status.WARN, measured, expected, "; ".join(parts) + f"; {summary}{tail_text}",
                             REMEDIATION_PATH, evidence, duration,
                             nodes={n: f"network re-test inconclusive: {why}" for n, why in blame.inconclusive.items()})
    if errors:
        return ClusterResult(CHECK, Status.ERROR, measured, expected, f"{summary}{tail_text}",
                             "see the evidence: the test could not run between some nodes", evidence, duration)
    return ClusterResult(CHECK, Status.PASS, measured, expected, f"every pair fast enough: {summary}{tail_text}",
                         duration_s=duration)
