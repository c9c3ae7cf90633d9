"""Repeat offenders (docs/history.md): a node that failed `failures` times within `days`. A failure is counted
once however many runs saw it: a failing run right after another failing one (the health check every 5 minutes
until the node was drained and repaired) is the same failure; it counts again only after the node passed (or
warned) in between. A run that could not judge the node (error) neither starts nor ends a failure."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from .records import CLUSTER, NodeRun
from .store import Store

# 3 in 30 days: one failure is an event, a second may be one fault seen again before its repair took; a third
# within a month is a part that does not stay fixed, which is what an RMA is for.
DEFAULT_FAILURES = 3
DEFAULT_DAYS = 30


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
