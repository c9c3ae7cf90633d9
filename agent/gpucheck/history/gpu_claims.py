"""Which nodes report a GPU UUID, and when. A GPU is followed by its UUID from node to node (a part moved, a node
rebuilt), but a UUID is only a node's word: one that listed another node's GPU would pour its failures into that
GPU's count, or its figures into that GPU's baseline. A UUID two nodes report in overlapping time (each node's
first to last report of it, the run being judged included) is contested: its past is then kept apart per node, and
the conflict is a finding about both (cluster.history.gpu_claims). A UUID that left one node before another first
reported it moved, and its past moves with it."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from .store import Store

Span = tuple[str, str]  # (first, last) time a node reported the UUID


def spans(store: Store, uuids: list[str], start: str) -> dict[str, dict[str, Span]]:
    """uuid -> node -> (first, last) report of it since `start`, for these UUIDs."""
    found: dict[str, dict[str, Span]] = {}
    for chunk in (uuids[i:i + 500] for i in range(0, len(uuids), 500)):  # SQLite's bound variables
        for r in store.query(f"""
                SELECT gi.uuid, nr.node, min(nr.started) AS first, max(nr.started) AS last
                FROM node_runs nr JOIN gpus g ON g.node_run_id = nr.id JOIN gpu_ids gi ON gi.id = g.gpu_id
                WHERE nr.started >= ? AND gi.uuid IN ({', '.join('?' for _ in chunk)})
                GROUP BY gi.uuid, nr.node""", (start, *chunk)):
            found.setdefault(r["uuid"], {})[r["node"]] = (r["first"], r["last"])
    return found


def spans_from(reports: Iterable[tuple[str, str, str]]) -> dict[str, dict[str, Span]]:
    """uuid -> node -> (first, last) from (uuid, node, started) rows a caller already read (what `spans` asks
    SQLite for)."""
    found: dict[str, dict[str, Span]] = {}
    for uuid, node, started in reports:
        _widen(found, uuid, node, started)
    return found


def with_run(known: dict[str, dict[str, Span]], node: str, uuids: list[str], started: str) -> None:
    """Add a run not recorded yet (node, its UUIDs, when) to `known`."""
    for uuid in uuids:
        _widen(known, uuid, node, started)


def _widen(known: dict[str, dict[str, Span]], uuid: str, node: str, started: str) -> None:
    first, last = known.setdefault(uuid, {}).get(node, (started, started))
    known[uuid][node] = (min(first, started), max(last, started))


def overlapping(nodes: dict[str, Span]) -> list[tuple[str, str]]:
    """The pairs of nodes whose spans of reporting one UUID overlap, in name order."""
    return [(a, b) for a, b in combinations(sorted(nodes), 2)
            if nodes[a][0] <= nodes[b][1] and nodes[b][0] <= nodes[a][1]]


def contested(known: dict[str, dict[str, Span]]) -> dict[str, list[tuple[str, str]]]:
    """uuid -> the overlapping pairs, for each UUID with any."""
    return {uuid: pairs for uuid, nodes in known.items() if (pairs := overlapping(nodes))}
