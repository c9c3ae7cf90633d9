"""The cluster report as report.html: one self-contained page (inline CSS and SVG, no external asset)
with the verdict banner, the drain list, cluster checks, charts and the nodes."""

from __future__ import annotations

from typing import Any

from .cluster_drain import render_drain
from .cluster_wording import published_scaling, verdict
from .html_charts import pair_heatmap_svg, scaling_chart_svg
from .html_parts import COLOURS, CSS, badge, esc, tint
from .values import show


def results_table(results: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr style="background:{tint(r["status"])}"><td>{badge(r["status"])}</td>'
        f'<td><code>{esc(r["check"])}</code></td><td>{esc(show(r.get("measured"), 60))}</td>'
        f'<td>{esc(show(r.get("expected"), 40))}</td><td>{esc(r.get("reason", ""))}'
        + (f'<div class="note">{esc(r["remediation"])}</div>' if r.get("remediation") and r["status"] != "pass" else "")
        + "</td></tr>" for r in results)
    return ("<table><tr><th>status</th><th>check</th><th>measured</th><th>expected</th><th>reason</th></tr>"
            f"{rows}</table>")


def nodes_table(doc: dict[str, Any]) -> str:
    """One row per node: status, reason (its odd results or its evidence folded), counts, profile, driver."""
    rows = []
    for host, node in doc.get("nodes", {}).items():
        report = node.get("report") or {}
        facts = report.get("facts") or {}
        counts = report.get("counts") or {}
        tally = " ".join(f"{counts[s]} {s}" for s in ("fail", "error", "warn") if counts.get(s))
        bad = [r for r in report.get("results", []) if r.get("status") in ("fail", "error", "warn")]
        detail = ""
        if bad:
            detail = f"<details><summary>{len(bad)} result(s)</summary>{results_table(bad)}</details>"
        elif node.get("evidence") and not report:
            detail = f"<details><summary>evidence</summary><pre>{esc(node['evidence'])}</pre></details>"
        rows.append(
            f'<tr style="background:{tint(node["status"])}"><td><b>{esc(host)}</b>'
            f'<div class="muted">{esc(node.get("address", ""))}</div></td><td>{badge(node["status"])}</td>'
            f"<td>{esc(node.get('reason', ''))}{detail}</td><td>{esc(tally)}</td>"
            f"<td>{esc(facts.get('profile', ''))}</td><td>{esc(facts.get('driver_version') or '')}</td>"
            f"<td>{float(node.get('wall_s') or 0):.1f}</td></tr>")
    return ("<table><tr><th>node</th><th>status</th><th>reason</th><th>counts</th><th>profile</th><th>driver</th>"
            "<th>time (s)</th></tr>" + "".join(rows) + "</table>")


def banner(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    colour = {0: COLOURS["pass"], 1: COLOURS["warn"], 2: COLOURS["fail"]}.get(code, COLOURS["error"])
    inv = doc.get("inventory", {})
    return (f'<div class="banner" style="background:{colour}"><h1>gpucheck cluster — {esc(verdict(code))} '
            f"(exit {code})</h1><small>started {esc(doc.get('started'))} · {doc.get('duration_s', 0):.1f} s · "
            f"{len(doc.get('nodes', {}))} nodes · inventory {esc(', '.join(inv.get('sources', [])))} · pattern "
            f"{esc(inv.get('pattern'))}{' · limit ' + esc(inv['limit']) if inv.get('limit') else ''}</small></div>")


def render_html(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    counts = doc.get("counts", {})
    tiles = "".join(f'<div class="tile" style="border-color:{COLOURS[s]}"><b style="color:{COLOURS[s]}">{n}</b>'
                    f"nodes {s}</div>" for s, n in counts.get("nodes", {}).items() if n)
    body = [banner(doc), "<main>"]
    if not doc.get("complete"):
        body.append('<p><b>Incomplete:</b> written before the run ended (a later stage may still be running, or '
                    "the run was interrupted).</p>")
    body.append(f'<div class="tiles">{tiles}</div>')
    if doc.get("drain"):
        body.append("<h2>Nodes to drain</h2><pre>" + esc(render_drain(doc)) + "</pre>")
    results = doc.get("cluster", [])
    body.append("<h2>Cluster checks</h2>")
    not_pass = [r for r in results if r["status"] != "pass"]
    if not_pass:
        body.append(results_table(not_pass))
    passed = [r for r in results if r["status"] == "pass"]
    if passed:
        body.append(f"<details><summary>{len(passed)} passing cluster check(s)</summary>{results_table(passed)}"
                    "</details>")
    if doc.get("pairs"):
        body.append("<h2>Pair bandwidth</h2>" + pair_heatmap_svg(doc["pairs"], list(doc.get("nodes", {}))))
    if doc.get("scaling"):
        body.append("<h2>Scaling efficiency</h2>" + scaling_chart_svg(doc["scaling"])
                    + f'<p class="note">Published references: {esc(published_scaling())}.</p>')
    body.append("<h2>Nodes</h2>" + nodes_table(doc))
    body.append(f'<p class="note">gpucheck {esc(doc.get("gpucheck_version", ""))} · written {esc(doc.get("written"))}'
                " · everything is in report.json</p></main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>gpucheck cluster — "
            f"{esc(verdict(code))}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
