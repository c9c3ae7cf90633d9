"""From node outcomes and cluster results to the verdict: the fail-safe for a blanket outage, the
drain list, the exit code, and the report document (report.json's content)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import __version__
from ..drain_rule import REASON_PREFIX, drain_reason
from ..model import EXIT_UNKNOWN, Result, Status, exit_code, worst
from ..report.cluster.writer import node_file
from .context import ClusterContext, ClusterResult, NodeOutcome


def fail_safe(nodes: dict[str, NodeOutcome]) -> None:
    """Every node unreachable is likelier our side (the admin node's network, a wrong inventory) than
    every node down at once: report it as could-not-check, and drain nothing (a blip must never
    drain the fleet)."""
    if nodes and all(o.kind == "unreachable" for o in nodes.values()):
        for outcome in nodes.values():
            outcome.status = Status.ERROR
            outcome.reason += " (no node was reachable: check this machine's network and the inventory)"


def drain(ctx: ClusterContext) -> list[tuple[str, str]]:
    """(node, reason) for every node with a failure: its own failed checks, unreachable or hung, or
    blamed by a failed cluster check. In inventory order."""
    reasons: dict[str, list[str]] = {}
    for name, outcome in ctx.nodes.items():
        if outcome.status != Status.FAIL:
            continue
        if outcome.report:
            reasons.setdefault(name, []).extend(findings(outcome.report) or [outcome.reason])
        else:
            reasons.setdefault(name, []).append(outcome.reason)
    for result in ctx.results:
        if result.status == Status.FAIL and isinstance(result, ClusterResult):
            for node, why in result.nodes.items():
                reasons.setdefault(node, []).append(f"{result.check} {why}")
    order = [h.name for h in ctx.inventory.hosts]
    return [(node, drain_reason(reasons[node]))
            for node in sorted(reasons, key=lambda n: order.index(n) if n in order else len(order))]


def verdicts(doc: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """node -> (fail | warn | pass | error, its findings) from the written report, for --drain: a node on the drain
    list fails with its reason's findings, whatever its own checks said."""
    listed = {d["node"]: d["reason"] for d in doc.get("drain") or () if isinstance(d, dict) and "node" in d}
    out: dict[str, tuple[str, list[str]]] = {}
    for node, entry in (doc.get("nodes") or {}).items():
        status = entry.get("status") if isinstance(entry, dict) else None
        if node in listed:
            out[node] = ("fail", [str(listed[node]).removeprefix(REASON_PREFIX).strip()])
        elif status in (Status.PASS.value, Status.WARN.value):
            out[node] = (status, [])
        else:
            out[node] = ("error", [])
    return out


def not_updated(done: list[dict[str, str]]) -> str | None:
    """--drain's error line for the nodes the scheduler refused (the first three said), or None."""
    errors = [d for d in done if d["action"] == "error"]
    return (f"{len(errors)} node(s) not updated: " + "; ".join(d["text"] for d in errors[:3])) if errors else None


def would_drain(ctx: ClusterContext) -> list[tuple[str, str]]:
    """(node, reason) for every node an observed check (the profile's `observe`) failed on: what turning it on
    would have drained. In inventory order."""
    found = []
    for host in ctx.inventory.hosts:
        outcome = ctx.nodes.get(host.name)
        if failed := findings(outcome.report or {}, observed_only=True) if outcome else []:
            found.append((host.name, drain_reason(failed)))
    return found


def findings(report: dict[str, Any], observed_only: bool = False) -> list[str]:
    """A node report's failed checks as a drain reason names them ("<check> <reason>"); `observed_only`: only those
    the profile observes."""
    return [f"{r.get('check')} {r.get('reason', '')}".strip() for r in report.get("results", [])
            if r.get("status") == Status.FAIL.value and (r.get("observed") is True or not observed_only)]


def overall_exit(ctx: ClusterContext, interrupted: bool = False) -> int:
    """fail wins, then error (a node that could not be checked, a stage that could not run), then warn."""
    statuses = [Result("node", o.status) for o in ctx.nodes.values()] + list(ctx.results)
    missing = [h for h in ctx.inventory.hosts if h.name not in ctx.nodes]
    if interrupted or missing:
        statuses.append(Result("cluster.incomplete", Status.ERROR))
    code = exit_code(statuses)
    return code if statuses else EXIT_UNKNOWN


def blamed(ctx: ClusterContext) -> dict[str, list[tuple[Status, str]]]:
    """node -> (status, "check why") of each failed or warning cluster result that names it."""
    found: dict[str, list[tuple[Status, str]]] = {}
    for result in ctx.results:
        if isinstance(result, ClusterResult) and result.status in (Status.FAIL, Status.WARN):
            for node, why in result.nodes.items():
                found.setdefault(node, []).append((result.status, f"{result.check} {why}"))
    return found


def node_entry(outcome: NodeOutcome, blame: list[tuple[Status, str]]) -> dict[str, Any]:
    """A node as the report shows it: its own outcome, made worse by what the cluster checks say of it
    (a node whose own checks pass but whose driver differs from the fleet's is not a passing node)."""
    entry = outcome.to_dict()
    if blame:
        entry["node_status"] = outcome.status.value  # what the node's own checks said
        entry["status"] = worst([outcome.status, *(s for s, _ in blame)]).value
        own = [outcome.reason] if outcome.status != Status.PASS else []
        entry["reason"] = "; ".join(own + [why for _, why in blame])
    return entry


def counts(statuses: list[Status]) -> dict[str, int]:
    found = {s.value: 0 for s in Status}
    for status in statuses:
        found[status.value] += 1
    return found


def document(ctx: ClusterContext, started: str, duration_s: float, argv: list[str], complete: bool,
             interrupted: bool = False) -> dict[str, Any]:
    """Everything: options, the inventory used, every node's report, the cluster results, timings."""
    drained = drain(ctx)
    code = overall_exit(ctx, interrupted)
    hosts = {h.name: h for h in ctx.inventory.hosts}
    blame = blamed(ctx)
    nodes = {}
    for name in hosts:
        outcome = ctx.nodes.get(name)
        if outcome:
            entry = node_entry(outcome, blame.get(name, []))
        elif interrupted:
            entry = {"host": name, "status": Status.ERROR.value, "reason": "not checked: the run was interrupted",
                     "kind": "interrupted"}
        else:
            entry = {"host": name, "status": "pending", "reason": "not checked yet"}
        entry["address"] = f"{hosts[name].address}:{hosts[name].port}"
        entry["file"] = node_file(name)  # where nodes/ keeps its outcome (once it has one)
        nodes[name] = entry
    node_counts = {s.value: 0 for s in Status}
    for entry in nodes.values():
        if entry["status"] in node_counts:
            node_counts[entry["status"]] += 1
    doc = {
        "gpucheck_version": __version__,
        "kind": "cluster",
        "cluster_name": ctx.inventory.cluster,
        "started": started,
        "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 3),
        "complete": complete,
        "interrupted": interrupted,
        "exit_code": code,
        "command": argv,
        "options": vars(ctx.options),
        "inventory": ctx.inventory.to_dict(),
        "counts": {"nodes": node_counts, "cluster": counts([r.status for r in ctx.results])},
        "nodes": nodes,
        "cluster": [r.to_dict() for r in ctx.results],
        "figures": ctx.figures,
        "pairs": ctx.pairs,
        "scaling": ctx.scaling,
        "training": ctx.training,
        "history": ctx.history,
        ctx.drained_in: ctx.drained,
        "drain": [{"node": n, "reason": r} for n, r in drained],
        "would_drain": [{"node": n, "reason": r} for n, r in would_drain(ctx)],
        "timings": ctx.timings,
    }
    if ctx.burn:  # the burn stage ran (opt-in)
        doc["burn"] = ctx.burn
    return doc
