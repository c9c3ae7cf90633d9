"""Stage `history`: each checked node's run against its own past in the history store (docs/history.md).
- cluster.history.regression (history/regression.py): a GPU's figure that dropped past the profile's
  `history.regression_drop_pct` below its baseline or its recent median, an error counter that rose since the
  node's last run;
- cluster.history.repeat_offender (history/offenders.py): a node that failed `history.repeat_offender_failures`
  separate times within `history.repeat_offender_days`, this run included.
Warn, naming the node (and the GPU); never a failure: the node's own checks judge it, this says what its past
adds. The store is only read here; the run is recorded when it ends (cluster/cli.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict

from ...history.offenders import DEFAULT_DAYS, DEFAULT_FAILURES, repeat_failures
from ...history.records import node_run
from ...history.regression import DEFAULT_DROP_PCT, DEFAULT_RECENT_RUNS, compare
from ...history.store import HistoryError, Store, default_path
from ...model import Result, Status
from ..context import ClusterContext, ClusterResult

CHECK = "cluster.history.regression"
OFFENDER = "cluster.history.repeat_offender"
REMEDIATION = ("run `gpucheck node --full` on the node again; if the drop stays, compare its clocks, power and "
               "temperature with the baseline run (`gpucheck history show NODE`), then reseat or replace the GPU")
OFFENDER_REMEDIATION = ("take the node out of service and have the failing part replaced: a repair that does not "
                        "hold is a case for the vendor (its failures: `gpucheck history runs --node NODE`)")


def threshold(report: dict, key: str, default: float) -> float:
    section = (report.get("thresholds") or {}).get("history") or {}
    value = section.get(key) if isinstance(section, dict) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def skipped(reason: str) -> list[Result]:
    return [ClusterResult(CHECK, Status.SKIP, reason=reason), ClusterResult(OFFENDER, Status.SKIP, reason=reason)]


def history_stage(ctx: ClusterContext) -> list[Result]:
    if ctx.options.no_history:
        return skipped("--no-history: not compared with the history")
    try:
        path = ctx.options.history or default_path()
    except RuntimeError as exc:
        return skipped(f"no history store: {exc}")
    if not path.exists():
        return skipped(f"no history yet ({path}): this run starts it")
    try:
        store = Store(path, create=False)
    except HistoryError as exc:
        return skipped(f"the history store cannot be read: {exc}")
    with store:
        return [regression(ctx, store), repeat_offenders(ctx, store)]


def regression(ctx: ClusterContext, store: Store) -> Result:
    blamed, measured, based, pct = {}, {}, [], DEFAULT_DROP_PCT
    for name in ctx.checked():
        report = ctx.nodes[name].report or {}
        pct = threshold(report, "regression_drop_pct", DEFAULT_DROP_PCT)
        recent = int(threshold(report, "regression_recent_runs", DEFAULT_RECENT_RUNS))
        findings, had_baseline = compare(store, node_run(name, report), pct, recent)
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


def repeat_offenders(ctx: ClusterContext, store: Store) -> Result:
    now = dt.datetime.now(dt.timezone.utc)
    blamed, measured, failures, days = {}, {}, DEFAULT_FAILURES, DEFAULT_DAYS
    for name in ctx.checked():
        report = ctx.nodes[name].report or {}
        failures = int(threshold(report, "repeat_offender_failures", DEFAULT_FAILURES))
        days = int(threshold(report, "repeat_offender_days", DEFAULT_DAYS))
        part = node_run(name, report, ctx.nodes[name].status.value, ctx.nodes[name].reason)
        found = repeat_failures(store, part, now.strftime("%Y-%m-%dT%H:%M:%SZ"), failures, days, now)
        if found:
            blamed[name] = (f"repeat offender: failed {len(found)} times in {days} days: "
                            + ", ".join(f"{f.started[:10]} ({f.what})" for f in found))
            measured[name] = [asdict(f) for f in found]
    expected = f"fewer than {failures} separate failures in {days} days"
    if blamed:
        return ClusterResult(OFFENDER, Status.WARN, measured, expected,
                             "; ".join(f"{node}: {why}" for node, why in blamed.items()), OFFENDER_REMEDIATION,
                             nodes=blamed)
    return ClusterResult(OFFENDER, Status.PASS, None, expected,
                         f"no node failed {failures} times in {days} days")
