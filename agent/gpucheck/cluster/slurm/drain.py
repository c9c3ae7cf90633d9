"""`gpucheck cluster --drain`: the report's verdicts applied to Slurm through scontrol on this machine, by
drain_rule's table for the `cluster` path (an active check's): a node on the drain list is drained with a
`gpucheck: cluster:` reason (unless someone else holds it), a node that passed is resumed if a gpucheck check
drained it, a node that could not be checked is left as it is. A node's Slurm name is its inventory name, or its
`slurm_node_name` host variable."""

from __future__ import annotations

from typing import Any

from ... import drain_rule, slurm
from ...model import Status
from ..context import ClusterContext
from .jobs import slurm_name

# scontrol failures that would fail the same way for every node: said once, the rest not tried
WHOLE_CLUSTER = ("scontrol not found", "slurmctld does not answer", "not allowed", "munge refused")


def verdicts(ctx: ClusterContext, doc: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """node -> (fail | pass | error, its findings) from the written report."""
    drain = {d["node"]: d["reason"] for d in doc.get("drain") or () if isinstance(d, dict) and "node" in d}
    out: dict[str, tuple[str, list[str]]] = {}
    for node, entry in (doc.get("nodes") or {}).items():
        status = entry.get("status") if isinstance(entry, dict) else None
        if node in drain:
            out[node] = ("fail", [str(drain[node]).removeprefix(drain_rule.REASON_PREFIX).strip()])
        elif status in (Status.PASS.value, Status.WARN.value):
            out[node] = ("pass", [])
        else:
            out[node] = ("error", [])
    return out


def apply_drain(ctx: ClusterContext, doc: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    """([{"node", "slurm_node", "action", "text"}], the error that stopped it or None)."""
    return apply_verdicts({node: (slurm_name(ctx, node), *judged) for node, judged in verdicts(ctx, doc).items()})


def apply_verdicts(judged: dict[str, tuple[str, str, list[str]]]) -> tuple[list[dict[str, str]], str | None]:
    """node -> (its Slurm name, verdict, findings), each applied by the table's `cluster` column."""
    done: list[dict[str, str]] = []
    for node, (name, verdict, findings) in judged.items():
        try:
            action = drain_rule.decide(slurm.show_node(name), "cluster", verdict, findings)
            drain_rule.apply(action)
        except slurm.SlurmError as exc:
            done.append({"node": node, "slurm_node": name, "action": "error", "text": str(exc)})
            if any(str(exc).startswith(prefix) for prefix in WHOLE_CLUSTER):
                return done, str(exc)
            continue
        done.append({"node": node, "slurm_node": name, "action": action.verb, "text": action.describe()})
    errors = [d for d in done if d["action"] == "error"]
    return done, (f"{len(errors)} node(s) not updated: " + "; ".join(d["text"] for d in errors[:3])
                  if errors else None)
