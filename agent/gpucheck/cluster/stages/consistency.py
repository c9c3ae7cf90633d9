"""Do the nodes agree? Driver, CUDA driver, each library per consumer, each framework per stack, GPU
models and count, the profile each node chose, and (after a burn-in) the bits the same seeded GEMM gave
(consistency_sdc). Pure: node facts (and the libraries each node's profile requires) in, results out.

A library that every node lacks agrees, and is still no pass where the nodes' profile requires it: the
nodes that lack a required library fail, named and blamed (drained), as each node's own libs.<name>
check already failed them. It is `fail`, not `error`: the library was looked for and is absent, a
finding about the nodes, not a check that could not run. Where some nodes have it, those nodes are
compared among themselves, never blamed against a majority that lacks it."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from ...model import Status
from ..context import ClusterContext, ClusterResult
from .consistency_sdc import compare_sdc
from .majority import grouped, names, tied

PREFIX = "cluster.consistency."
MISSING = "(missing)"  # the key is absent on this node (e.g. no torch stack): itself a difference
NOT_FOUND = "(not found)"  # the key is there but the node found no version
TOP_LEVEL = {
    "profile": "profile",
    "driver_version": "driver",
    "cuda_driver_version": "CUDA driver",
    "gpu_count": "GPU count",
    "gpu_models": "GPU models",
}
REMEDIATION = ("bring the odd nodes to the pinned versions (inventory group_vars/all/versions.yml) with "
               "site.yml --limit NODE, or check the hardware that differs")
MISSING_LIBRARY = ("install the library on the named nodes: site.yml --limit NODE (their own libs.{lib} check says "
                   "where it was looked for)")


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


def compare_key(key: str, label: str, values: dict[str, str]) -> ClusterResult:
    """values: node -> canonical value, every compared node present."""
    groups, ranked = grouped(values)
    measured = {value: nodes for value, nodes in groups.items()}
    check = PREFIX + key
    if len(groups) == 1:
        value = next(iter(groups))
        return ClusterResult(check, Status.PASS, measured, value, f"all {len(values)} nodes: {label} {value}"
                             if len(values) > 1 else f"the only node: {label} {value}")
    if tied(ranked):
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


def required_libraries(thresholds: Any) -> frozenset[str]:
    """The libraries a node's profile requires, from its report's `thresholds` (libraries.required, without
    a `lib` prefix, as the node's libs.* checks read it); none when the report has no thresholds."""
    section = thresholds.get("libraries") if isinstance(thresholds, dict) else None
    names = section.get("required") if isinstance(section, dict) else None
    return frozenset(str(n).removeprefix("lib") for n in names) if isinstance(names, list) else frozenset()


def compare_library(key: str, label: str, values: dict[str, str], requiring: set[str] | None) -> ClusterResult:
    """A library key (libraries.<lib>.<consumer>): the nodes whose profile requires the library and that
    found no copy of it fail, whatever the others have; the rest are compared as any key. requiring: the
    nodes whose profile requires it (None: not known, the caller passed no thresholds)."""
    lib = key.split(".")[1]
    absent = [node for node, value in values.items() if value == NOT_FOUND and node in (requiring or ())]
    if not absent:
        result = compare_key(key, label, values)
        if requiring is not None and result.status == Status.PASS and result.expected == NOT_FOUND:
            result.reason += " (not required by their profile)"
        return result
    present = {node: value for node, value in values.items() if node not in absent}
    where = names(absent) + ("" if present else " (every node)")
    reason = f"{label} not found on {where}, and their profile requires {lib}"
    blamed = {node: f"{label} not found (the profile requires {lib})" for node in absent}
    measured: dict[str, list[str]] = {}
    for node, value in values.items():
        measured.setdefault(value, []).append(node)
    remediation = MISSING_LIBRARY.format(lib=lib)
    if not present:
        return ClusterResult(PREFIX + key, Status.FAIL, measured, "found", reason, remediation, nodes=blamed)
    others = compare_key(key, label, present)
    if others.status == Status.PASS:
        reason += f"; {len(present)} other{'s' if len(present) > 1 else ''}: {others.expected}"
    else:
        reason += f"; among the others: {others.reason}"
        remediation += f"; {others.remediation}"
    return ClusterResult(PREFIX + key, Status.FAIL, measured, others.expected or "found", reason, remediation,
                         nodes={**others.nodes, **blamed})


def compare(facts_by_node: dict[str, dict[str, Any]],
            required_by_node: Mapping[str, Collection[str]] | None = None) -> list[ClusterResult]:
    """One result per compared key, in a stable order. Fewer than two nodes: nothing to compare.
    required_by_node: node -> the libraries its profile requires (`required_libraries` of its report's
    thresholds); a node left out requires none."""
    if len(facts_by_node) < 2:
        return [ClusterResult(PREFIX.rstrip("."), Status.SKIP, reason=f"{len(facts_by_node)} node(s) reported: "
                              "nothing to compare")]
    flat = {node: flatten(facts or {}) for node, facts in facts_by_node.items()}
    keys: dict[str, str] = {}
    for entries in flat.values():
        for key, (label, _) in entries.items():
            keys.setdefault(key, label)
    order = [k for k in TOP_LEVEL if k in keys] + sorted(k for k in keys if k not in TOP_LEVEL)
    results = []
    for key in order:
        values = {node: entries.get(key, (None, MISSING))[1] for node, entries in flat.items()}
        if key.startswith("libraries."):
            lib = key.split(".")[1]
            requiring = None if required_by_node is None else {n for n in values if lib in required_by_node.get(n, ())}
            results.append(compare_library(key, keys[key], values, requiring))
        else:
            results.append(compare_key(key, keys[key], values))
    return results + compare_sdc(facts_by_node)


def consistency_stage(ctx: ClusterContext) -> list[ClusterResult]:
    """The stage: every node that reported, with the libraries its own report's thresholds require."""
    checked = ctx.checked()
    reports = {node: ctx.nodes[node].report or {} for node in checked}
    return compare({node: report.get("facts") or {} for node, report in reports.items()},
                   {node: required_libraries(report.get("thresholds")) for node, report in reports.items()})
