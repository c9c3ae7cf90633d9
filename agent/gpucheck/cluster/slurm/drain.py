"""`gpucheck cluster --drain`: the report's verdicts applied to Slurm through scontrol on this machine, by
drain_rule's table for the `cluster` path (an active check's): a node on the drain list is drained with a
`gpucheck: cluster:` reason (unless someone else holds it), a node that passed is resumed if a gpucheck check
drained it, a node that could not be checked is left as it is. A node's Slurm name is its inventory name, or its
`slurm_node_name` host variable."""

from __future__ import annotations

from typing import Any

from ... import drain_rule, slurm
from .. import handoff
from ..context import ClusterContext
from .jobs import slurm_name

# scontrol failures that would fail the same way for every node: said once, the rest not tried
WHOLE_CLUSTER = ("scontrol not found", "slurmctld does not answer", "not allowed", "munge refused")


def apply_drain(ctx: ClusterContext, doc: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    """([{"node", "slurm_node", "action", "text"}], the error that stopped it or None)."""
    return apply_verdicts({node: (slurm_name(ctx, node), "pass" if verdict == "warn" else verdict, findings)
                           for node, (verdict, findings) in handoff.verdicts(doc).items()})


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
    return done, handoff.not_updated(done)
