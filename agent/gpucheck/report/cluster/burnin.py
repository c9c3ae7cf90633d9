"""The cluster report's burn-in section, built from the document: every node report's `facts.burnin`
(docs/burnin.md, "Facts the node side keeps") as one row per node and GPU, each figure against the fleet
median of GPUs of the same SKU and against the figure the node judged it against (its result's
`expected`: the SKU's data-sheet figure for gemm and device copies, the PCIe link's rate for host copies).

A straggler is a GPU whose figure is below `straggler_fraction` (the run's --straggler-fraction, the
straggler stage's own, default 0.9) x the median of that figure over every GPU of its SKU in the fleet
(at least two GPUs): the same rule the straggler stage applies to nodes, per GPU. Memtest bad words are
not compared with a median: any is a memory error, listed. Pure: the document in, plain data out."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from ...skus import DTYPES
from ..gpu_figures import number_text, words_and_unit

DEFAULT_FRACTION = 0.9
BAD_WORDS = "memtest_bad_words"
# section figure -> (facts.burnin key, node check, that check's figure): the order of the table's columns
SOURCES: dict[str, tuple[str, str | None, str | None]] = {
    **{f"gemm_{d}_TFLOPS": (f"gemm_TFLOPS.{d}", "gpu.gemm", f"{d}_TFLOPS") for d in DTYPES},
    "copy_GBps": ("copy_GBps", "gpu.memory_bandwidth", "copy_GBps"),
    "h2d_GBps": ("h2d_GBps", "gpu.host_bandwidth", "h2d_GBps"),
    "d2h_GBps": ("d2h_GBps", "gpu.host_bandwidth", "d2h_GBps"),
    "burn_TFLOPS_median": ("burn_TFLOPS_median", None, None),
    BAD_WORDS: ("memtest_bad_words", None, None),
}
# `>= 593 (0.6 x 989)`: the figure a fraction of which was the threshold
REFERENCE = re.compile(r"\(\s*\d*\.?\d+\s*[x\u00d7]\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*\)")


def heading(figure: str) -> str:
    """`gemm_bf16_TFLOPS` -> `gemm bf16 TFLOP/s`: a figure's name as the renderings head its column."""
    return " ".join(x for x in words_and_unit(figure) if x)


def share(ratio: Any) -> str:
    """`79%`, or `-` where there is nothing to compare with."""
    return f"{ratio:.0%}" if finite(ratio) else "-"


def reference_text(fleet: dict[str, Any]) -> str:
    """A fleet entry's SKU figure and the median's share of it: `989 (79%)`, or `-`."""
    if fleet["reference"] is None:
        return "-"
    return f"{number_text(fleet['reference'])} ({share(fleet['median_of_reference'])})"


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fraction_of(doc: dict[str, Any]) -> float:
    value = (doc.get("options") or {}).get("straggler_fraction") if isinstance(doc.get("options"), dict) else None
    return float(value) if finite(value) and 0 < value <= 1 else DEFAULT_FRACTION


def reports(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """node -> its report, for the nodes that returned one."""
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), dict) else {}
    return {str(host): entry["report"] for host, entry in nodes.items()
            if isinstance(entry, dict) and isinstance(entry.get("report"), dict)}


def burnin_gpus(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    burnin = facts.get("burnin") if isinstance(facts.get("burnin"), dict) else {}
    gpus = burnin.get("gpus") if isinstance(burnin.get("gpus"), dict) else {}
    found = {str(g): v for g, v in gpus.items() if isinstance(v, dict)}
    return dict(sorted(found.items(), key=lambda kv: (len(kv[0]), kv[0])))  # GPU2 before GPU10


def sku_of(entry: dict[str, Any], report: dict[str, Any]) -> str:
    """The GPU's SKU id; a GPU the SKU table does not know is grouped by the node's one GPU model."""
    sku = entry.get("sku")
    if isinstance(sku, dict):
        sku = sku.get("id")
    if isinstance(sku, str) and sku:
        return sku
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    models = facts.get("gpu_models") if isinstance(facts.get("gpu_models"), list) else []
    return f"unknown ({models[0]})" if len(models) == 1 else "unknown"


def figure_value(entry: dict[str, Any], path: str) -> float | None:
    value: Any = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if finite(value) else None


def reference(report: dict[str, Any], check: str | None, figure: str | None, gpu: str) -> float | None:
    """The figure the node's check judged this one against, read from its `expected` text."""
    if check is None:
        return None
    results = report.get("results") if isinstance(report.get("results"), list) else []
    result = next((r for r in results if isinstance(r, dict) and r.get("check") == check), None)
    expected = (result or {}).get("expected")
    if not isinstance(expected, dict):
        return None
    own = expected.get(gpu)
    text = (own if isinstance(own, dict) else expected).get(figure)
    found = REFERENCE.findall(text) if isinstance(text, str) else []
    value = float(found[-1]) if found else None
    return value if value and math.isfinite(value) else None


def rows_of(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(one row per node and GPU, the nodes that reported without burn-in figures)."""
    rows, without = [], []
    for node, report in reports(doc).items():
        gpus = burnin_gpus(report)
        if not gpus:
            without.append(node)
        for gpu, entry in gpus.items():
            figures = {}
            for name, (path, check, measured) in SOURCES.items():
                value = figure_value(entry, path)
                if value is not None:
                    figures[name] = {"value": value, "reference": reference(report, check, measured, gpu)}
            rows.append({"node": node, "gpu": gpu, "sku": sku_of(entry, report), "figures": figures})
    return rows, without


def burnin_section(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The section, or None when no node reported burn-in figures."""
    rows, without = rows_of(doc)
    if not rows:
        return None
    fraction = fraction_of(doc)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        for name, cell in row["figures"].items():
            groups.setdefault((row["sku"], name), []).append(cell)
    fleet = []
    for (sku, name), cells in groups.items():
        values = [c["value"] for c in cells]
        median = statistics.median(values) if name != BAD_WORDS else None
        references = {c["reference"] for c in cells}
        reference = references.pop() if len(references) == 1 else None  # one figure the whole group was judged by
        fleet.append({"sku": sku, "figure": name, "gpus": len(values), "median": median, "min": min(values),
                      "max": max(values), "reference": reference,
                      "median_of_reference": median / reference if median is not None and reference else None})
    medians = {(f["sku"], f["figure"]): f for f in fleet}
    stragglers, memory_errors = [], []
    for row in rows:
        for name, cell in row["figures"].items():
            if name == BAD_WORDS:
                if cell["value"] > 0:
                    memory_errors.append({"node": row["node"], "gpu": row["gpu"], "bad_words": int(cell["value"])})
                continue
            group = medians[(row["sku"], name)]
            median = group["median"]
            cell["of_median"] = cell["value"] / median if median else None
            cell["of_reference"] = cell["value"] / cell["reference"] if cell["reference"] else None
            cell["straggler"] = bool(group["gpus"] >= 2 and median and cell["value"] < fraction * median)
            if cell["straggler"]:
                stragglers.append({"node": row["node"], "gpu": row["gpu"], "sku": row["sku"], "figure": name,
                                   "value": cell["value"], "median": median, "of_median": cell["of_median"]})
    order = list(SOURCES)
    present = {name for row in rows for name in row["figures"]}
    fleet.sort(key=lambda f: (f["sku"], order.index(f["figure"])))
    return {"fraction": fraction, "figures": [n for n in order if n in present], "fleet": fleet, "gpus": rows,
            "stragglers": stragglers, "memory_errors": memory_errors, "without": without,
            "nodes": len({row["node"] for row in rows})}
