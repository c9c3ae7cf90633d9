"""Stage `history`: each checked node's run against its own past in the history store (history/regression.py):
a GPU's figure that dropped past the profile's `history.regression_drop_pct` below its baseline or its recent
median, an error counter that rose since the node's last run. Warn, naming the node, the GPU and both figures;
never a failure (a slower GPU may still be above every floor, which the node's own checks judge). The store is
only read here; the run is recorded when it ends (cluster/cli.py)."""

from __future__ import annotations

from dataclasses import asdict

from ...history.records import node_run
from ...history.regression import DEFAULT_DROP_PCT, DEFAULT_RECENT_RUNS, compare
from ...history.store import HistoryError, Store, default_path
from ...model import Result, Status
from ..context import ClusterContext, ClusterResult

CHECK = "cluster.history.regression"
REMEDIATION = ("run `gpucheck node --full` on the node again; if the drop stays, compare its clocks, power and "
               "temperature with the baseline run (`gpucheck history show NODE`), then reseat or replace the GPU")


def threshold(report: dict, key: str, default: float) -> float:
    section = (report.get("thresholds") or {}).get("history") or {}
    value = section.get(key) if isinstance(section, dict) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def history_stage(ctx: ClusterContext) -> list[Result]:
    if ctx.options.no_history:
        return [ClusterResult(CHECK, Status.SKIP, reason="--no-history: not compared with the history")]
    try:
        path = ctx.options.history or default_path()
    except RuntimeError as exc:
        return [ClusterResult(CHECK, Status.SKIP, reason=f"no history store: {exc}")]
    if not path.exists():
        return [ClusterResult(CHECK, Status.SKIP, reason=f"no history yet ({path}): this run starts it")]
    try:
        store = Store(path, create=False)
    except HistoryError as exc:
        return [ClusterResult(CHECK, Status.SKIP, reason=f"the history store cannot be read: {exc}")]
    blamed, measured, based, pct = {}, {}, [], DEFAULT_DROP_PCT
    with store:
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
        return [ClusterResult(CHECK, Status.WARN, measured, expected,
                              "; ".join(f"{node}: {why}" for node, why in blamed.items()), REMEDIATION, nodes=blamed)]
    if not based:
        return [ClusterResult(CHECK, Status.SKIP, reason="no node has a baseline yet: a node's first passing "
                                                         "`--full` run becomes its baseline (docs/history.md)")]
    return [ClusterResult(CHECK, Status.PASS, {"compared": based}, expected,
                          f"{len(based)} node(s) compared with their baselines: nothing dropped or rose")]
