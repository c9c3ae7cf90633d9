"""`gpucheck history mttr`: per node, how long from a fault detected to the node drained, and from drained to back in
service, over a period, from the transitions the store keeps (store.py's `transitions`: what the watcher, the
health check, the scheduled checks did in Slurm, as their kept reports say, docs/watch.md).

An episode opens at a drain by gpucheck (the watcher's detection just before it, where there is one) and closes at
the node's next return; one still open is said with how long it has been out. A drain the breaker held opens none.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any

from ..report.values import plural
from .store import Store


@dataclass
class Episode:
    node: str
    drained: str  # UTC, as the store keeps times
    reason: str
    path: str
    detected: str | None = None
    returned: str | None = None

    def to_drain_s(self) -> float | None:
        return None if self.detected is None else seconds(self.detected, self.drained)

    def to_return_s(self) -> float | None:
        return None if self.returned is None else seconds(self.drained, self.returned)


def seconds(start: str, end: str) -> float:
    parse = dt.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def episodes(store: Store, since: str | None = None, node: str | None = None) -> list[Episode]:
    """Every drain by gpucheck since `since` (UTC), with the detection before it and the return after, by node."""
    where, params = ["1 = 1"], []
    if since:
        where.append("at >= ?")
        params.append(since)
    if node:
        where.append("node = ?")
        params.append(node)
    rows = store.query(f"SELECT node, at, state, path, reason FROM transitions WHERE {' AND '.join(where)} "
                       "ORDER BY node, at, CASE state WHEN 'detected' THEN 0 WHEN 'drained' THEN 1 ELSE 2 END",
                       tuple(params))
    found: list[Episode] = []
    detected: dict[str, str] = {}
    open_by_node: dict[str, Episode] = {}
    for row in rows:
        name, at, state = row["node"], row["at"], row["state"]
        if state == "detected":
            detected[name] = at
        elif state == "drained" and name not in open_by_node:
            episode = Episode(name, at, row["reason"], row["path"], detected.pop(name, None))
            open_by_node[name] = episode
            found.append(episode)
        elif state == "returned" and name in open_by_node:
            open_by_node.pop(name).returned = at
    return found


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def span(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.1f} s"


def summary(found: list[Episode], now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Per node: its drains, the median detection-to-drain and drain-to-return, and the episode still open."""
    now = now or dt.datetime.now(dt.timezone.utc)
    rows = []
    for name in sorted({e.node for e in found}):
        mine = [e for e in found if e.node == name]
        still = next((e for e in mine if e.returned is None), None)
        rows.append({"node": name, "drains": len(mine), "returned": sum(e.returned is not None for e in mine),
                     "detect_to_drain_s": median([e.to_drain_s() for e in mine]),
                     "drain_to_return_s": median([e.to_return_s() for e in mine]),
                     "out_since": still.drained if still else None,
                     "out_for_s": seconds(still.drained, now.strftime("%Y-%m-%dT%H:%M:%SZ")) if still else None,
                     "last_reason": mine[-1].reason})
    return rows


def render(rows: list[dict[str, Any]], period: str) -> str:
    if not rows:
        return f"no node was drained by gpucheck {period}\n"
    lines = [f"drains by gpucheck {period}: {plural(sum(r['drains'] for r in rows), 'drain')} of "
             f"{plural(len(rows), 'node')} (medians per node; detected: by gpucheck watch)",
             f"  {'node':<16} {'drains':>6} {'returned':>8} {'detected->drained':>18} {'drained->returned':>18}  "
             "still out"]
    for r in rows:
        out = f"for {span(r['out_for_s'])} (since {r['out_since']})" if r["out_since"] else "-"
        lines.append(f"  {r['node']:<16} {r['drains']:>6} {r['returned']:>8} {span(r['detect_to_drain_s']):>18} "
                     f"{span(r['drain_to_return_s']):>18}  {out}")
    return "\n".join(lines) + "\n"
