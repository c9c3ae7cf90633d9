"""GPUs over time, as plain data for report.html's heat maps: one row per GPU (grouped by node, nodes grouped by
rack, in inventory order, the nodes without a rack last) with its burn throughput and temperature series
(docs/burnin.md, `burn_timeline`), and in words the GPUs that ran slow and the hottest one.

Two sources, the first with a timeline wins per node: report.json's `burn.nodes[NODE].gpus` (the cluster stage
`burn`, every node at once), then the node's own burn-in, `nodes[NODE].report.facts.burnin.gpus`.

A throughput point is drawn as its share of the SKU's median: the median of `burn_TFLOPS_median` over every GPU
of that SKU in the document; without one, the median of the SKU's points; for a GPU without a SKU, the median of
every GPU's points. A point that is not a number is kept as None (nothing drawn there) so the others keep their
time. Anything malformed is skipped, never raised on. Pure: the document in, plain data out."""

from __future__ import annotations

import math
import statistics
from typing import Any

SLOW_SHARE = 0.8  # a point below this share of its SKU's median is slow ...
SLOW_PART = 0.25  # ... and a GPU with at least this part of its points slow is named in words
MOST_POINTS = 120  # a longer series is averaged down to this many columns, so the page stays small
NO_RACK = "no rack"
BURN_STAGE, NODE_BURNIN = "burn stage", "node burn-in"
HOT_C = 85.0  # a GPU this hot or hotter is named in words, by rack
Series = tuple[float, list[float | None]]  # (every_s, points)
# a GPU as read: node, source, GPU label, its figures, its throughput and temperature series
Read = tuple[str, str, str, dict[str, Any], Series | None, Series | None]


def number(value: Any) -> float | None:
    """A finite number, or None (bool, text, NaN, infinity and an int too large for a float are not readings)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def mapping(value: Any, key: str) -> dict[str, Any]:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def dig(value: Any, *keys: str) -> dict[str, Any]:
    """The dict at the end of `keys`, or {} where any step is not one."""
    for key in keys:
        value = mapping(value, key)
    return value


def series(timeline: dict[str, Any], group: str, key: str, lowest: float | None = None
           ) -> Series | None:
    """(every_s, points) of one line of a `burn_timeline`; None without a step or a single reading."""
    line = mapping(timeline, group)
    every, points = number(line.get("every_s")), line.get(key)
    if every is None or every <= 0 or not isinstance(points, list):
        return None
    values = [number(p) for p in points]
    values = [v if v is None or lowest is None or v >= lowest else None for v in values]
    return (every, values) if any(v is not None for v in values) else None


def fitted(every: float, values: list[float | None], most: int = MOST_POINTS) -> Series:
    """At most `most` columns: runs of points averaged (a run without a reading stays None)."""
    if len(values) <= most:
        return every, values
    run = math.ceil(len(values) / most)
    out: list[float | None] = []
    for i in range(0, len(values), run):
        found = [v for v in values[i:i + run] if v is not None]
        out.append(sum(found) / len(found) if found else None)
    return every * run, out


def gpus_of(gpus: Any) -> dict[str, dict[str, Any]]:
    """GPU label -> its figures, GPU2 before GPU10."""
    found = {str(g): v for g, v in gpus.items() if isinstance(v, dict)} if isinstance(gpus, dict) else {}
    return dict(sorted(found.items(), key=lambda kv: (len(kv[0]), kv[0])))


def has_timeline(gpus: dict[str, dict[str, Any]]) -> bool:
    return any(line is not None for g in gpus.values() for line in lines(g))


def lines(gpu: dict[str, Any]) -> tuple[Series | None, Series | None]:
    """(throughput, temperature) series of a GPU; a negative throughput is no reading."""
    timeline = mapping(gpu, "burn_timeline")
    return series(timeline, "TFLOPS", "TFLOPS", lowest=0.0), series(timeline, "nvml", "temperature_C")


def sku_of(gpu: dict[str, Any]) -> str | None:
    sku = gpu.get("sku")
    sku = sku.get("id") if isinstance(sku, dict) else sku
    return sku if isinstance(sku, str) and sku else None


def node_order(doc: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(every node: the inventory's order, then report.json's nodes, then the burn stage's; node -> its rack)."""
    hosts = doc["inventory"].get("hosts") if isinstance(doc.get("inventory"), dict) else None
    order, racks = [], {}
    for host in hosts if isinstance(hosts, list) else []:
        if isinstance(host, dict) and isinstance(host.get("name"), str | int):
            order.append(str(host["name"]))
            rack = mapping(host, "vars").get("rack")
            if isinstance(rack, str | int) and not isinstance(rack, bool) and str(rack):
                racks[str(host["name"])] = str(rack)
    burn_nodes = dig(doc, "burn", "nodes")
    for node, entry in burn_nodes.items():  # the burn stage's rack where the inventory gives none
        rack = entry.get("rack") if isinstance(entry, dict) else None
        if str(node) not in racks and isinstance(rack, str | int) and not isinstance(rack, bool) and str(rack):
            racks[str(node)] = str(rack)
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), dict) else {}
    order += [str(n) for n in [*nodes, *burn_nodes]]
    return list(dict.fromkeys(order)), racks


def node_gpus(doc: dict[str, Any], node: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(which source, the node's GPUs): the first source with a timeline, else the first with GPUs."""
    burn = gpus_of(dig(doc, "burn", "nodes", node, "gpus"))
    own = gpus_of(dig(doc, "nodes", node, "report", "facts", "burnin", "gpus"))
    found = [(BURN_STAGE, burn), (NODE_BURNIN, own)]
    return next(((s, g) for s, g in found if has_timeline(g)), next(((s, g) for s, g in found if g), ("", {})))


def references(read: list[Read]) -> tuple[dict[str, float], float | None]:
    """(SKU -> the TFLOP/s its GPUs are drawn against, the figure for a GPU without a SKU)."""
    figures: dict[str, list[float]] = {}
    points: dict[str | None, list[float]] = {}
    for _, _, _, gpu, line, _ in read:
        sku, median = sku_of(gpu), number(gpu.get("burn_TFLOPS_median"))
        if sku and median is not None and median > 0:
            figures.setdefault(sku, []).append(median)
        points.setdefault(sku, []).extend(v for v in (line[1] if line else []) if v is not None)
    medians = {sku: statistics.median(values) for sku, values in figures.items()}
    for sku, values in points.items():
        if sku and sku not in medians and values and statistics.median(values) > 0:
            medians[sku] = statistics.median(values)
    every = [v for values in points.values() for v in values]
    fallback = statistics.median(every) if every else None
    return medians, fallback if fallback else None


def row_of(rack: str, found: Read, reference: float | None) -> dict[str, Any] | None:
    """A GPU's row: its shares of the reference and its temperatures, each fitted to MOST_POINTS columns, and
    what the words need (the part of its points that ran slow, its lowest share, its hottest reading)."""
    node, source, label, gpu, throughput, temperature = found
    if throughput is None and temperature is None:
        return None
    row: dict[str, Any] = {"rack": rack, "node": node, "gpu": label, "sku": sku_of(gpu), "source": source,
                           "reference": reference, "throughput": None, "temperature": None,
                           "slow_part": None, "lowest": None, "max_C": None}
    if throughput is not None and reference:
        every, values = throughput
        shares = [v / reference if v is not None else None for v in values]
        read = [s for s in shares if s is not None]
        row["slow_part"] = sum(s < SLOW_SHARE for s in read) / len(read)
        row["lowest"] = min(read)
        every, shares = fitted(every, shares)
        row["throughput"] = {"every_s": every, "shares": shares}
    if temperature is not None:
        row["max_C"] = max(v for v in temperature[1] if v is not None)
        every, values = fitted(*temperature)
        row["temperature"] = {"every_s": every, "values": values}
    return row


def burn_map(doc: Any) -> dict[str, Any] | None:
    """The section's data, or None when no GPU has a timeline: `rows` (rack, node, gpu, sku, source, reference,
    throughput {every_s, shares}, temperature {every_s, values}), `medians` (SKU -> TFLOP/s), `slow`, `hottest`,
    `hot` (the GPUs at HOT_C or more), `without` (nodes with burn-in figures but no timeline), `sources`."""
    if not isinstance(doc, dict):
        return None
    order, racks = node_order(doc)
    read, without = [], []
    for node in order:
        source, gpus = node_gpus(doc, node)
        found = [(node, source, label, gpu, *lines(gpu)) for label, gpu in gpus.items()]
        if found and all(f[4] is None and f[5] is None for f in found):
            without.append(node)
        read += found
    medians, fallback = references(read)
    rows = []
    for found in read:
        sku = sku_of(found[3])
        row = row_of(racks.get(found[0], NO_RACK), found, medians.get(sku) if sku else fallback)
        if row is not None:
            rows.append(row)
    if not rows:
        return None
    rack_order = list(dict.fromkeys(r["rack"] for r in rows if r["rack"] != NO_RACK)) + [NO_RACK]
    rows.sort(key=lambda r: rack_order.index(r["rack"]))  # stable: inventory order inside a rack
    hot = [{"rack": r["rack"], "node": r["node"], "gpu": r["gpu"], "max_C": r["max_C"]} for r in rows
           if r["max_C"] is not None and r["max_C"] >= HOT_C]
    return {"rows": rows, "medians": medians, "slow": slow_gpus(rows), "hottest": hottest(rows), "hot": hot,
            "without": without, "sources": sorted({r["source"] for r in rows})}


def slow_gpus(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs below SLOW_SHARE of their SKU's median for at least SLOW_PART of their points."""
    return [{"node": r["node"], "gpu": r["gpu"], "sku": r["sku"], "part": r["slow_part"], "lowest": r["lowest"]}
            for r in rows if r["slow_part"] is not None and r["slow_part"] >= SLOW_PART]


def hottest(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [r for r in rows if r["max_C"] is not None]
    if not found:
        return None
    top = max(found, key=lambda r: r["max_C"])
    return {"node": top["node"], "gpu": top["gpu"], "max_C": top["max_C"]}
