"""Stragglers: a node whose measured figure (bandwidth, throughput: higher is better) is below a
fraction of the fleet median. One slow node holds back every collective it is part of. Pure."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ...model import Status
from ...report.values import figure
from ..context import ClusterResult

PREFIX = "cluster.straggler."
# Node checks whose `measured` is a higher-is-better figure: the bw.* benchmarks and the data path.
MEASURED_PREFIXES = ("bw.",)
MEASURED_CHECKS = ("host.read_throughput",)


def node_figures(reports: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """metric -> node -> value from the node reports. A dict measurement (one figure per HCA port)
    gives one metric per key: `bw.ib_loopback[mlx5_0/1]`. A NaN or infinite figure is no figure."""
    figures: dict[str, dict[str, float]] = {}
    for node, report in reports.items():
        for result in report.get("results", []):
            check = str(result.get("check", ""))
            if not (check.startswith(MEASURED_PREFIXES) or check in MEASURED_CHECKS):
                continue
            measured = result.get("measured")
            items = measured.items() if isinstance(measured, dict) else [(None, measured)]
            for key, value in items:
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    metric = check if key is None else f"{check}[{key}]"
                    figures.setdefault(metric, {})[node] = float(value)
    return figures


def find(figures: dict[str, dict[str, float]], fraction: float) -> list[ClusterResult]:
    """One result per metric measured on at least two nodes: warn naming the stragglers, else pass."""
    results = []
    for metric in sorted(figures):
        values = figures[metric]
        if len(values) < 2:
            continue
        median = statistics.median(values.values())
        if median <= 0:
            continue
        floor = fraction * median
        slow = {node: value for node, value in sorted(values.items(), key=lambda kv: kv[1]) if value < floor}
        check = PREFIX + metric
        expected = f">= {figure(floor)} ({fraction:g} x median {figure(median)})"
        if not slow:
            results.append(ClusterResult(check, Status.PASS, dict(values), expected,
                                         f"all {len(values)} nodes within {fraction:g} of the median {median:.4g}"))
            continue
        blamed = {node: f"{metric} {value:.4g} = {value / median:.0%} of the median {median:.4g}"
                  for node, value in slow.items()}
        results.append(ClusterResult(
            check, Status.WARN, dict(values), expected,
            "; ".join(f"{node}: {value:.4g} ({value / median:.0%} of median)" for node, value in slow.items())
            + f"; median of {len(values)} nodes {median:.4g}",
            "re-run the node's benchmark (gpucheck node --full --only " + metric.split("[")[0] + ") and compare "
            "its links, clocks and topology with a fast node", nodes=blamed))
    return results
