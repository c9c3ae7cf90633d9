"""`gpucheck cluster --drain`: the report's verdicts applied to Slurm through scontrol on this machine, by the rule
`gpucheck node --slurm` follows (slurm.decide): a node on the drain list is drained with its `gpucheck:` reason
(unless someone else drained it), a node that passed is resumed if gpucheck drained it, a node that could not
be checked is left as it is. A node's Slurm name is its inventory name, or its `slurm_node_name` host variable."""

from __future__ import annotations

from typing import Any

from ... import slurm
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
            out[node] = ("fail", [str(drain[node]).removeprefix(slurm.REASON_PREFIX).strip()])
        elif status in (Status.PASS.value, Status.WARN.value):
            out[node] = ("pass", [])
        else:
            out[node] = ("error", [])
    return out


def apply_drain(ctx: ClusterContext, doc: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    """([{"node", "slurm_node", "action", "text"}], the error that stopped it or None)."""
    done: list[dict[str, str]] = []
    for node, (verdict, findings) in verdicts(ctx, doc).items():
        name = slurm_name(ctx, node)
        try:
            action = slurm.decide(slurm.show_node(name), verdict, findings)
            slurm.apply(action)
        except slurm.SlurmError as exc:
            done.append({"node": node, "slurm_node": name, "action": "error", "text": str(exc)})
            if any(str(exc).startswith(prefix) for prefix in WHOLE_CLUSTER):
                return done, str(exc)
            continue
        done.append({"node": node, "slurm_node": name, "action": action.verb, "text": action.describe()})
    errors = [d for d in done if d["action"] == "error"]
    return done, (f"{len(errors)} node(s) not updated: " + "; ".join(d["text"] for d in errors[:3])
                  if errors else None)
