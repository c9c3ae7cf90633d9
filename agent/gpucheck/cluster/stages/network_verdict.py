"""From what the network stage measured to what the report says: the stage's one result (whom the
re-tests blame, slow paths, pairs that could not be measured), one ctx.pairs entry per pair (its
first figure; re-tests under "retest") and ctx.figures["net_Gbps"] (each node's median over its pairs)
for the straggler comparison."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ...model import Status
from ...report.values import figure
from ..context import ClusterContext, ClusterResult, Options
from ..nodes import Participants
from .pair_bandwidth import UNIT, Measured, Plan
from .schedule import Blame, Pair, pair

CHECK = "cluster.network"
METRIC = "net_Gbps"
REMEDIATION_NODE = ("check the node's link: cable/transceiver, port speed and errors (ethtool -S, ibstat, "
                    "perfquery), its switch port; re-run gpucheck cluster --stages network after the fix")
REMEDIATION_PATH = ("both nodes are fast with other partners: check the path between them (switch, "
                    "uplink, routing, ECMP hashing)")
REMEDIATION_FABRIC = "check the fabric: subnet manager, switch firmware, link rates (ibstat, iblinkinfo)"


@dataclass
class Survey:
    """Everything the network stage found."""

    plan: Plan
    first: dict[Pair, Measured] = field(default_factory=dict)  # each pair's first measurement
    retest: dict[Pair, list[Measured]] = field(default_factory=dict)  # re-measurements of slow pairs
    errors: list[Measured] = field(default_factory=list)  # measurements that gave no figure
    reference: float = 0.0  # the median of each node's best pair
    threshold: float = 0.0  # a pair below it is slow
    blame: Blame = field(default_factory=lambda: Blame({}, [], {}, []))
    slow_paths: list[Pair] = field(default_factory=list)  # slow again when re-measured, nobody to blame
    transient: list[Pair] = field(default_factory=list)  # slow once, fast when re-measured

    def figures(self) -> dict[Pair, float]:
        """Each measured pair's first figure."""
        return {p: m.value for p, m in self.first.items() if m.value is not None}

    def every_measurement(self) -> list[tuple[Pair, Measured, bool]]:
        """(pair, measurement, is a re-test), first measurements first."""
        return ([(p, m, False) for p, m in self.first.items()]
                + [(p, m, True) for p, ms in self.retest.items() for m in ms])


def fmt(value: float) -> str:
    """As the report shows every figure (report/values.py: one precision per figure, wherever it appears)."""
    return figure(value)


def fill_pairs(ctx: ClusterContext, survey: Survey) -> None:
    """One ctx.pairs entry per measured pair: fail when it has a blamed node, warn when slow (a slow
    path, or slow once and never re-tested), pass otherwise."""
    bad, threshold = survey.blame.bad, survey.threshold
    seen: dict[Pair, dict[str, Any]] = {}
    for key, m, is_retest in survey.every_measurement():
        if m.value is None:
            continue
        entry = seen.get(key)
        if entry is None:
            entry = seen[key] = {"a": m.a, "b": m.b, "value": m.value, "unit": UNIT, "method": m.method,
                                 "status": "pass"}
            if is_retest:
                entry["retest_only"] = True
            ctx.pairs.append(entry)
        else:
            entry.setdefault("retest", []).append(m.value)
        if m.value < threshold:
            if m.a in bad or m.b in bad:
                entry["status"] = "fail"
            elif entry["status"] != "fail" and (key in survey.slow_paths or not is_retest):
                entry["status"] = "warn"
    for entry in seen.values():  # a first-pass slow pair whose re-test was fast and blamed nobody
        key = pair(entry["a"], entry["b"])
        if entry["status"] == "warn" and key not in survey.slow_paths and not (set(key) & set(bad)) \
                and any(v >= threshold for v in entry.get("retest", [])):
            entry["status"] = "pass"


def fill_figures(ctx: ClusterContext, survey: Survey) -> None:
    """ctx.figures["net_Gbps"]: each node's median over every pair it was measured in."""
    per_node: dict[str, list[float]] = {}
    for _, m, _ in survey.every_measurement():
        if m.value is not None:
            per_node.setdefault(m.a, []).append(m.value)
            per_node.setdefault(m.b, []).append(m.value)
    if per_node:
        figures = ctx.figures.setdefault(METRIC, {})
        for node, values in per_node.items():
            figures[node] = round(statistics.median(values), 3)


def measured(survey: Survey, options: Options, cast: Participants | None = None) -> dict[str, Any]:
    """The result's `measured`: the figures, the threshold and its basis, whom the re-tests named, and the nodes
    left out of the stage with why (the report shows them in the pair map, never silently missing)."""
    first = survey.figures()
    values = list(first.values())
    return {
        "method": survey.plan.method, "pairs": len(survey.first), "rounds_seconds_each": options.pair_seconds,
        "median_Gbps": round(statistics.median(values), 3), "min_Gbps": min(values), "max_Gbps": max(values),
        "reference_Gbps": round(survey.reference, 3), "threshold_Gbps": round(survey.threshold, 3),
        "slow_pairs": [f"{a}-{b}" for a, b in sorted(p for p, v in first.items() if v < survey.threshold)],
        "bad_nodes": sorted(survey.blame.bad), "slow_paths": [f"{a}-{b}" for a, b in survey.slow_paths],
        "inconclusive": survey.blame.inconclusive, "errors": [m.error for m in survey.errors],
        "left_out": dict(cast.left_out) if cast is not None else {},
    }


def expected(survey: Survey, options: Options) -> str:
    basis = f"{options.pair_fraction:g} x reference {fmt(survey.reference)} {UNIT} (median of each node's best pair)"
    if survey.plan.minimum is not None:
        basis += f", and >= the profile's ib_write_bw_Gbps_min {survey.plan.minimum:g} {UNIT}"
    return f">= {fmt(survey.threshold)} {UNIT} ({basis})"


def summary(survey: Survey, cast: Participants) -> str:
    """'N pair(s) by METHOD between K nodes: median, min' and the notes and who was left out."""
    values = list(survey.figures().values())
    how = "ib_write_bw" if survey.plan.method == "ib_write_bw" else "TCP (gpucheck net)"
    node_count = len({n for p in survey.figures() for n in p})
    text = (f"{len(values)} pair(s) by {how} between {node_count} nodes: median {fmt(statistics.median(values))}, "
            f"min {fmt(min(values))} {UNIT}")
    notes = [survey.plan.note] if survey.plan.note else []
    if survey.transient:
        notes.append("slow once, fast when re-measured: " + ", ".join(f"{a}-{b}" for a, b in survey.transient))
    if survey.errors:
        notes.append(f"{len(survey.errors)} measurement(s) failed: "
                     + "; ".join(m.error or "" for m in survey.errors[:3]))
    return text + ("; " + "; ".join(notes) if notes else "") + cast.note()


def verdict(survey: Survey, options: Options, cast: Participants, duration: float) -> ClusterResult:
    """Fail naming the nodes slow with every known-good partner (drained), or pairs below the floor
    with nobody to blame; warn for slow paths and inconclusive re-tests; error when some pairs could
    not be measured; pass otherwise."""
    facts, wanted, tail = measured(survey, options, cast), expected(survey, options), summary(survey, cast)
    evidence = "\n\n".join(m.evidence for m in survey.errors[:3])
    blame, threshold, minimum = survey.blame, survey.threshold, survey.plan.minimum
    if blame.bad:
        nodes = {node: "slow with every known-good partner: " + ", ".join(f"{g} {fmt(v)} {UNIT}" for g, v in got)
                 + f" (threshold {fmt(threshold)} {UNIT})" for node, got in blame.bad.items()}
        reason = "; ".join(f"{n} {why}" for n, why in nodes.items())
        return ClusterResult(CHECK, Status.FAIL, facts, wanted, f"{reason}; {tail}", REMEDIATION_NODE, evidence,
                             duration, nodes=nodes)
    below_floor = minimum is not None and any(v < minimum for v in survey.figures().values())
    if below_floor and not blame.cleared and not survey.slow_paths:
        return ClusterResult(CHECK, Status.FAIL, facts, wanted,
                             f"pairs below the profile's minimum {minimum:g} {UNIT} and no node to blame "
                             f"(fabric-wide?): {', '.join(facts['slow_pairs'][:8])}; {tail}",
                             REMEDIATION_FABRIC, evidence, duration)
    if survey.slow_paths or blame.inconclusive:
        first = survey.figures()
        parts = [f"slow path {a}-{b}: {fmt(first.get((a, b), 0.0))} {UNIT}" for a, b in survey.slow_paths]
        parts += [f"{n}: {why}" for n, why in blame.inconclusive.items()]
        return ClusterResult(CHECK, Status.WARN, facts, wanted, "; ".join(parts) + f"; {tail}",
                             REMEDIATION_PATH, evidence, duration,
                             nodes={n: f"network re-test inconclusive: {why}" for n, why in blame.inconclusive.items()})
    if survey.errors:
        return ClusterResult(CHECK, Status.ERROR, facts, wanted, tail,
                             "see the evidence: the test could not run between some nodes", evidence, duration)
    return ClusterResult(CHECK, Status.PASS, facts, wanted, f"every pair fast enough: {tail}", duration_s=duration)
