"""Do the nodes compute the same bits? `gpu.sdc` runs one seeded GEMM on every GPU and each node keeps
the SHA-256 of the result (facts.burnin.sdc, docs/burnin.md): nodes whose `key` (SKU, CuPy, cuBLAS and
driver versions) is the same must have the same checksum. Pure: node facts in, results out.

Per key: every node the same -> pass. Otherwise the nodes off the most common checksum are named and
blamed (fail, drained). No most common checksum (a 1-1 or 2-2 split) -> fail naming each group and
blaming nobody: a split cannot say which side computes wrong bits, and draining both would take a good
node out (rerun with a third node of the same key to find the odd one); the same rule as a version tie.
A key only one node has: nothing to compare with (skip). A node whose own GPUs disagree (`disagree`)
failed its own gpu.sdc; it is blamed here too. Nodes without a checksum are listed as not compared."""

from __future__ import annotations

from typing import Any

from ...model import Status
from ..context import ClusterResult
from .majority import grouped, names, tied

CHECK = "cluster.consistency.sdc"
SHOWN_DIGITS = 16  # of a checksum in a reason (the measured value keeps it whole)
REMEDIATION = ("run gpucheck node --full --only gpu.sdc on the named nodes again; a node that keeps computing "
               "different bits than its peers has a faulty GPU (silent data corruption): drain it and run the "
               "vendor's diagnostics (dcgmi diag -r 4)")


def sdc_of(facts: dict[str, Any]) -> dict[str, Any] | None:
    """The node's {checksum, key, disagree}, or None when it has no comparable checksum."""
    burnin = facts.get("burnin") if isinstance(facts, dict) else None
    sdc = burnin.get("sdc") if isinstance(burnin, dict) else None
    if not isinstance(sdc, dict) or not isinstance(sdc.get("checksum"), str) or not isinstance(sdc.get("key"), str):
        return None
    disagree = sdc.get("disagree") if isinstance(sdc.get("disagree"), list) else []
    return {"checksum": sdc["checksum"], "key": sdc["key"], "disagree": [str(g) for g in disagree]}


def own_gpus_disagree(sdcs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {node: "its own GPUs compute different bits (" + ", ".join(s["disagree"]) + "): see its gpu.sdc"
            for node, s in sdcs.items() if s["disagree"]}


def compare_group(key: str, sdcs: dict[str, dict[str, Any]]) -> ClusterResult:
    """One key's nodes (node -> sdc facts) compared."""
    check = f"{CHECK}[{key}]"
    groups, ranked = grouped({node: sdc["checksum"] for node, sdc in sdcs.items()})
    measured = {checksum: nodes for checksum, nodes in groups.items()}
    blamed = own_gpus_disagree(sdcs)
    inner = ("; " + "; ".join(f"{n}: {why}" for n, why in blamed.items())) if blamed else ""
    if len(sdcs) == 1:
        node = next(iter(sdcs))
        status = Status.FAIL if blamed else Status.SKIP
        return ClusterResult(check, status, measured, None, f"only {node} has {key}: no other node to compare its "
                             f"checksum with{inner}", REMEDIATION if blamed else "", nodes=blamed)
    if len(ranked) == 1:
        checksum = ranked[0][0]
        status = Status.FAIL if blamed else Status.PASS
        return ClusterResult(check, status, measured, checksum, f"all {len(sdcs)} nodes compute the same bits "
                             f"({checksum[:SHOWN_DIGITS]}){inner}", REMEDIATION if blamed else "", nodes=blamed)
    if tied(ranked):  # a split: no majority to blame anyone against
        parts = [f"{names(groups[c])}: {c[:SHOWN_DIGITS]}" for c, _ in ranked]
        return ClusterResult(check, Status.FAIL, measured, None, "different bits and no majority to say which are "
                             "wrong: " + "; ".join(parts) + "; rerun with a third node of the same key" + inner,
                             REMEDIATION, nodes=blamed)
    majority, count = ranked[0]
    odd = [(c, groups[c]) for c, _ in ranked[1:]]
    for checksum, nodes in odd:
        for node in nodes:
            why = f"computes different bits: {checksum[:SHOWN_DIGITS]}, not {majority[:SHOWN_DIGITS]} as {count} others"
            blamed[node] = why + ("; " + blamed[node] if node in blamed else "")
    parts = [f"{names(nodes)}: {c[:SHOWN_DIGITS]}" for c, nodes in odd]
    return ClusterResult(check, Status.FAIL, measured, majority,
                         "different bits: " + "; ".join(parts) + f", {count} others: {majority[:SHOWN_DIGITS]}" + inner,
                         REMEDIATION, nodes=blamed)


def compare_sdc(facts_by_node: dict[str, dict[str, Any]]) -> list[ClusterResult]:
    """One result per key; one more listing the nodes not compared. Nothing when no node has a checksum
    (the burn-in did not run: gpucheck cluster without --full)."""
    sdcs = {node: s for node, s in ((n, sdc_of(f)) for n, f in facts_by_node.items()) if s is not None}
    if not sdcs:
        return []
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for node, sdc in sdcs.items():
        by_key.setdefault(sdc["key"], {})[node] = sdc
    results = [compare_group(key, by_key[key]) for key in sorted(by_key)]
    missing = [n for n in facts_by_node if n not in sdcs]
    if missing:
        results.append(ClusterResult(CHECK, Status.SKIP, {"not_compared": missing}, None,
                                     f"not compared: {names(missing)} reported no gpu.sdc checksum (their own "
                                     "gpu.sdc result says why)"))
    return results
