"""The HTML report's inline SVG charts: the node x node pair bandwidth heat map (each cell's value, slow
pairs outlined, the blamed node framed, nodes left out of the stage hatched and named) and the scaling
efficiency chart (the published GPU band on GPU runs, a collapse marked, CPU ranks said as such and never marked
as a collapse). Every figure with its unit, through values.figure. Cells and points are the only <rect> and
<circle> elements: the rest is drawn with paths."""

from __future__ import annotations

import math
from typing import Any

from ..gpu_figures import number_text
from ..values import figure
from .html_parts import COLOURS, esc
from .wording import CPU_LABEL, collapses, cores_text, cpu_drops, on_cpu, outnumbered, ranks_text, reference_band

PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989"]  # one colour per scaling job
HEATMAP_WIDTH = 1100  # px: the page's main column
CELL_MAX, CELL_MIN = 64, 4  # px
LABEL_CELL_MIN = 10  # px: smaller cells go without node labels
VALUE_CELL_MIN = 30  # px: a cell this large prints its value
UNIT_CELL_MIN = 48  # px: a cell this large prints its unit under its value (the matrix's corner says it always)
HATCH_CELL_MIN = 16  # px: smaller cells of a node left out are grey, not hatched (the page stays small)
CHAR_PX = 7  # about one character of the 12 px labels
BLAMED, LEFT_OUT, MUTED = COLOURS["fail"], "#6e7781", "#57606a"
RAMP_STEPS = 16  # the legend's colour bar, drawn in steps (the page has no url() reference of any kind)


SPEED_STOPS = ((0.0, (207, 34, 46)), (0.5, (212, 167, 44)), (1.0, (26, 127, 55)))  # red, amber, green


def ramp(fraction: float, stops: tuple[tuple[float, tuple[int, int, int]], ...] = SPEED_STOPS) -> str:
    """The colour at `fraction` (0..1, clipped) of a scale through `stops`; by default red (slow) through amber to
    green (fast)."""
    fraction = min(max(fraction, 0.0), 1.0)
    for (f0, c0), (f1, c1) in zip(stops, stops[1:], strict=False):
        if fraction <= f1:
            t = (fraction - f0) / (f1 - f0)
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(c0, c1, strict=True))
    return "#" + "".join(f"{c:02x}" for c in stops[-1][1])


def ink(fill: str) -> str:
    """Dark text on a light fill, white on a dark one."""
    red, green, blue = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#1f2328" if 0.299 * red + 0.587 * green + 0.114 * blue > 150 else "#fff"


def svg_open(width: int, height: int, label: str) -> str:
    """The chart's opening tag: its size, and a view box so a narrow window shrinks it rather than cuts it."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}">')


def square(x: float, y: float, size: float) -> str:
    return f"M{x:g} {y:g}h{size:g}v{size:g}h{-size:g}z"


def cross(left: int, top: int, cell: int, grid: int, i: int) -> str:
    """Node i's row and column across the whole matrix, as two rectangles."""
    return f"M{left} {top + i * cell}h{grid}v{cell}h{-grid}zM{left + i * cell} {top}h{cell}v{grid}h{-cell}z"


def hatch(x: float, y: float, size: float) -> str:
    """Three diagonal strokes across a square, corner to corner and half way on either side."""
    half = size / 2
    return (f"M{x:g} {y + half:g}l{half:g} {-half:g}M{x:g} {y + size:g}l{size:g} {-size:g}"
            f"M{x + half:g} {y + size:g}l{half:g} {-half:g}")


def heatmap_nodes(pairs: list[dict[str, Any]], order: list[str], left_out: dict[str, str]) -> list[str]:
    """The inventory's order, then any other measured node, then any other node left out."""
    inside = {str(x) for p in pairs for x in (p["a"], p["b"])}
    nodes = [str(n) for n in order if str(n) in inside or str(n) in left_out]
    nodes += sorted(inside - set(nodes))
    return nodes + [n for n in left_out if n not in nodes]


def node_label(node: str, blamed: dict[str, str], left_out: dict[str, str]) -> tuple[str, str]:
    """A row's label and its style: the blamed node in red, a node left out in grey."""
    if node in blamed:
        return f"{node} — blamed", f' fill="{BLAMED}" font-weight="700"'
    if node in left_out:
        return f"{node} — left out", f' fill="{LEFT_OUT}" font-style="italic"'
    return node, ""


def pair_heatmap_svg(pairs: list[dict[str, Any]], order: list[str] | None = None,
                     blamed: dict[str, str] | None = None, left_out: dict[str, str] | None = None) -> str:
    """A symmetric node x node matrix of pair bandwidth, coloured against the best pair, each cell with its
    value when there is room; `blamed` and `left_out`: node -> why, marked on their row and column."""
    blamed, left_out = blamed or {}, left_out or {}
    nodes = heatmap_nodes(pairs, order or [], left_out)
    if not nodes:
        return ""
    n = len(nodes)
    labels = [node_label(x, blamed, left_out) for x in nodes]
    left = min(240, 14 + CHAR_PX * max(len(text) for text, _ in labels))
    top = min(160, 14 + round(CHAR_PX * 0.75 * max(len(x) for x in nodes)))
    cell = max(CELL_MIN, min(CELL_MAX, (HEATMAP_WIDTH - left) // n))
    if cell < LABEL_CELL_MIN:
        left = top = 10
        cell = max(CELL_MIN, min(CELL_MAX, (HEATMAP_WIDTH - left) // n))
    grid = cell * n
    marks = legend_marks(bool(blamed), bool(left_out))
    width, height = max(left + grid + 16, left + CHAR_PX * len(marks) + 16, 640), top + grid + 62
    index = {x: i for i, x in enumerate(nodes)}
    best = max((float(p["value"]) for p in pairs), default=0) or 1.0
    unit = next((str(p.get("unit")) for p in pairs if p.get("unit")), "")
    parts = [svg_open(width, height, "pair bandwidth matrix"),
             f'<path d="{square(left, top, grid)}" fill="#fff" stroke="#d0d7de"/>',
             '<path d="' + "".join(square(left + i * cell, top + i * cell, cell - 1) for i in range(n))
             + '" fill="#eaeef2"/>']
    out = {index[x] for x in left_out if x in index}
    if out:  # a band across each such node's row and column; hatched where the cells are large enough to show it
        shade = "".join(cross(left, top, cell, grid, i) for i in sorted(out))
        parts.append(f'<path d="{shade}" fill="#f6f8fa" fill-rule="nonzero"/>')
        if cell >= HATCH_CELL_MIN:
            strokes = "".join(hatch(left + j * cell, top + i * cell, cell - 1)
                              for i in range(n) for j in range(n) if i in out or j in out)
            parts.append(f'<path d="{strokes}" stroke="#afb8c1" fill="none"/>')
    for p in pairs:
        parts += pair_cells(p, [(left + index[str(b)] * cell, top + index[str(a)] * cell, str(a), str(b))
                                for a, b in ((p["a"], p["b"]), (p["b"], p["a"]))], cell, best, unit)
    frames = "".join(cross(left, top, cell, grid, index[x]) for x in blamed if x in index)
    if frames:
        parts.append(f'<path d="{frames}" fill="none" stroke="{BLAMED}" stroke-width="2.5"/>')
    if unit:  # the unit of every cell, where the row and column labels meet
        parts.append(f'<text x="{left - 6}" y="{top - 6}" text-anchor="end" fill="{MUTED}">{esc(unit)}</text>')
    if cell >= LABEL_CELL_MIN:
        for (text, style), x in zip(labels, nodes, strict=True):
            middle = index[x] * cell + cell / 2 + 4
            parts.append(f'<text x="{left - 6}" y="{top + middle:g}" text-anchor="end"{style}>{esc(text)}</text>')
            cx = left + index[x] * cell + cell / 2
            parts.append(f'<text x="{cx:g}" y="{top - 6}" transform="rotate(-45 {cx:g} {top - 6})"{style}>'
                         f"{esc(x)}</text>")
    parts.append(heatmap_legend(top + grid + 16, left, best, unit, marks))
    return "".join(parts) + "</svg>"


def pair_cells(p: dict[str, Any], places: list[tuple[int, int, str, str]], cell: int, best: float,
               unit: str) -> list[str]:
    """A pair's two cells (x, y, row node, column node): its colour, its figure when there is room (its unit under
    it when there is more), a thick outline when slow; its tooltip `node01 - node02: 42.31 Gb/s`."""
    value, slow = float(p["value"]), p.get("status") in ("fail", "warn")
    colour = ramp(value / best)
    stroke = ' stroke="#1f2328" stroke-width="3"' if slow else ""
    weight = ' font-weight="700"' if slow else ""
    size = 13 if cell >= 48 else 11 if cell >= 36 else 9
    parts = []
    for x, y, a, b in places:
        parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{colour}"{stroke}>'
                     f'<title>{esc(a)} - {esc(b)}: {esc(figure(value, unit))}'
                     f'{" (" + esc(p["status"]) + ": slow)" if slow else ""}</title></rect>')
        below = unit and cell >= UNIT_CELL_MIN
        middle = y + cell / 2 + (0 if below else 4)
        if cell >= VALUE_CELL_MIN:
            parts.append(f'<text x="{x + (cell - 1) / 2:g}" y="{middle:g}" text-anchor="middle" '
                         f'fill="{ink(colour)}" font-size="{size}"{weight}>{esc(number_text(value))}</text>')
        if below:
            parts.append(f'<text x="{x + (cell - 1) / 2:g}" y="{middle + 13:g}" text-anchor="middle" '
                         f'fill="{ink(colour)}" font-size="10">{esc(unit)}</text>')
    return parts


def legend_marks(blamed: bool, left_out: bool) -> str:
    marks = ["thick outline: slow pair"]
    marks += ["red frame: the node the network stage blames"] if blamed else []
    marks += ["hatched: left out of the stage"] if left_out else []
    return "; ".join([*marks, "white: not measured"])


def heatmap_legend(y: int, x: int, best: float, unit: str, marks: str) -> str:
    step = 160 / RAMP_STEPS
    bar = "".join(f'<path d="M{x + i * step:g} {y}h{step:g}v10h{-step:g}z" fill="{ramp((i + 0.5) / RAMP_STEPS)}"/>'
                  for i in range(RAMP_STEPS))
    return (bar + f'<text x="{x}" y="{y + 24}">{esc(figure(0, unit))}</text>'
            f'<text x="{x + 160}" y="{y + 24}" text-anchor="end">{esc(figure(best, unit))}</text>'
            f'<text x="{x + 172}" y="{y + 9}">colour: share of the best pair ({esc(figure(best, unit))})</text>'
            f'<text x="{x}" y="{y + 42}">{esc(marks)}</text>')


def scaling_chart_svg(points: list[dict[str, Any]]) -> str:
    """Scaling efficiency against rank count (log2 axis), one line per job, the ideal at 100%; on GPU runs
    the band of the published GPU figures; a GPU point below half of ideal marked as a collapse, a CPU-rank one
    only labelled (with its cores where its ranks outnumber them)."""
    points = [p for p in points if p.get("gpus") and p.get("efficiency") is not None]
    if not points:
        return ""
    width, height, left, bottom, top, right = 760, 320, 66, 44, 30, 230
    max_gpus = max(p["gpus"] for p in points)
    span = max(1.0, math.log2(max_gpus))
    top_eff = max(1.1, max(p["efficiency"] for p in points) + 0.05)

    def x(gpus: float) -> float:
        return left + (width - left - right) * (math.log2(gpus) / span if span else 0)

    def y(eff: float) -> float:
        return top + (height - top - bottom) * (1 - eff / top_eff)

    series: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        series.setdefault(str(p.get("label", "job")), []).append(p)
    cpu = {label: all(on_cpu(p) for p in pts) for label, pts in series.items()}
    parts = [svg_open(width, height, "scaling efficiency chart")]
    if not all(cpu.values()):
        low, high = reference_band()
        parts.append(f'<path d="M{left} {y(high):.1f}H{width - right}V{y(low):.1f}H{left}z" fill="#dafbe1" '
                     'stroke="#1a7f37" stroke-opacity="0.4"/>'
                     f'<text x="{width - right + 4}" y="{y((low + high) / 2) + 12:.1f}" fill="#1a7f37">published GPU '
                     f"scaling {low:.0%}–{high:.0%}</text>")
    if any(cpu.values()):
        parts.append(f'<text x="{left + 8}" y="{top - 12}" fill="{MUTED}" font-weight="700">CPU ranks: not a GPU '
                     "scaling measurement (no published GPU figures beside it)</text>")
    parts += [f'<line x1="{left}" y1="{y(1):.1f}" x2="{width - right}" y2="{y(1):.1f}" stroke="#8c959f" '
              'stroke-dasharray="4 3"/>', f'<text x="{width - right + 4}" y="{y(1) - 2:.1f}">ideal</text>',
              f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
              'stroke="#57606a"/>',
              f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#57606a"/>']
    for eff in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 6}" y="{y(eff) + 4:.1f}" text-anchor="end">{eff:.0%}</text>')
    middle = (top + height - bottom) / 2
    parts.append(f'<text x="16" y="{middle:.0f}" transform="rotate(-90 16 {middle:.0f})" text-anchor="middle">'
                 "scaling efficiency (% of ideal)</text>")
    for gpus in sorted({p["gpus"] for p in points} | {1}):
        parts.append(f'<text x="{x(gpus):.1f}" y="{height - bottom + 16}" text-anchor="middle">{gpus}</text>')
    axis = "GPUs" if not any(cpu.values()) else "CPU ranks" if all(cpu.values()) else "GPUs or CPU ranks"
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">{axis}</text>')
    for i, (label, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        pts = sorted(pts, key=lambda p: p["gpus"])
        path = " ".join(f"{x(p['gpus']):.1f},{y(p['efficiency']):.1f}" for p in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            tip = f"{label}: {ranks_text(p)}, {p['efficiency']:.0%}"
            if p.get("throughput") is not None:
                tip += f", {figure(p['throughput'], str(p.get('unit', '')))}"
            parts.append(f'<circle cx="{x(p["gpus"]):.1f}" cy="{y(p["efficiency"]):.1f}" r="4" fill="{colour}">'
                         f"<title>{esc(tip)}</title></circle>")
        parts += [collapse_mark(x(p["gpus"]), y(p["efficiency"]), p["efficiency"]) for p in collapses(pts)]
        parts += [drop_label(x(p["gpus"]), y(p["efficiency"]), p) for p in cpu_drops(pts)]
        shown = label if not cpu[label] or CPU_LABEL in label else f"{label} {CPU_LABEL}"
        parts.append(f'<rect x="{width - right + 8}" y="{top + 60 + i * 18}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{width - right + 22}" y="{top + 69 + i * 18}">{esc(shown)}</text>')
    return "".join(parts) + "</svg>"


def collapse_mark(cx: float, cy: float, efficiency: float) -> str:
    """A cross over a GPU point and `collapse: 41% of ideal` beside it."""
    return (f'<path d="M{cx - 8:.1f} {cy - 8:.1f}l16 16m0 -16l-16 16" stroke="{BLAMED}" stroke-width="2.5" '
            f'fill="none"/><text x="{cx - 10:.1f}" y="{cy - 12:.1f}" text-anchor="end" fill="{BLAMED}" '
            'font-weight="700">'
            f"collapse: {efficiency:.0%} of ideal</text>")


def drop_label(cx: float, cy: float, point: dict[str, Any]) -> str:
    """A CPU-rank point's low efficiency in grey words right of it (clear of its line), no cross: `4% of ideal`,
    and under it `3 ranks on 2 CPU cores` where the ranks outnumber their cores."""
    lines = [f"{point['efficiency']:.0%} of ideal"] + ([cores_text(point)] if outnumbered(point) else [])
    return "".join(f'<text x="{cx + 10:.1f}" y="{cy - 4 + 14 * i:.1f}" fill="{MUTED}">{esc(line)}</text>'
                   for i, line in enumerate(lines))
