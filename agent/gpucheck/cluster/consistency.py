"""Do the nodes agree? Driver, CUDA driver, each library per consumer, each framework per stack, GPU
models and count, the profile each node chose, and (after a burn-in) the bits the same seeded GEMM gave
(consistency_sdc). Pure: node facts in, results out."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..model import Status
from .consistency_sdc import compare_sdc
from .context import ClusterResult

PREFIX = "cluster.consistency."
MISSING = "(missing)"  # the key is absent on this node (e.g. no torch stack): itself a difference
NOT_FOUND = "(not found)"  # the key is there but the node found no version
SHOW_NODES = 8
TOP_LEVEL = {
    "profile": "profile",
    "driver_version": "driver",
    "cuda_driver_version": "CUDA driver",
    "gpu_count": "GPU count",
    "gpu_models": "GPU models",
}
REMEDIATION = ("bring the odd nodes to the pinned versions (inventory group_vars/all/versions.yml) with "
               "site.yml --limit NODE, or check the hardware that differs")


def flatten(facts: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """check key -> (label, canonical value) for everything compared."""
    out: dict[str, tuple[str, str]] = {}
    for key, label in TOP_LEVEL.items():
        if key in facts:
            out[key] = (label, canonical(facts[key]))
    for lib, consumers in (facts.get("libraries") or {}).items():
        for consumer, version in (consumers or {}).items():
            out[f"libraries.{lib}.{consumer}"] = (f"{lib} ({consumer})", canonical(version))
    for stack, versions in (facts.get("frameworks") or {}).items():
        for name, version in (versions or {}).items():
            out[f"frameworks.{stack}.{name}"] = (f"{name} ({stack} stack)", canonical(version))
    return out


def canonical(value: Any) -> str:
    if value is None:
        return NOT_FOUND
    if isinstance(value, list | tuple):
        return ", ".join(canonical(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def names(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:SHOW_NODES])
    return shown + (f" and {len(nodes) - SHOW_NODES} more" if len(nodes) > SHOW_NODES else "")


def compare_key(key: str, label: str, values: dict[str, str]) -> ClusterResult:
    """values: node -> canonical value, every compared node present."""
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value, []).append(node)
    measured = {value: nodes for value, nodes in groups.items()}
    check = PREFIX + key
    if len(groups) == 1:
        value = next(iter(groups))
        return ClusterResult(check, Status.PASS, measured, value, f"all {len(values)} nodes: {label} {value}")
    ranked = Counter({value: len(nodes) for value, nodes in groups.items()}).most_common()
    if ranked[0][1] == ranked[1][1]:  # a tie: there is no majority to blame anyone against
        parts = [f"{count} node{'s' if count > 1 else ''} ({names(groups[value])}) {value}" for value, count in ranked]
        return ClusterResult(check, Status.FAIL, measured, None, f"no majority for {label}: " + "; ".join(parts),
                             REMEDIATION)
    majority, count = ranked[0]
    odd = [(value, groups[value]) for value, _ in ranked[1:]]
    parts = [f"{names(nodes)}: {label} {value}" for value, nodes in odd]
    others = f"{count} other{'s' if count > 1 else ''}: {majority}"
    blamed = {node: f"{label} {value} (majority {majority})" for value, nodes in odd for node in nodes}
    return ClusterResult(check, Status.FAIL, measured, majority, "; ".join(parts) + ", " + others, REMEDIATION,
                         nodes=blamed)


def compare(facts_by_node: dict[str, dict[str, Any]]) -> list[ClusterResult]:
    """One result per compared key, in a stable order. Fewer than two nodes: nothing to compare."""
    if len(facts_by_node) < 2:
        return [ClusterResult(PREFIX.rstrip("."), Status.SKIP, reason=f"{len(facts_by_node)} node(s) reported: "
                              "nothing to compare")]
    flat = {node: flatten(facts or {}) for node, facts in facts_by_node.items()}
    keys: dict[str, str] = {}
    for entries in flat.values():
        for key, (label, _) in entries.items():
            keys.setdefault(key, label)
    order = [k for k in TOP_LEVEL if k in keys] + sorted(k for k in keys if k not in TOP_LEVEL)
    return [compare_key(key, keys[key], {node: entries.get(key, (None, MISSING))[1] for node, entries in flat.items()})
            for key in order] + compare_sdc(facts_by_node)
