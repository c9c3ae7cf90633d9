"""The report's "Each node against its past" section (docs/history.md): per node, when it last passed a run of
active checks, in days, and a small chart of each key figure over its recent runs (history/trends.py, read by the
history stage into report.json's `history`). Read at a glance: one line per figure, its unit and range written
beside it, this run's point marked, every point's date and value on hover."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..values import figure, figure_unit, name_words, time_of
from .html_charts import svg_open
from .html_parts import esc

STALE_DAYS = 7  # a node whose last active pass is older than a week is shown in the warning colour
# the chart's height spans at least this fraction of its highest value: twice the 5 % drop the regression warns at
# (history/regression.py), so the 0.2 % a healthy GPU varies by draws a flat line and a warned drop half the height
MIN_SPAN = 0.10
WIDTH, HEIGHT, PAD = 150, 34, 4
LINE, NOW, STALE = "#0969da", "#1f2328", "#9a6700"


def days_ago(last: Any, now: dt.datetime) -> str:
    """"today", "1 day ago", "12 days ago", or "never" (no passing run of active checks is known)."""
    then = time_of(last) if last else None
    if then is None:
        return "never"
    days = max(0, (now - then).days)
    return "today" if days == 0 else f"{days} day{'s' if days != 1 else ''} ago"


def sparkline(trend: dict[str, Any]) -> str:
    points = [p for p in trend.get("points") or [] if isinstance(p.get("value"), int | float)]
    if len(points) < 2:
        return ""
    values = [float(p["value"]) for p in points]
    high = max(values)
    low = min(*values, high - abs(high) * MIN_SPAN)  # run-to-run noise stays flat; a drop that warns is visible
    span = (high - low) or 1.0
    step = (WIDTH - 2 * PAD) / (len(points) - 1)
    xy = [(PAD + i * step, HEIGHT - PAD - (v - low) / span * (HEIGHT - 2 * PAD)) for i, v in enumerate(values)]
    unit = unit_of(trend)
    marks = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3 if i == len(xy) - 1 else 1.8}" fill="'
                    f'{NOW if i == len(xy) - 1 else LINE}"><title>{esc(str(p.get("started"))[:10])}: '
                    f"{esc(figure(p['value'], unit))}</title></circle>"
                    for i, ((x, y), p) in enumerate(zip(xy, points, strict=True)))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    label = f"{name(trend)} over the last {len(points)} runs"
    return (svg_open(WIDTH, HEIGHT, esc(label)) + f'<polyline points="{line}" fill="none" stroke="{LINE}" '
            f'stroke-width="1.5"/>{marks}</svg>')


def unit_of(trend: dict[str, Any]) -> str:
    return figure_unit(trend.get("figure"), str(trend.get("unit") or ""))


def name(trend: dict[str, Any]) -> str:
    words = name_words(trend.get("figure"))[0] or str(trend.get("figure") or "")
    return f"{str(trend.get('check') or '').removeprefix('gpu.').replace('_', ' ')} {words}".strip()


def chart_cell(trend: dict[str, Any]) -> str:
    values = [p["value"] for p in trend.get("points") or [] if isinstance(p.get("value"), int | float)]
    unit = unit_of(trend)
    return (f'<div class="trend"><span class="trend-name">{esc(name(trend))}</span>{sparkline(trend)}'
            f'<span class="trend-range">now {esc(figure(values[-1], unit))} · range {esc(figure(min(values)))}–'
            f"{esc(figure(max(values), unit))}</span></div>") if len(values) >= 2 else ""


def history_section(doc: dict[str, Any]) -> str:
    view = doc.get("history")
    if not isinstance(view, dict) or not view:
        return ""
    now = time_of(doc.get("started")) or dt.datetime.now(dt.timezone.utc)
    rows = []
    for node, entry in view.items():
        entry = entry if isinstance(entry, dict) else {}
        last = entry.get("last_active_pass")
        ago = days_ago(last, now)
        then = time_of(last) if last else None
        stale = then is None or (now - then).days >= STALE_DAYS  # never, or a week ago
        colour = f' style="color:{STALE}"' if stale else ""
        charts = "".join(chart_cell(t) for t in entry.get("trends") or [] if isinstance(t, dict))
        rows.append(f"<tr><td>{esc(node)}</td><td{colour}>last active check passed: <b>{esc(ago)}</b>"
                    f"{'' if not last else ' (' + esc(str(last)[:10]) + ')'}</td>"
                    f"<td>{charts or 'no figures over several runs yet'}</td></tr>")
    return ("<h2>Each node against its past</h2><p class=\"note\">From the history store: the median over each "
            "node's GPUs of its key figures, run by run (the last point is this run; hover for dates), and when it "
            "last passed a run of active checks (<code>gpucheck node --full</code>). A GPU that dropped is "
            "named under <code>cluster.history.regression</code>.</p>"
            "<table><tr><th>node</th><th>active checks</th><th>key figures</th></tr>"
            + "".join(rows) + "</table>")
