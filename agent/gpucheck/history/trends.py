"""What the cluster report shows of each node's past (docs/history.md, "What a person sees"): its key figures over
its recent runs, one point per run (the median over its GPUs: one line a person reads at a glance; the regression
names the GPU), and when it last passed a run of active checks. Pure reads of the store; the run compared is not
in it yet and is the last point."""

from __future__ import annotations

import statistics
from typing import Any

from . import queries
from .records import NodeRun
from .regression import followed
from .store import Store

TREND_RUNS = 8  # points per chart, this run included: a week of daily checks
# the figures charted, in this order, when the node measured them: the GEMM the burn-in judges first, then memory,
# the host link and the burn; at most TREND_FIGURES_MAX of them
PREFERRED = ("gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.burn")
TREND_FIGURES_MAX = 4


def medians(figures: list[tuple[str, str, str, int, float]]) -> dict[tuple[str, str, str], float]:
    """(check, figure, unit) -> the median over the GPUs, of the figures worth following."""
    found: dict[tuple[str, str, str], list[float]] = {}
    for check, figure, unit, _, value in figures:
        if followed(check, figure):
            found.setdefault((check, figure, unit), []).append(value)
    return {key: statistics.median(values) for key, values in found.items()}


def chosen(keys: set[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    rank = {check: i for i, check in enumerate(PREFERRED)}
    return sorted(keys, key=lambda k: (rank.get(k[0], len(PREFERRED)), k))[:TREND_FIGURES_MAX]


def node_trends(store: Store, part: NodeRun, started: str, runs: int = TREND_RUNS) -> list[dict[str, Any]]:
    """[{check, figure, unit, points: [{started, value}]}] over the node's last runs and this one; a figure with
    fewer than two points has no trend yet and is left out."""
    recent = queries.recent_node_runs(store, queries.Selection(node=part.node), runs - 1)
    per_run: dict[int, list[tuple[str, str, str, int, float]]] = {}
    for (check, figure, unit, gpu), values in queries.series(store, queries.Selection(node=part.node),
                                                             recent).items():
        for node_run, value in values.items():
            per_run.setdefault(node_run, []).append((check, figure, unit, gpu, value))
    past = {r["id"]: (r["started"], medians(per_run.get(r["id"], []))) for r in recent}
    now = medians(part.figures)
    trends = []
    for key in chosen(set(now).union(*(m for _, m in past.values()))):
        points = [{"started": when, "value": m[key]} for when, m in past.values() if key in m]
        points += [{"started": started, "value": now[key]}] if key in now else []
        if len(points) >= 2:
            trends.append({"check": key[0], "figure": key[1], "unit": key[2], "points": points})
    return trends


def last_active_pass(store: Store, node: str) -> str | None:
    """When the node last passed (or only warned in) a run with GPU figures worth following (a --full run), by
    the store."""
    names = [r["id"] for r in store.query('SELECT id, check_name AS "check", figure FROM names')
             if followed(r["check"], r["figure"])]
    if not names:
        return None
    rows = store.query(f"""
        SELECT max(nr.started) AS started FROM node_runs nr JOIN figures f ON f.node_run_id = nr.id
        WHERE nr.node = ? AND nr.status IN ('pass', 'warn') AND f.name_id IN ({', '.join('?' for _ in names)})""",
                       (node, *names))
    return rows[0]["started"] if rows else None
