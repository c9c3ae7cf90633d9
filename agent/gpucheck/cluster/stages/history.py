"""Stage `history`: each checked node's run against its own past in the history store (docs/history.md).
- cluster.history.regression (history/regression.py): a GPU's figure that dropped past the profile's
  `history.regression_drop_pct` below its baseline or its recent median, an error counter that rose since the
  node's last run;
- cluster.history.repeat_offender (history/offenders.py): a node, or one of its GPUs, that failed
  `history.repeat_offender_failures` separate times within `history.repeat_offender_days`, this run included;
- cluster.history.gpu_claims (history/gpu_claims.py): a GPU UUID two nodes report in overlapping time, this run
  included (a node's word only: one of the two is wrong), each node's GPU past then kept apart.
Warn, naming the node (and the GPU); never a failure: the node's own checks judge it, this says what its past
adds. The store is only read here; the run is recorded when it ends (cluster/cli.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict

from ...history import gpu_claims, trends
from ...history.offenders import DEFAULT_DAYS, DEFAULT_FAILURES, repeat_failures, repeat_gpu_failures, since
from ...history.records import NodeRun, NotAReport, node_run, utc
from ...history.regression import DEFAULT_DROP_PCT, DEFAULT_RECENT_RUNS, compare, followed
from ...history.store import HistoryError, Store, default_path
from ...model import Result, Status
from ..context import ClusterContext, ClusterResult

CHECK = "cluster.history.regression"
OFFENDER = "cluster.history.repeat_offender"
CLAIMS = "cluster.history.gpu_claims"
REMEDIATION = ("run `gpucheck node --full` on the node again; if the drop stays, compare its clocks, power and "
               "temperature with the baseline run (`gpucheck history show NODE`), then reseat or replace the GPU")
CLAIMS_REMEDIATION = ("list each node's GPUs (nvidia-smi -L) and compare: a node that reports a GPU it does not have "
                      "is misconfigured or not to be trusted; until then each node's GPU failures and baselines are "
                      "counted apart")
OFFENDER_REMEDIATION = ("take the node out of service and have the failing part replaced: a repair that does not "
                        "hold is a case for the vendor (its failures: `gpucheck history runs --node NODE`)")


def threshold(report: dict, key: str, default: float) -> float:
    section = (report.get("thresholds") or {}).get("history") or {}
    value = section.get(key) if isinstance(section, dict) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def skipped(reason: str) -> list[Result]:
    return [ClusterResult(check, Status.SKIP, reason=reason) for check in (CHECK, OFFENDER, CLAIMS)]


def history_stage(ctx: ClusterContext) -> list[Result]:
    if ctx.options.no_history:
        return skipped("--no-history: not compared with the history")
    try:
        path = ctx.options.history or default_path(cluster=ctx.inventory.cluster)
    except (RuntimeError, HistoryError) as exc:
        return skipped(f"no history store: {exc}")
    if not path.exists():
        return skipped(f"no history yet ({path}): this run starts it")
    try:
        store = Store(path, reading=True)
    except HistoryError as exc:
        return skipped(f"the history store cannot be read: {exc}")
    now = dt.datetime.now(dt.timezone.utc)
    # each checked node's run as the store will record it (not recorded yet): what its past is compared with
    parts = {name: node_run(name, ctx.nodes[name].report or {}, ctx.nodes[name].status.value, ctx.nodes[name].reason)
             for name in ctx.checked()}
    with store:
        remember_view(ctx, store, parts, now)
        return [regression(ctx, store, parts, now), repeat_offenders(ctx, store, parts, now),
                claims(store, parts, now)]


def remember_view(ctx: ClusterContext, store: Store, parts: dict[str, NodeRun], now: dt.datetime) -> None:
    """What the report shows of each node's past: its key figures over its recent runs and this one, and when it
    last passed a run of active checks (by the store, by what the node kept, or this run)."""
    started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name, part in parts.items():
        report = ctx.nodes[name].report or {}
        facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}  # the node's input
        passes = [trends.last_active_pass(store, name), facts.get("last_active_pass")]
        if part.status in ("pass", "warn") and any(followed(c, f) for c, f, _, _, _ in part.figures):
            passes.append(started)
        ctx.history[name] = {"trends": trends.node_trends(store, part, started),
                             "last_active_pass": max(filter(None, map(utc_or_none, passes)), default=None)}


def utc_or_none(text: object) -> str | None:
    """A time a node reported, as UTC; None for none or for what is no time (the node's input, not ours)."""
    try:
        return utc(text) if text else None
    except NotAReport:
        return None


def regression(ctx: ClusterContext, store: Store, parts: dict[str, NodeRun], now: dt.datetime) -> Result:
    blamed, measured, based, pct = {}, {}, [], DEFAULT_DROP_PCT
    started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name, part in parts.items():
        report = ctx.nodes[name].report or {}
        pct = threshold(report, "regression_drop_pct", DEFAULT_DROP_PCT)
        recent = int(threshold(report, "regression_recent_runs", DEFAULT_RECENT_RUNS))
        findings, had_baseline = compare(store, part, pct, recent, started)
        based += [name] if had_baseline else []
        if findings:
            blamed[name] = "; ".join(f.text() for f in findings)
            measured[name] = [asdict(f) for f in findings]
    expected = f"each GPU within {pct:g} % of its baseline and recent median; error counters not rising"
    if blamed:
        return ClusterResult(CHECK, Status.WARN, measured, expected,
                             "; ".join(f"{node}: {why}" for node, why in blamed.items()), REMEDIATION, nodes=blamed)
    if not based:
        return ClusterResult(CHECK, Status.SKIP, reason="no node has a baseline yet: a node's first passing "
                                                        "`--full` run becomes its baseline (docs/history.md)")
    return ClusterResult(CHECK, Status.PASS, {"compared": based}, expected,
                         f"{len(based)} node(s) compared with their baselines: nothing dropped or rose")


def repeat_offenders(ctx: ClusterContext, store: Store, parts: dict[str, NodeRun], now: dt.datetime) -> Result:
    blamed, measured, failures, days = {}, {}, DEFAULT_FAILURES, DEFAULT_DAYS
    started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name, part in parts.items():
        report = ctx.nodes[name].report or {}
        failures = int(threshold(report, "repeat_offender_failures", DEFAULT_FAILURES))
        days = int(threshold(report, "repeat_offender_days", DEFAULT_DAYS))
        found = {name: repeat_failures(store, part, started, failures, days, now),
                 **repeat_gpu_failures(store, part, started, failures, days, now)}
        named = [f"{'' if who == name else who + ': '}repeat offender: failed {len(items)} times in {days} days: "
                 + ", ".join(f"{f.started[:10]} ({f.what})" for f in items) for who, items in found.items() if items]
        if named:
            blamed[name] = "; ".join(named)
            measured.update({who: [asdict(f) for f in items] for who, items in found.items() if items})
    expected = f"fewer than {failures} separate failures in {days} days"
    if blamed:
        return ClusterResult(OFFENDER, Status.WARN, measured, expected,
                             "; ".join(f"{node}: {why}" for node, why in blamed.items()), OFFENDER_REMEDIATION,
                             nodes=blamed)
    return ClusterResult(OFFENDER, Status.PASS, None, expected,
                         f"no node or GPU failed {failures} times in {days} days")


def claims(store: Store, parts: dict[str, NodeRun], now: dt.datetime) -> Result:
    """Each GPU UUID that two nodes report in overlapping time within the offenders' window, this run included."""
    started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    uuids = {name: [uuid for _, uuid, _, _ in part.gpus if uuid] for name, part in parts.items()}
    known = gpu_claims.spans(store, sorted({u for found in uuids.values() for u in found}), since(now, DEFAULT_DAYS))
    for name, found in uuids.items():
        gpu_claims.with_run(known, name, found, started)
    blamed: dict[str, list[str]] = {}
    for uuid, pairs in gpu_claims.contested(known).items():
        for a, b in pairs:
            blamed.setdefault(a, []).append(f"{uuid} is also reported by {b}")
            blamed.setdefault(b, []).append(f"{uuid} is also reported by {a}")
    expected = "each GPU UUID reported by one node at a time"
    if not blamed:
        return ClusterResult(CLAIMS, Status.PASS, None, expected, f"no GPU UUID reported by two nodes at once "
                                                                 f"within {DEFAULT_DAYS} days")
    why = {node: "; ".join(items) for node, items in sorted(blamed.items())}
    return ClusterResult(CLAIMS, Status.WARN, {n: sorted(items) for n, items in blamed.items()}, expected,
                         "; ".join(f"{node}: {text}" for node, text in why.items()), CLAIMS_REMEDIATION, nodes=why)
