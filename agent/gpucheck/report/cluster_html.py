"""The cluster report as report.html: one self-contained page (inline CSS and SVG, no external asset)
with the verdict banner, the drain list, cluster checks, charts, the GPU burn-in and the nodes. Any value may be odd
(a node's text, a figure that is not a number): each is escaped and shown as text."""

from __future__ import annotations

import math
from typing import Any

from .cluster_burnin import burnin_section
from .cluster_drain import render_drain
from .cluster_wording import number, published_scaling, status_of, verdict
from .html_burnin import render_burnin
from .html_charts import pair_heatmap_svg, scaling_chart_svg
from .html_parts import COLOURS, CSS, NEUTRAL, badge, esc, tint
from .values import show


def items(value: Any) -> list[dict[str, Any]]:
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def results_table(results: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr style="background:{tint(status_of(r))}"><td>{badge(status_of(r))}</td>'
        f'<td><code>{esc(r.get("check", ""))}</code></td><td>{esc(show(r.get("measured"), 60))}</td>'
        f'<td>{esc(show(r.get("expected"), 40))}</td><td>{esc(r.get("reason", ""))}'
        + (f'<div class="note">{esc(r["remediation"])}</div>' if r.get("remediation") and status_of(r) != "pass"
           else "")
        + "</td></tr>" for r in results)
    return ("<table><tr><th>status</th><th>check</th><th>measured</th><th>expected</th><th>reason</th></tr>"
            f"{rows}</table>")


def nodes_table(doc: dict[str, Any]) -> str:
    """One row per node: status, reason (its odd results or its evidence folded), counts, profile, driver."""
    rows = []
    for host, node in (doc.get("nodes") or {}).items():
        node = node if isinstance(node, dict) else {}
        report = node.get("report") if isinstance(node.get("report"), dict) else {}
        facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
        counts = report.get("counts") if isinstance(report.get("counts"), dict) else {}
        tally = " ".join(f"{counts[s]} {s}" for s in ("fail", "error", "warn") if counts.get(s))
        bad = [r for r in items(report.get("results")) if status_of(r) in ("fail", "error", "warn")]
        detail = ""
        if bad:
            detail = f"<details><summary>{len(bad)} result(s)</summary>{results_table(bad)}</details>"
        elif node.get("evidence") and not report:
            detail = f"<details><summary>evidence</summary><pre>{esc(node['evidence'])}</pre></details>"
        rows.append(
            f'<tr style="background:{tint(status_of(node))}"><td><b>{esc(host)}</b>'
            f'<div class="muted">{esc(node.get("address", ""))}</div></td><td>{badge(status_of(node))}</td>'
            f"<td>{esc(node.get('reason', ''))}{detail}</td><td>{esc(tally)}</td>"
            f"<td>{esc(facts.get('profile', ''))}</td><td>{esc(facts.get('driver_version') or '')}</td>"
            f"<td>{esc(number(node.get('wall_s') or 0, '.1f'))}</td></tr>")
    return ("<table><tr><th>node</th><th>status</th><th>reason</th><th>counts</th><th>profile</th><th>driver</th>"
            "<th>time (s)</th></tr>" + "".join(rows) + "</table>")


def banner(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    colour = {0: COLOURS["pass"], 1: COLOURS["warn"], 2: COLOURS["fail"]}.get(code, COLOURS["error"])
    inv = doc.get("inventory") or {}
    return (f'<div class="banner" style="background:{colour}"><h1>gpucheck cluster — {esc(verdict(code))} '
            f"(exit {esc(code)})</h1><small>started {esc(doc.get('started'))} · "
            f"{esc(number(doc.get('duration_s', 0), '.1f'))} s · {len(doc.get('nodes') or {})} nodes · inventory "
            f"{esc(', '.join(map(str, inv.get('sources') or [])))} · pattern "
            f"{esc(inv.get('pattern'))}{' · limit ' + esc(inv['limit']) if inv.get('limit') else ''}</small></div>")


def render_html(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    counts = (doc.get("counts") or {}).get("nodes") or {}
    tiles = "".join(f'<div class="tile" style="border-color:{COLOURS.get(s, NEUTRAL)}"><b style="color:'
                    f'{COLOURS.get(s, NEUTRAL)}">{esc(n)}</b>nodes {esc(s)}</div>' for s, n in counts.items() if n)
    body = [banner(doc), "<main>"]
    if not doc.get("complete"):
        body.append('<p><b>Incomplete:</b> written before the run ended (a later stage may still be running, or '
                    "the run was interrupted).</p>")
    body.append(f'<div class="tiles">{tiles}</div>')
    if doc.get("drain"):
        body.append("<h2>Nodes to drain</h2><pre>" + esc(render_drain(doc)) + "</pre>")
    results = items(doc.get("cluster"))
    body.append("<h2>Cluster checks</h2>")
    not_pass = [r for r in results if status_of(r) != "pass"]
    if not_pass:
        body.append(results_table(not_pass))
    passed = [r for r in results if status_of(r) == "pass"]
    if passed:
        body.append(f"<details><summary>{len(passed)} passing cluster check(s)</summary>{results_table(passed)}"
                    "</details>")
    pairs = [p for p in items(doc.get("pairs")) if finite(p.get("value")) and "a" in p and "b" in p]
    if pairs:
        body.append("<h2>Pair bandwidth</h2>" + pair_heatmap_svg(pairs, list(doc.get("nodes") or {})))
    scaling = [s for s in items(doc.get("scaling")) if finite(s.get("gpus")) and finite(s.get("efficiency"))
               and (s.get("throughput") is None or finite(s.get("throughput")))]
    if scaling:
        body.append("<h2>Scaling efficiency</h2>" + scaling_chart_svg(scaling)
                    + f'<p class="note">Published references: {esc(published_scaling())}.</p>')
    burnin = burnin_section(doc)
    if burnin:
        body.append(render_burnin(burnin))
    body.append("<h2>Nodes</h2>" + nodes_table(doc))
    body.append(f'<p class="note">gpucheck {esc(doc.get("gpucheck_version", ""))} · written {esc(doc.get("written"))}'
                " · everything is in report.json</p></main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>gpucheck cluster — "
            f"{esc(verdict(code))}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
