"""Reading the history: the runs, one node's or one GPU's recent runs and their figures, every figure as rows
(the export). Plain SQL over store.py's schema; each function returns rows as dicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .records import CLUSTER
from .store import Store

FIGURE_ROWS = """
    SELECT r.id AS run, nr.id AS node_run, r.kind, nr.started, nr.node, nr.status AS node_status, f.gpu, gi.uuid,
           gi.pci_bus_id, n.check_name AS "check", n.figure, n.unit, f.value
    FROM figures f
    JOIN node_runs nr ON nr.id = f.node_run_id
    JOIN runs r ON r.id = nr.run_id
    JOIN names n ON n.id = f.name_id
    LEFT JOIN gpus g ON g.node_run_id = f.node_run_id AND g.gpu = f.gpu
    LEFT JOIN gpu_ids gi ON gi.id = g.gpu_id"""


@dataclass(frozen=True)
class Selection:
    """Which figures: of a node, of one GPU (by UUID, wherever it was), of a check, whose name holds a text,
    since a time (UTC, as records.utc writes it)."""
    node: str | None = None
    uuid: str | None = None
    check: str | None = None
    figure: str | None = None
    since: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        terms, params = [], []
        for sql, value in (("nr.node = ?", self.node), ("gi.uuid = ?", self.uuid), ("n.check_name = ?", self.check),
                           ("instr(n.figure, ?) > 0", self.figure), ("nr.started >= ?", self.since)):
            if value is not None:
                terms.append(sql)
                params.append(value)
        return (" WHERE " + " AND ".join(terms)) if terms else "", params


def runs(store: Store, node: str | None = None, since: str | None = None, limit: int | None = 50) -> list[dict]:
    """The runs, newest first, with how many nodes each had of each verdict (the cluster's own checks apart)."""
    terms, params = ["1"], []
    if node is not None:
        terms.append("id IN (SELECT run_id FROM node_runs WHERE node = ?)")
        params.append(node)
    if since is not None:
        terms.append("started >= ?")
        params.append(since)
    params.append(-1 if limit is None else limit)
    # the runs first (runs_by_started), then the counts of those only
    return store.query(f"""
        SELECT r.id AS run, r.kind, r.started, r.source, r.exit_code, r.complete,
               count(nr.id) AS nodes, coalesce(sum(nr.status = 'pass'), 0) AS pass,
               coalesce(sum(nr.status = 'warn'), 0) AS warn, coalesce(sum(nr.status = 'fail'), 0) AS fail,
               coalesce(sum(nr.status NOT IN ('pass', 'warn', 'fail')), 0) AS other
        FROM (SELECT * FROM runs WHERE {" AND ".join(terms)} ORDER BY started DESC, id DESC LIMIT ?) r
        LEFT JOIN node_runs nr ON nr.run_id = r.id AND nr.node != ?
        GROUP BY r.id ORDER BY r.started DESC, r.id DESC""", (*params, CLUSTER))


def figure_rows(store: Store, selection: Selection, limit: int | None = None) -> list[dict]:
    """Every figure the selection names, oldest run first."""
    where, params = selection.where()
    params.append(-1 if limit is None else limit)
    return store.query(f"{FIGURE_ROWS}{where} ORDER BY nr.started, r.id, nr.node, n.check_name, n.figure, f.gpu "
                       "LIMIT ?", tuple(params))


def recent_node_runs(store: Store, selection: Selection, count: int) -> list[dict]:
    """The last `count` runs of the selection's node, or of the node(s) its GPU was in, oldest first."""
    if selection.uuid is not None:
        rows = store.query("""
            SELECT nr.id, nr.run_id AS run, nr.node, nr.started, nr.status FROM node_runs nr
            WHERE nr.id IN (SELECT g.node_run_id FROM gpus g JOIN gpu_ids gi ON gi.id = g.gpu_id WHERE gi.uuid = ?)
            ORDER BY nr.started DESC, nr.id DESC LIMIT ?""", (selection.uuid, count))
    else:
        rows = store.query("""
            SELECT id, run_id AS run, node, started, status FROM node_runs WHERE node = ?
            ORDER BY started DESC, id DESC LIMIT ?""", (selection.node, count))
    return rows[::-1]


def series(store: Store, selection: Selection, node_runs: list[dict]) -> dict[tuple, dict[int, float]]:
    """(check, figure, unit, GPU index) -> {node run id: value} over the given node runs."""
    where, params = selection.where()
    ids = [r["id"] for r in node_runs]
    marks = ", ".join("?" for _ in ids) or "NULL"
    rows = store.query(f"{FIGURE_ROWS}{where} {'AND' if where else 'WHERE'} nr.id IN ({marks})", (*params, *ids))
    found: dict[tuple, dict[int, float]] = {}
    for row in rows:
        found.setdefault((row["check"], row["figure"], row["unit"], row["gpu"]), {})[row["node_run"]] = row["value"]
    return dict(sorted(found.items()))


def known_nodes(store: Store) -> list[str]:
    return [r["node"] for r in store.query("SELECT DISTINCT node FROM node_runs WHERE node != ? ORDER BY node",
                                           (CLUSTER,))]


def model_figures(store: Store, model: str, checks: list[str]) -> list[dict]:
    """Every figure of these checks measured on any GPU of one model (as NVML names it), oldest first: what a
    GPU is compared with across the fleet (gpucheck rma)."""
    marks = ", ".join("?" for _ in checks) or "NULL"
    return store.query(f"{FIGURE_ROWS} WHERE gi.name = ? AND n.check_name IN ({marks}) ORDER BY nr.started, r.id",
                       (model, *checks))
