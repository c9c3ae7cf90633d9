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
    gpus: tuple[str, ...] = ()  # the UUIDs of the GPUs its failures named
    repaired: bool = False  # returned by gpucheck's own repair, on its proof
    needs_hands: str | None = None  # when a repair handed it to a person (it is still out)

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
    rows = store.query(f"SELECT node, at, state, path, reason, gpus FROM transitions WHERE {' AND '.join(where)} "
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
            episode = Episode(name, at, row["reason"], row["path"], detected.pop(name, None),
                              gpus=tuple(g for g in row["gpus"].split(",") if g))
            open_by_node[name] = episode
            found.append(episode)
        elif state == "returned" and name in open_by_node:
            episode = open_by_node.pop(name)
            episode.returned, episode.repaired = at, row["path"] == "repair"
        elif state == "needs-hands" and name in open_by_node:
            open_by_node[name].needs_hands = at
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


def summary(found: list[Episode], by: str = "node", now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Per node (or per GPU, by UUID: the drains its failures named it in): its drains, the median
    detection-to-drain and drain-to-return, and the episode still open."""
    now = now or dt.datetime.now(dt.timezone.utc)
    keys = {e.node for e in found} if by == "node" else {g for e in found for g in e.gpus}
    rows = []
    for name in sorted(keys):
        mine = [e for e in found if (e.node == name if by == "node" else name in e.gpus)]
        still = next((e for e in mine if e.returned is None), None)
        rows.append({by: name, **({"node": mine[-1].node} if by == "gpu" else {}),
                     "drains": len(mine), "returned": sum(e.returned is not None for e in mine),
                     "repaired": sum(e.repaired for e in mine),
                     "needs_hands": still.needs_hands if still else None,
                     "detect_to_drain_s": median([e.to_drain_s() for e in mine]),
                     "drain_to_return_s": median([e.to_return_s() for e in mine]),
                     "out_since": still.drained if still else None,
                     "out_for_s": seconds(still.drained, now.strftime("%Y-%m-%dT%H:%M:%SZ")) if still else None,
                     "last_reason": mine[-1].reason})
    return rows


def render(rows: list[dict[str, Any]], period: str, by: str = "node") -> str:
    if not rows:
        return f"no {'node' if by == 'node' else 'GPU'} was drained by gpucheck {period}\n"
    width = max(16, *(len(r[by]) for r in rows))
    what = plural(len(rows), "node") if by == "node" else plural(len(rows), "GPU")
    lines = [f"drains by gpucheck {period}: {plural(sum(r['drains'] for r in rows), 'drain')} of {what} "
             f"(medians per {by if by == 'node' else 'GPU'}; detected: by gpucheck watch)",
             f"  {by if by == 'node' else 'GPU':<{width}} {'drains':>6} {'returned':>8} {'repaired':>8} "
             f"{'detected->drained':>18} {'drained->returned':>18}  still out"]
    for r in rows:
        out = f"for {span(r['out_for_s'])} (since {r['out_since']})" if r["out_since"] else "-"
        if r["needs_hands"]:
            out += f", needs hands since {r['needs_hands']}"
        name = r[by] if by == "node" else f"{r[by]} ({r['node']})"
        lines.append(f"  {name:<{width}} {r['drains']:>6} {r['returned']:>8} {r['repaired']:>8} "
                     f"{span(r['detect_to_drain_s']):>18} "
                     f"{span(r['drain_to_return_s']):>18}  {out}")
    return "\n".join(lines) + "\n"
