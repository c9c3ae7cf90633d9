"""Repeat offenders (docs/history.md): a node, or a GPU, that failed `failures` times within `days`. A failure is
counted once however many runs saw it: a failing run right after another failing one (the health check every 5
minutes until the node was drained and repaired) is the same failure; it counts again only after the node passed
(or warned) in between. A run that could not judge the node (error) neither starts nor ends a failure.

A GPU failed in a run when a failing check names it (gpu_names.py: GPUn with its index in that run, its UUID or
its bus id); it is followed by its UUID, so a GPU moved to another node keeps its failures. A node run that failed
for another reason neither starts nor ends a failure of the GPU. A UUID two nodes report in overlapping time
(gpu_claims.py) is counted per node: no node can give another node's GPU its failures."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from . import gpu_claims
from .gpu_names import names_gpu
from .records import CLUSTER, NodeRun
from .store import Store

# 3 in 30 days: one failure is an event, a second may be one fault seen again before its repair took; a third
# within a month is a part that does not stay fixed, which is what an RMA is for.
DEFAULT_FAILURES = 3
DEFAULT_DAYS = 30
MAX_RUNS_NAMED = 30000  # below SQLite's 32766 bound variables: a node's GPUs run far fewer times in a window


@dataclass(frozen=True)
class Failure:
    started: str
    what: str  # the failed checks, or the node's reason


def failures_of(runs: list[tuple[str, str, str]]) -> list[Failure]:
    """(started, status, what) oldest first -> the separate failures."""
    found, failing = [], False
    for started, status, what in runs:
        if status == "fail":
            if not failing:
                found.append(Failure(started, what))
            failing = True
        elif status in ("pass", "warn"):
            failing = False
    return found


def since(now: dt.datetime, days: int) -> str:
    return (now - dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_history(store: Store, node: str, start: str) -> list[tuple[str, str, str]]:
    rows = store.query("""
        SELECT nr.started, nr.status, coalesce(nr.reason, '') AS reason,
               coalesce(group_concat(CASE WHEN r.status = 'fail' THEN c.name END, ', '), '') AS failed
        FROM node_runs nr LEFT JOIN results r ON r.node_run_id = nr.id LEFT JOIN checks c ON c.id = r.check_id
        WHERE nr.node = ? AND nr.started >= ?
        GROUP BY nr.id ORDER BY nr.started, nr.id""", (node, start))
    return [(r["started"], r["status"], r["failed"] or r["reason"]) for r in rows]


def repeat_failures(store: Store, part: NodeRun, started: str, failures: int = DEFAULT_FAILURES,
                    days: int = DEFAULT_DAYS, now: dt.datetime | None = None) -> list[Failure]:
    """The node's separate failures within `days`, this run (not recorded yet, started at `started`) included,
    when there are at least `failures` of them; [] otherwise."""
    now = now or dt.datetime.now(dt.timezone.utc)
    runs = node_history(store, part.node, since(now, days))
    failed = ", ".join(check for check, status, _ in part.results if status == "fail") or (part.reason or "")
    found = failures_of([*runs, (started, part.status, failed)])
    return found if len(found) >= failures else []


def offenders(store: Store, failures: int = DEFAULT_FAILURES, days: int = DEFAULT_DAYS,
              now: dt.datetime | None = None) -> dict[str, list[Failure]]:
    """Every node of the store with at least `failures` separate failures within `days`."""
    start = since(now or dt.datetime.now(dt.timezone.utc), days)
    nodes = [r["node"] for r in store.query("SELECT DISTINCT node FROM node_runs WHERE started >= ? AND "
                                            "status = 'fail' AND node != ? ORDER BY node", (start, CLUSTER))]
    found = {node: failures_of(node_history(store, node, start)) for node in nodes}
    return {node: items for node, items in found.items() if len(items) >= failures}


def gpu_verdict(node_status: str, failed: list[tuple[str, str]], index: int, uuid: str | None,
                bus: str | None) -> tuple[str, str]:
    """(the GPU's status in a node run, the failed checks that name it): fail when one does, pass when the node
    passed or warned, error (no verdict on the GPU) otherwise."""
    mine = [check for check, reason in failed if names_gpu(reason, index, uuid, bus)]
    if mine:
        return "fail", ", ".join(mine)
    return ("pass", "") if node_status in ("pass", "warn") else ("error", "")


def gpu_history(store: Store, start: str, uuids: list[str] | None = None) -> dict[str, list[tuple]]:
    """Per GPU UUID: (started, its status, what failed, node, index) of each node run it was in, oldest first."""
    only = f" AND gi.uuid IN ({', '.join('?' for _ in uuids)})" if uuids is not None else ""
    rows = store.query(f"""
        SELECT nr.id, nr.node, nr.started, nr.status, g.gpu, gi.uuid, gi.pci_bus_id
        FROM node_runs nr JOIN gpus g ON g.node_run_id = nr.id JOIN gpu_ids gi ON gi.id = g.gpu_id
        WHERE nr.started >= ? AND gi.uuid IS NOT NULL{only} ORDER BY nr.started, nr.id""", (start, *(uuids or [])))
    # the failed checks of those runs only (a few GPUs' runs), else of every run since start
    ids = sorted({r["id"] for r in rows})
    named = uuids is not None and len(ids) <= MAX_RUNS_NAMED
    which = f"r.node_run_id IN ({', '.join('?' for _ in ids)})" if named else "nr.started >= ?"
    failed: dict[int, list[tuple[str, str]]] = {}
    for r in store.query(f"""
            SELECT r.node_run_id, c.name, coalesce(r.reason, '') AS reason FROM results r
            JOIN checks c ON c.id = r.check_id JOIN node_runs nr ON nr.id = r.node_run_id
            WHERE r.status = 'fail' AND {which}""", tuple(ids) if named else (start,)):
        failed.setdefault(r["node_run_id"], []).append((r["name"], r["reason"]))
    found: dict[str, list[tuple]] = {}
    for r in rows:
        status, what = gpu_verdict(r["status"], failed.get(r["id"], []), r["gpu"], r["uuid"], r["pci_bus_id"])
        found.setdefault(r["uuid"], []).append((r["started"], status, what, r["node"], r["gpu"]))
    return found


def claims_in(history: dict[str, list[tuple]]) -> dict[str, dict[str, gpu_claims.Span]]:
    """Which node reported each UUID when, from the runs gpu_history read (no second query)."""
    return gpu_claims.spans_from((uuid, run[3], run[0]) for uuid, runs in history.items() for run in runs)


def by_node(runs: list[tuple]) -> list[list[tuple]]:
    """A contested UUID's runs apart for each node that reported it, in node order."""
    return [[run for run in runs if run[3] == node] for node in sorted({run[3] for run in runs})]


def gpu_label(uuid: str, node: str, index: int) -> str:
    return f"GPU{index} ({uuid}) of {node}"


def repeat_gpu_failures(store: Store, part: NodeRun, started: str, failures: int = DEFAULT_FAILURES,
                        days: int = DEFAULT_DAYS, now: dt.datetime | None = None) -> dict[str, list[Failure]]:
    """Each GPU of the node run (not recorded yet) with at least `failures` separate failures within `days`, this
    run included: {label: failures}."""
    gpus = [(index, uuid, bus) for index, uuid, bus, _ in part.gpus if uuid]
    if not gpus:  # a report that names no GPU (older agents): its GPUs cannot be followed
        return {}
    start = since(now or dt.datetime.now(dt.timezone.utc), days)
    uuids = [u for _, u, _ in gpus]
    past = gpu_history(store, start, uuids)
    known = claims_in(past)
    gpu_claims.with_run(known, part.node, uuids, started)
    disputed = gpu_claims.contested(known)
    failed = [(check, reason or "") for check, status, reason in part.results if status == "fail"]
    found = {}
    for index, uuid, bus in gpus:
        status, what = gpu_verdict(part.status, failed, index, uuid, bus)
        mine = [run for run in past.get(uuid, []) if uuid not in disputed or run[3] == part.node]
        runs = [run[:3] for run in mine] + [(started, status, what)]
        if len(items := failures_of(runs)) >= failures:
            found[gpu_label(uuid, part.node, index)] = items
    return found


def gpu_offenders(store: Store, failures: int = DEFAULT_FAILURES, days: int = DEFAULT_DAYS,
                  now: dt.datetime | None = None) -> dict[str, list[Failure]]:
    """Every GPU of the store with at least `failures` separate failures within `days`, named where it was last
    (a contested UUID: once for each node that reported it, with that node's runs only)."""
    start = since(now or dt.datetime.now(dt.timezone.utc), days)
    history = gpu_history(store, start)
    disputed = gpu_claims.contested(claims_in(history))
    found = {}
    for uuid, runs in history.items():
        for part in by_node(runs) if uuid in disputed else [runs]:
            if len(items := failures_of([run[:3] for run in part])) >= failures:
                found[gpu_label(uuid, part[-1][3], part[-1][4])] = items
    return found
