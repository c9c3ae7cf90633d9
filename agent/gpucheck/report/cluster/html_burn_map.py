"""The "GPUs over time" section of report.html (burn_map's data): two heat maps side by side, the burn's
throughput (each point's share of its SKU's median, red slow to green) and temperature (an absolute scale, blue
cool to red hot), one row per GPU grouped by node and nodes by rack, time across from the burn's start; a legend
over each, and under them in words the slow GPUs, the hottest one and the figures the colours are drawn against.

Cells are paths here, not <rect> as in html_charts: 256 nodes x 8 GPUs x 120 points is 245k cells a panel. Each
cell is quantized to one of RAMP_STEPS colours, a run of equal colour along a row is one rectangle subpath, and
each colour of a panel is one <path> (in column units, scaled across the panel). Readings that flicker between
colours make many short runs: past CELLS_BUDGET bytes the columns are averaged in pairs, and the page says so. A
node's summary is the <title> of its label: one per node, never one per cell. No script, no url() reference."""

from __future__ import annotations

import math
from typing import Any

from ..gpu_figures import number_text
from .burn_map import BURN_STAGE, HOT_C, MOST_POINTS, NO_RACK, SLOW_PART, SLOW_SHARE, burn_map, fitted
from .html_charts import BLAMED, CHAR_PX, HEATMAP_WIDTH, MUTED, RAMP_STEPS, ramp, svg_open
from .html_parts import esc

LOW_SHARE, HIGH_SHARE = 0.5, 1.0  # throughput: red at half its SKU's median or below, green at the median
COOL_END_C, HOT_END_C = 30.0, 95.0  # temperature: the ends of its colour scale
# ColorBrewer's RdYlBu (blue, pale yellow, red): it stays apart for the common colour blindnesses
HEAT_STOPS = ((0.0, (49, 54, 149)), (0.25, (116, 173, 209)), (0.5, (254, 224, 144)), (0.75, (244, 109, 67)),
              (1.0, (165, 0, 38)))
EMPTY = "#eaeef2"  # where a GPU has no reading
LABEL_MAX = 180  # px: the node names' column; a longer name is cut with "…" (whole in its title)
GPU_COLUMN = 18  # px: the GPU numbers' column, where rows are tall enough to print them
NUMBERED_ROW = 8  # px: GPU rows at least this tall are numbered
RACK_BAND = 22  # px: a rack's header between its nodes and the rack before
HEAD = 84  # px: the panels' titles, legends and time axis over the maps
GAP = 30  # px: between the panels
LABEL_GAP = 13  # px: node labels at least this far apart; a node between them goes unlabelled (its rows stay)
CELLS_BUDGET = 1_500_000  # bytes of cell paths in both panels; 256 x 8 GPUs of a steady burn draw about 0.6 MB
FOLD_SLOW = 12  # more nodes with slow GPUs than this: the rest are folded
Place = tuple[str, int]  # a rack's name and its header's top
Block = tuple[str, int, int]  # a node's name, its first row's top and its rows' height


def level(fraction: float) -> int:
    """A place on a colour scale (0..1, clipped) as one of RAMP_STEPS colours: 0 the low end, RAMP_STEPS - 1 the
    high end."""
    return round(min(max(fraction, 0.0), 1.0) * (RAMP_STEPS - 1))


def heat(fraction: float) -> str:
    """Blue (cool) through pale yellow to red (hot)."""
    return ramp(fraction, HEAT_STOPS)


def share_level(share: float) -> int:
    return level((share - LOW_SHARE) / (HIGH_SHARE - LOW_SHARE))


def heat_level(celsius: float) -> int:
    return level((celsius - COOL_END_C) / (HOT_END_C - COOL_END_C))


# panel: (its title, the row's key, the key of its points, point -> level, level -> colour, legend's end labels)
PANELS = [("Throughput: share of its SKU's median", "throughput", "shares", share_level,
           lambda i: ramp(i / (RAMP_STEPS - 1)), (f"≤{LOW_SHARE:.0%}", "75%", f"≥{HIGH_SHARE:.0%}")),
          ("Temperature", "temperature", "values", heat_level, lambda i: heat(i / (RAMP_STEPS - 1)),
           (f"≤{COOL_END_C:g} °C", f"{(COOL_END_C + HOT_END_C) / 2:g} °C", f"≥{HOT_END_C:g} °C"))]


def num(value: float) -> str:
    """A coordinate, short: 3 decimals at most, no trailing zeros."""
    value = round(value, 3)
    return f"{value:g}" if value else "0"


def runs(levels: list[int | None]) -> list[tuple[int, int, int]]:
    """(first column, columns, level) of each run of equal levels; no reading breaks a run."""
    found: list[tuple[int, int, int]] = []
    for i, value in enumerate(levels):
        if value is None:
            continue
        if found and found[-1][2] == value and found[-1][0] + found[-1][1] == i:
            found[-1] = (found[-1][0], found[-1][1] + 1, value)
        else:
            found.append((i, 1, value))
    return found


def layout(rows: list[dict[str, Any]], gpu_px: int) -> tuple[list[int], list[Place], list[Block], int]:
    """(each row's top, each rack's header top, each node's (name, top, height), the maps' bottom)."""
    racked = any(r["rack"] != NO_RACK for r in rows)
    node_gap = 2 if gpu_px >= 6 else 1
    tops, racks, nodes = [], [], []
    y, rack, node = HEAD, None, None
    for r in rows:
        if racked and r["rack"] != rack:
            racks.append((r["rack"], y))
            y += RACK_BAND
        elif r["node"] != node and node is not None:
            y += node_gap
        if r["node"] != node or r["rack"] != rack:
            nodes.append((r["node"], y, 0))
        rack, node = r["rack"], r["node"]
        tops.append(y)
        y += gpu_px
        nodes[-1] = (node, nodes[-1][1], y - nodes[-1][1])
    return tops, racks, nodes, y


def panel_svg(rows: list[dict[str, Any]], tops: list[int], gpu_px: int, x0: float, width: float,
              panel: tuple[Any, ...]) -> tuple[str, float]:
    """One panel's cells: a <path> per colour, in column units scaled to `width`; and its duration (s)."""
    _, key, points, to_level, colour, _ = panel
    lines = [(r[key], top) for r, top in zip(rows, tops, strict=True) if r[key]]
    if not lines:
        return "", 0.0
    unit = min(line["every_s"] for line, _ in lines)  # one column: the shortest step of the panel's series
    duration = max(line["every_s"] * len(line[points]) for line, _ in lines)
    paths: dict[int, list[str]] = {}
    last: dict[int, tuple[float, int]] = {}
    for line, top in lines:
        step = line["every_s"] / unit
        for first, count, value in runs([to_level(p) if p is not None else None for p in line[points]]):
            x, w = first * step, count * step
            # relative to the run before of this colour: short numbers
            move = (f"m{num(x - last[value][0])} {top - last[value][1]}" if value in last else f"M{num(x)} {top}")
            paths.setdefault(value, []).append(f"{move}h{num(w)}v{gpu_px}h{num(-w)}z")
            last[value] = (x, top)
    scale = width / (duration / unit)
    cells = "".join(f'<path d="{"".join(d)}" fill="{colour(value)}"/>' for value, d in sorted(paths.items()))
    return (f'<g transform="translate({num(x0)} 0) scale({num(scale)} 1)" shape-rendering="crispEdges">{cells}</g>',
            duration)


def ticks(duration: float) -> tuple[str, float, list[float]]:
    """(unit, seconds in it, the tick times in seconds): seconds for a burn up to 3 minutes, else minutes."""
    unit, size = ("s", 1.0) if duration <= 180 else ("min", 60.0)
    span = duration / size
    step = next((s for s in (1, 2, 5, 10, 15, 20, 30, 60, 120, 240, 480) if span / s <= 6), math.ceil(span / 6))
    return unit, size, [k * step * size for k in range(int(span / step) + 1)]


def axis(x0: float, width: float, duration: float, top: int, bottom: int) -> str:
    """Time ticks over and under a panel, labelled over it and under it."""
    if duration <= 0:
        return ""
    unit, size, times = ticks(duration)
    xs = [x0 + width * t / duration for t in times]
    marks = "".join(f"M{num(x)} {top - 5}v5M{num(x)} {bottom}v5" for x in xs)
    labels = "".join(f'<text x="{num(x)}" y="{top - 8}" text-anchor="middle">{number_text(t / size)}</text>'
                     f'<text x="{num(x)}" y="{bottom + 17}" text-anchor="middle">{number_text(t / size)}</text>'
                     for x, t in zip(xs, times, strict=True))
    words = "minutes" if unit == "min" else "seconds"
    return (f'<path d="{marks}" stroke="{MUTED}"/>{labels}<text x="{num(x0 + width)}" y="{bottom + 33}" '
            f'text-anchor="end" fill="{MUTED}">{words} from the burn\'s start</text>')


def legend(x0: float, width: float, panel: tuple[Any, ...], unit: str) -> str:
    """The panel's title, its colour bar in RAMP_STEPS steps and the values at its ends and middle, and over the
    time axis's right end what it counts."""
    title, _, _, _, colour, (low, middle, high) = panel
    step = 160 / RAMP_STEPS
    bar = "".join(f'<path d="M{num(x0 + i * step)} 24h{num(step)}v12h{num(-step)}z" fill="{colour(i)}"/>'
                  for i in range(RAMP_STEPS))
    return (f'<text x="{num(x0)}" y="14" font-weight="700">{esc(title)}</text>{bar}'
            f'<path d="M{num(x0 + 172)} 24h12v12h-12z" fill="{EMPTY}" stroke="#d0d7de"/>'
            f'<text x="{num(x0 + 190)}" y="34" fill="{MUTED}">no reading</text>'
            f'<text x="{num(x0)}" y="50" font-size="11">{esc(low)}</text>'
            f'<text x="{num(x0 + 80)}" y="50" font-size="11" text-anchor="middle">{esc(middle)}</text>'
            f'<text x="{num(x0 + 160)}" y="50" font-size="11" text-anchor="end">{esc(high)}</text>'
            f'<text x="{num(x0 + width)}" y="{HEAD - 24}" font-size="11" text-anchor="end" fill="{MUTED}">'
            f"{'minutes' if unit == 'min' else 'seconds'} from the burn's start →</text>")


def node_title(node: str, rows: list[dict[str, Any]]) -> str:
    """A node label's hover text: its rack, GPUs, lowest share and hottest reading."""
    lowest = [r["lowest"] for r in rows if r["lowest"] is not None]
    hottest = [r["max_C"] for r in rows if r["max_C"] is not None]
    rack = rows[0]["rack"] if rows[0]["rack"] == NO_RACK else f"rack {rows[0]['rack']}"
    words = [f"{node} ({rack}, {len(rows)} GPU{'s' if len(rows) != 1 else ''})"]
    words += [f"lowest throughput {min(lowest):.0%} of its SKU's median"] if lowest else []
    words += [f"hottest {number_text(max(hottest))} °C"] if hottest else []
    return esc(": ".join(words[:1]) + (": " + ", ".join(words[1:]) if words[1:] else ""))


def short(name: str, room: int) -> str:
    """A name that fits `room` px of 12 px text, bold included (a wider glyph than CHAR_PX), cut with "…"."""
    most = max(4, room // (CHAR_PX + 1))
    return name if len(name) <= most else name[:most - 1] + "…"


def labels_svg(rows: list[dict[str, Any]], tops: list[int], racks: list[Place], nodes: list[Block], gpu_px: int,
               names_end: int, right: int, slow: set[str]) -> str:
    """Rack headers (a line across and the rack's name), node names (each with its summary as a title, the
    nodes with a slow GPU in red) and, on tall rows, each GPU's number."""
    parts = [f'<path d="{"".join(f"M0 {y + 4}H{right}" for _, y in racks)}" stroke="#8c959f"/>'] if racks else []
    for rack, y in racks:
        count = len({r["node"] for r in rows if r["rack"] == rack})
        name = rack if rack == NO_RACK else f"rack {rack}"
        parts.append(f'<text x="0" y="{y + 17}" font-weight="700">{esc(name)}<tspan fill="{MUTED}" '
                     f'font-weight="400"> · {count} node{"s" if count != 1 else ""}</tspan></text>')
    by_node: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    shown = -LABEL_GAP
    for node, y, height in nodes:
        middle = y + height / 2
        if middle - shown < LABEL_GAP:
            continue
        shown = middle
        size = 12 if height >= 14 else 11
        style = f' fill="{BLAMED}" font-weight="700"' if node in slow else ""
        parts.append(f'<text x="{names_end}" y="{num(middle + size * 0.35)}" text-anchor="end" font-size="{size}"'
                     f'{style}>{esc(short(node, names_end))}<title>{node_title(node, by_node[node])}</title></text>')
    if gpu_px >= NUMBERED_ROW:
        parts += [f'<text x="{names_end + GPU_COLUMN - 4}" y="{top + gpu_px - 1}" text-anchor="end" '
                  f'font-size="{gpu_px}" fill="{MUTED}">{esc(r["gpu"].removeprefix("GPU"))}</text>'
                  for r, top in zip(rows, tops, strict=True)]
    return "".join(parts)


def map_svg(data: dict[str, Any]) -> tuple[str, int | None]:
    """The two panels and their labels; and the columns a series was averaged down to, if it was."""
    rows = data["rows"]
    gpu_px = max(2, min(NUMBERED_ROW, 2400 // len(rows)))  # 26 x 8 GPUs: 8 px each; 256 x 8: 2 px, 16 a node
    names_end = min(LABEL_MAX, 12 + CHAR_PX * max(len(r["node"]) for r in rows))
    left = names_end + (GPU_COLUMN if gpu_px >= NUMBERED_ROW else 6)
    width = (HEATMAP_WIDTH - left - GAP - 8) / 2
    tops, racks, nodes, bottom = layout(rows, gpu_px)
    empty = "".join(f"M{num(x)} {y}h{num(width)}v{h}h{num(-width)}z" for _, y, h in nodes for x in
                    (left, left + width + GAP))
    parts = [svg_open(HEATMAP_WIDTH, bottom + 42, "GPU throughput and temperature over time"),
             f'<path d="{empty}" fill="{EMPTY}"/>']
    most = MOST_POINTS
    while True:  # columns averaged in pairs while the cells are past their budget (readings that flicker)
        drawn = [coarser(r, most) for r in rows] if most < MOST_POINTS else rows
        panels = [panel_svg(drawn, tops, gpu_px, left + i * (width + GAP), width, p) for i, p in enumerate(PANELS)]
        if sum(len(cells) for cells, _ in panels) <= CELLS_BUDGET or most <= MOST_POINTS // 8:
            break
        most //= 2
    for i, (panel, (cells, duration)) in enumerate(zip(PANELS, panels, strict=True)):
        x0 = left + i * (width + GAP)
        unit = ticks(duration)[0] if duration else "s"
        parts += [cells, legend(x0, width, panel, unit), axis(x0, width, duration, HEAD, bottom)]
    slow = {s["node"] for s in data["slow"]}
    parts.append(labels_svg(rows, tops, racks, nodes, gpu_px, names_end, HEATMAP_WIDTH, slow))
    return "".join(parts) + "</svg>", (most if most < MOST_POINTS else None)


def coarser(row: dict[str, Any], most: int) -> dict[str, Any]:
    """The row with each series averaged down to `most` columns."""
    found = dict(row)
    for key, points in (("throughput", "shares"), ("temperature", "values")):
        if row[key]:
            every, values = fitted(row[key]["every_s"], row[key][points], most)
            found[key] = {"every_s": every, points: values}
    return found


def words_html(data: dict[str, Any]) -> str:
    """The slow GPUs by node (folded past FOLD_SLOW nodes), the hottest GPU, what the colours are drawn against."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for s in data["slow"]:
        by_node.setdefault(s["node"], []).append(s)
    items = [f"<li><b>{esc(node)}</b>: {esc(', '.join(s['gpu'] for s in found))} — below {SLOW_SHARE:.0%} for up "
             f"to {max(s['part'] for s in found):.0%} of the burn, lowest {min(s['lowest'] for s in found):.0%}</li>"
             for node, found in by_node.items()]
    gpus = len(data["slow"])
    notes = []
    if items:
        shown = "".join(items[:FOLD_SLOW])
        rest = (f"<details><summary>{len(items) - FOLD_SLOW} more node(s)</summary><ul>{''.join(items[FOLD_SLOW:])}"
                "</ul></details>" if len(items) > FOLD_SLOW else "")
        notes.append(f"<b>Slow</b>: {gpus} GPU(s) below {SLOW_SHARE:.0%} of their SKU's median for at least "
                     f"{SLOW_PART:.0%} of the burn<ul>{shown}</ul>{rest}")
    else:
        notes.append(f"<b>Slow</b>: none (no GPU below {SLOW_SHARE:.0%} of its SKU's median for {SLOW_PART:.0%} of "
                     "the burn or more).")
    hot = data["hottest"]
    if hot:
        notes.append(f"<b>Hottest</b>: {esc(hot['node'])} {esc(hot['gpu'])}, {esc(number_text(hot['max_C']))} °C.")
    if data["hot"]:
        notes.append(hot_words(data["hot"]))
    if data["medians"]:
        notes.append("Throughput is drawn against each SKU's median burn: " + esc(", ".join(
            f"{sku} {number_text(value)} TFLOP/s" for sku, value in sorted(data["medians"].items()))) + ".")
    if data["without"]:
        names = data["without"]
        more = f" and {len(names) - 20} more" if len(names) > 20 else ""
        notes.append(f"No timeline from {esc(', '.join(names[:20]))}{more}.")
    return "<ul>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul>"


def hot_words(hot: list[dict[str, Any]]) -> str:
    """The GPUs at HOT_C or more by rack: `rack B: 16 GPUs on node05, node06`."""
    racks: dict[str, dict[str, int]] = {}
    for h in hot:
        nodes = racks.setdefault(h["rack"], {})
        nodes[h["node"]] = nodes.get(h["node"], 0) + 1
    said = []
    for rack, nodes in list(racks.items())[:FOLD_SLOW]:
        names = ", ".join(list(nodes)[:FOLD_SLOW]) + (f" and {len(nodes) - FOLD_SLOW} more" if len(nodes) > FOLD_SLOW
                                                        else "")
        said.append(f"{rack if rack == NO_RACK else 'rack ' + rack}: {sum(nodes.values())} on {names}")
    more = f"; and {len(racks) - FOLD_SLOW} more racks" if len(racks) > FOLD_SLOW else ""
    return f"<b>Hot</b> ({HOT_C:g} °C or more): {len(hot)} GPU(s) — " + esc("; ".join(said) + more) + "."


def render_burn_map(data: dict[str, Any]) -> str:
    rows = data["rows"]
    svg, columns = map_svg(data)
    coarse = f" Each series is averaged down to {columns} columns to keep the page small." if columns else ""
    source = ("the cluster burn stage (every node at once)" if data["sources"] == [BURN_STAGE] else
              "each node's own burn-in" if BURN_STAGE not in data["sources"] else
              "the cluster burn stage, or a node's own burn-in where the stage has none")
    return (f'<h2>GPUs over time</h2><p class="note">{len(rows)} GPU(s) on {len({r["node"] for r in rows})} '
            f"node(s), one row each, grouped by node and rack; time across from the burn's start, from {source}. "
            f"A node's summary shows over its name.{coarse}</p>" + svg + words_html(data))


def burn_map_html(doc: dict[str, Any]) -> str:
    """The section, or "" when no GPU has a timeline."""
    data = burn_map(doc)
    return render_burn_map(data) if data else ""
