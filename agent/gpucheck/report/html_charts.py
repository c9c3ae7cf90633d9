"""The HTML report's inline SVG charts: the node x node pair bandwidth heat map and the scaling
efficiency chart."""

from __future__ import annotations

import math
from typing import Any

from .html_parts import esc

PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989"]  # one colour per scaling job


def ramp(fraction: float) -> str:
    """Red (slow) through amber to green (fast)."""
    fraction = min(max(fraction, 0.0), 1.0)
    stops = [(0.0, (207, 34, 46)), (0.5, (212, 167, 44)), (1.0, (26, 127, 55))]
    for (f0, c0), (f1, c1) in zip(stops, stops[1:], strict=False):
        if fraction <= f1:
            t = (fraction - f0) / (f1 - f0)
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(c0, c1, strict=True))
    return "#1a7f37"


def pair_heatmap_svg(pairs: list[dict[str, Any]], order: list[str] | None = None) -> str:
    """A symmetric node x node matrix of pair bandwidth, coloured against the best pair."""
    nodes = [n for n in (order or []) if any(n in (p["a"], p["b"]) for p in pairs)]
    nodes += sorted({x for p in pairs for x in (p["a"], p["b"])} - set(nodes))
    if not nodes:
        return ""
    index = {n: i for i, n in enumerate(nodes)}
    best = max((float(p["value"]) for p in pairs), default=0) or 1.0
    unit = next((p.get("unit") for p in pairs if p.get("unit")), "")
    cell = max(4, min(28, 720 // len(nodes)))
    labels = cell >= 10
    margin = 90 if labels else 10
    size = margin + cell * len(nodes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{max(size + 10, 560)}" height="{size + 40}" role="img" '
             f'aria-label="pair bandwidth matrix">']
    if labels:
        for n, i in index.items():
            y = margin + i * cell + cell * 0.7
            parts.append(f'<text x="{margin - 4}" y="{y:.1f}" text-anchor="end">{esc(n)}</text>')
            x = margin + i * cell + cell * 0.7
            parts.append(f'<text x="{x:.1f}" y="{margin - 4}" transform="rotate(-60 {x:.1f} {margin - 4})">'
                         f"{esc(n)}</text>")
    for p in pairs:
        value = float(p["value"])
        colour = ramp(value / best)
        for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
            x, y = margin + index[b] * cell, margin + index[a] * cell
            stroke = ' stroke="#000" stroke-width="1.5"' if p.get("status") in ("fail", "warn") else ""
            parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{colour}"{stroke}>'
                         f'<title>{esc(a)} - {esc(b)}: {value:g} {esc(unit)}</title></rect>')
    parts.append(f'<text x="{margin}" y="{size + 24}">colour: share of the best pair ({best:g} {esc(unit)}); '
                 "outlined: slow pairs</text></svg>")
    return "".join(parts)


def scaling_chart_svg(points: list[dict[str, Any]]) -> str:
    """Scaling efficiency against GPU count (log2 axis), one line per job, the ideal at 100%."""
    points = [p for p in points if p.get("gpus") and p.get("efficiency") is not None]
    if not points:
        return ""
    width, height, left, bottom, top, right = 640, 300, 50, 40, 20, 150
    max_gpus = max(p["gpus"] for p in points)
    span = max(1.0, math.log2(max_gpus))
    top_eff = max(1.1, max(p["efficiency"] for p in points) + 0.05)

    def x(gpus: float) -> float:
        return left + (width - left - right) * (math.log2(gpus) / span if span else 0)

    def y(eff: float) -> float:
        return top + (height - top - bottom) * (1 - eff / top_eff)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="scaling efficiency chart">',
             f'<line x1="{left}" y1="{y(1):.1f}" x2="{width - right}" y2="{y(1):.1f}" stroke="#8c959f" '
             'stroke-dasharray="4 3"/>', f'<text x="{width - right + 4}" y="{y(1) + 4:.1f}">ideal</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#57606a"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#57606a"/>']
    for eff in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 6}" y="{y(eff) + 4:.1f}" text-anchor="end">{eff:.0%}</text>')
    ticks = sorted({p["gpus"] for p in points} | {1})
    for gpus in ticks:
        parts.append(f'<text x="{x(gpus):.1f}" y="{height - bottom + 16}" text-anchor="middle">{gpus}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" text-anchor="middle">'
                 "GPUs (ranks)</text>")
    series: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        series.setdefault(str(p.get("label", "job")), []).append(p)
    for i, (label, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        pts = sorted(pts, key=lambda p: p["gpus"])
        path = " ".join(f"{x(p['gpus']):.1f},{y(p['efficiency']):.1f}" for p in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            tip = f"{label}: {p['gpus']} GPUs, {p['efficiency']:.0%}"
            if p.get("throughput") is not None:
                tip += f", {p['throughput']:g} {p.get('unit', '')}"
            parts.append(f'<circle cx="{x(p["gpus"]):.1f}" cy="{y(p["efficiency"]):.1f}" r="4" fill="{colour}">'
                         f"<title>{esc(tip)}</title></circle>")
        parts.append(f'<rect x="{width - right + 8}" y="{top + 40 + i * 18}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{width - right + 22}" y="{top + 49 + i * 18}">{esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
