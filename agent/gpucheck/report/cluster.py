"""The cluster handoff report, rendered from one document (report.json's content): JSON, JUnit XML,
Markdown, a self-contained HTML page (inline CSS and SVG, no external asset), drain.txt and the
terminal summary. Every file is written atomically, and rewritten as each stage finishes."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..files import write_atomically
from ..references import REFERENCES
from . import show

FILES = ("report.json", "junit.xml", "report.md", "report.html", "drain.txt")
VERDICT = {0: "PASS", 1: "WARN", 2: "FAIL", 3: "COULD NOT CHECK EVERYTHING"}
COLOURS = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "error": "#8250df", "skip": "#6e7781",
           "pending": "#6e7781"}
TINTS = {"pass": "#dafbe1", "warn": "#fff8c5", "fail": "#ffebe9", "error": "#fbefff", "skip": "#f6f8fa",
         "pending": "#f6f8fa"}


def _published_scaling() -> str:
    """The published figures the smoke job's efficiency is read against (sources in references.py)."""
    return "; ".join(f"{r['name']}: {r['efficiency']:.0%} at {r['gpus']} GPUs ({r['speedup']:.0f}x)"
                     for r in REFERENCES)


# ---------------------------------------------------------------- files

def default_dir(now: dt.datetime | None = None) -> Path:
    now = now or dt.datetime.now(dt.timezone.utc)
    return Path(f"gpucheck-report-{now.strftime('%Y%m%dT%H%M%SZ')}")


def safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "_"


class ReportWriter:
    """Owns the report directory: nodes/<host>.json as each host answers, the five files per stage."""

    def __init__(self, directory: Path):
        self.dir = directory
        (self.dir / "nodes").mkdir(parents=True, exist_ok=True)

    def node(self, host: str, outcome: dict[str, Any]) -> None:
        write_atomically(self.dir / "nodes" / f"{safe_name(host)}.json", json.dumps(outcome, indent=2, default=str))

    def write(self, doc: dict[str, Any]) -> None:
        for name, render in (("report.json", render_json), ("junit.xml", render_junit), ("report.md", render_markdown),
                             ("report.html", render_html), ("drain.txt", render_drain)):
            write_atomically(self.dir / name, render(doc))


# ---------------------------------------------------------------- plain formats

def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str) + "\n"


def render_drain(doc: dict[str, Any]) -> str:
    """`node gpucheck: reason` per line: `while read n r; do scontrol update nodename=$n state=drain reason="$r"`."""
    return "".join(f"{d['node']} {d['reason']}\n" for d in doc.get("drain", []))


def _case(parent: ET.Element, classname: str, name: str, result: dict[str, Any]) -> None:
    case = ET.SubElement(parent, "testcase", classname=classname, name=name,
                         time=f"{float(result.get('duration_s') or 0):.3f}")
    status = result.get("status")
    message = f"{result.get('reason', '')} (measured {show(result.get('measured'), 200)}, expected " \
              f"{show(result.get('expected'), 200)})"
    if status in ("fail", "warn"):
        node = ET.SubElement(case, "failure", message=message, type=status)
        node.text = "\n".join(x for x in (result.get("remediation"), result.get("evidence")) if x)
    elif status == "error":
        ET.SubElement(case, "error", message=str(result.get("reason", "")), type="error").text = result.get("evidence")
    elif status == "skip":
        ET.SubElement(case, "skipped", message=str(result.get("reason", "")))


def _suite(parent: ET.Element, name: str, **attrs: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name, **attrs)


def _totals(element: ET.Element) -> None:
    cases = element.iter("testcase")
    counted = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        counted["tests"] += 1
        counted["failures"] += case.find("failure") is not None
        counted["errors"] += case.find("error") is not None
        counted["skipped"] += case.find("skipped") is not None
    for key, value in counted.items():
        element.set(key, str(value))


def render_junit(doc: dict[str, Any]) -> str:
    """One testcase per node-check and per cluster check; a node with no report is one testcase with
    an <error> (its checks could not run), whatever its status."""
    root = ET.Element("testsuites", name="gpucheck cluster", time=f"{doc.get('duration_s', 0):.3f}")
    cluster = _suite(root, "gpucheck.cluster", timestamp=str(doc.get("started", "")))
    for result in doc.get("cluster", []):
        _case(cluster, "cluster." + ".".join(result["check"].split(".")[1:2]), result["check"], result)
    for host, node in doc.get("nodes", {}).items():
        suite = _suite(root, f"gpucheck.node.{host}", hostname=host, time=f"{float(node.get('wall_s') or 0):.3f}")
        report = node.get("report")
        if report:
            for result in report.get("results", []):
                _case(suite, f"{host}.{result['check'].split('.')[0]}", result["check"], result)
        else:
            case = ET.SubElement(suite, "testcase", classname=host, name="gpucheck node",
                                 time=f"{float(node.get('wall_s') or 0):.3f}")
            ET.SubElement(case, "error", message=str(node.get("reason", "")),
                          type=str(node.get("kind", "pending"))).text = node.get("evidence") or None
        _totals(suite)
    _totals(cluster)
    _totals(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    lines = [f"# gpucheck cluster — {VERDICT.get(code, '?')} (exit {code})", ""]
    if not doc.get("complete"):
        lines += ["**Incomplete**: this report was written before the run ended.", ""]
    inv = doc.get("inventory", {})
    lines += [f"- started {doc.get('started')}, {doc.get('duration_s', 0):.1f} s",
              f"- inventory {', '.join(inv.get('sources', []))}, pattern `{inv.get('pattern')}`"
              + (f", limit `{inv.get('limit')}`" if inv.get("limit") else ""),
              f"- nodes: {_counts_text(doc['counts']['nodes'])}; "
              f"cluster checks: {_counts_text(doc['counts']['cluster'])}",
              ""]
    if doc.get("drain"):
        lines += ["## Nodes to drain", "", "```"] + render_drain(doc).splitlines() + ["```", ""]
    not_pass = [r for r in doc.get("cluster", []) if r["status"] != "pass"]
    lines += ["## Cluster checks", ""]
    if not_pass:
        lines += ["| status | check | reason |", "|---|---|---|"]
        lines += [f"| {r['status'].upper()} | `{r['check']}` | {_md(r['reason'])} |" for r in not_pass]
    passed = len(doc.get("cluster", [])) - len(not_pass)
    lines += ["", f"{passed} cluster check(s) pass.", "", "## Nodes", "",
              "| node | address | status | reason | time (s) |", "|---|---|---|---|---|"]
    for host, node in doc.get("nodes", {}).items():
        lines.append(f"| {_md(host)} | {_md(node.get('address', ''))} | {node['status'].upper()} | "
                     f"{_md(node.get('reason', ''))} | {float(node.get('wall_s') or 0):.1f} |")
    if doc.get("pairs"):
        lines += ["", "## Pair bandwidth", "", "| a | b | value | status |", "|---|---|---|---|"]
        lines += [f"| {p['a']} | {p['b']} | {p['value']:g} {p.get('unit', '')} | {p.get('status', '')} |"
                  for p in doc["pairs"]]
    if doc.get("scaling"):
        lines += ["", "## Scaling", "", "| job | GPUs | throughput | efficiency |", "|---|---|---|---|"]
        lines += [f"| {s['label']} | {s['gpus']} | {s['throughput']:g} {s.get('unit', '')} | {s['efficiency']:.0%} |"
                  for s in doc["scaling"]]
        lines += ["", f"Published: {_published_scaling()}."]
    return "\n".join(lines) + "\n"


def render_summary(doc: dict[str, Any], report_dir: Path | str, limit: int = 10) -> str:
    """The terminal's last lines: counts, odd nodes, the drain list, where the report is."""
    code = doc.get("exit_code", 3)
    nodes = doc.get("nodes", {})
    lines = ["", f"gpucheck cluster: {len(nodes)} node(s): {_counts_text(doc['counts']['nodes'])}; "
                 f"cluster checks: {_counts_text(doc['counts']['cluster'])} ({doc.get('duration_s', 0):.1f} s)"]
    bad = [(h, n) for h, n in nodes.items() if n["status"] not in ("pass", "skip")]
    for host, node in bad[:limit]:
        lines.append(f"  {node['status'].upper():<7} {host}: {node.get('reason', '')}")
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more node(s) (report.md)")
    odd = [r for r in doc.get("cluster", []) if r["status"] not in ("pass", "skip")]
    for result in odd[:limit]:
        lines.append(f"  {result['status'].upper():<7} {result['check']}: {result['reason']}")
    if len(odd) > limit:
        lines.append(f"  ... and {len(odd) - limit} more cluster check(s) (report.md)")
    drained = [d["node"] for d in doc.get("drain", [])]
    if drained:
        shown = ", ".join(drained[:20]) + (f" and {len(drained) - 20} more" if len(drained) > 20 else "")
        lines.append(f"drain ({len(drained)}): {shown}  -> {Path(report_dir) / 'drain.txt'}")
    lines += [f"report: {report_dir}/", f"verdict: {VERDICT.get(code, '?')} — exit {code}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.banner{padding:14px 24px;color:#fff}.banner small{display:block;opacity:.9;margin-top:4px}
.tiles{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.tile{border:1px solid #d0d7de;border-radius:6px;padding:8px 14px;min-width:90px}
.tile b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
.badge{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600}
code,pre{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:240px;white-space:pre-wrap}
details{margin:2px 0}summary{cursor:pointer}
.muted{color:#6e7781}.note{font-size:12px;color:#57606a}
svg text{font:11px system-ui,sans-serif;fill:#1f2328}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{COLOURS.get(status, "#6e7781")}">{_e(status.upper())}</span>'


def _results_table(results: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr style="background:{TINTS.get(r["status"], "#fff")}"><td>{_badge(r["status"])}</td>'
        f'<td><code>{_e(r["check"])}</code></td><td>{_e(show(r.get("measured"), 60))}</td>'
        f'<td>{_e(show(r.get("expected"), 40))}</td><td>{_e(r.get("reason", ""))}'
        + (f'<div class="note">{_e(r["remediation"])}</div>' if r.get("remediation") and r["status"] != "pass" else "")
        + "</td></tr>" for r in results)
    return ("<table><tr><th>status</th><th>check</th><th>measured</th><th>expected</th><th>reason</th></tr>"
            f"{rows}</table>")


def _node_rows(doc: dict[str, Any]) -> str:
    rows = []
    for host, node in doc.get("nodes", {}).items():
        report = node.get("report") or {}
        facts = report.get("facts") or {}
        counts = report.get("counts") or {}
        tally = " ".join(f"{counts[s]} {s}" for s in ("fail", "error", "warn") if counts.get(s))
        bad = [r for r in report.get("results", []) if r.get("status") in ("fail", "error", "warn")]
        detail = ""
        if bad:
            detail = f"<details><summary>{len(bad)} result(s)</summary>{_results_table(bad)}</details>"
        elif node.get("evidence") and not report:
            detail = f"<details><summary>evidence</summary><pre>{_e(node['evidence'])}</pre></details>"
        rows.append(
            f'<tr style="background:{TINTS.get(node["status"], "#fff")}"><td><b>{_e(host)}</b>'
            f'<div class="muted">{_e(node.get("address", ""))}</div></td><td>{_badge(node["status"])}</td>'
            f"<td>{_e(node.get('reason', ''))}{detail}</td><td>{_e(tally)}</td>"
            f"<td>{_e(facts.get('profile', ''))}</td><td>{_e(facts.get('driver_version') or '')}</td>"
            f"<td>{float(node.get('wall_s') or 0):.1f}</td></tr>")
    return ("<table><tr><th>node</th><th>status</th><th>reason</th><th>counts</th><th>profile</th><th>driver</th>"
            "<th>time (s)</th></tr>" + "".join(rows) + "</table>")


def _ramp(fraction: float) -> str:
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
            parts.append(f'<text x="{margin - 4}" y="{y:.1f}" text-anchor="end">{_e(n)}</text>')
            x = margin + i * cell + cell * 0.7
            parts.append(f'<text x="{x:.1f}" y="{margin - 4}" transform="rotate(-60 {x:.1f} {margin - 4})">'
                         f"{_e(n)}</text>")
    for p in pairs:
        value = float(p["value"])
        colour = _ramp(value / best)
        for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
            x, y = margin + index[b] * cell, margin + index[a] * cell
            stroke = ' stroke="#000" stroke-width="1.5"' if p.get("status") in ("fail", "warn") else ""
            parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{colour}"{stroke}>'
                         f'<title>{_e(a)} - {_e(b)}: {value:g} {_e(unit)}</title></rect>')
    parts.append(f'<text x="{margin}" y="{size + 24}">colour: share of the best pair ({best:g} {_e(unit)}); '
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

    palette = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989"]
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
        colour = palette[i % len(palette)]
        pts = sorted(pts, key=lambda p: p["gpus"])
        path = " ".join(f"{x(p['gpus']):.1f},{y(p['efficiency']):.1f}" for p in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            tip = f"{label}: {p['gpus']} GPUs, {p['efficiency']:.0%}"
            if p.get("throughput") is not None:
                tip += f", {p['throughput']:g} {p.get('unit', '')}"
            parts.append(f'<circle cx="{x(p["gpus"]):.1f}" cy="{y(p["efficiency"]):.1f}" r="4" fill="{colour}">'
                         f"<title>{_e(tip)}</title></circle>")
        parts.append(f'<rect x="{width - right + 8}" y="{top + 40 + i * 18}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{width - right + 22}" y="{top + 49 + i * 18}">{_e(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    colour = {0: COLOURS["pass"], 1: COLOURS["warn"], 2: COLOURS["fail"]}.get(code, COLOURS["error"])
    inv = doc.get("inventory", {})
    counts = doc.get("counts", {})
    tiles = "".join(f'<div class="tile" style="border-color:{COLOURS[s]}"><b style="color:{COLOURS[s]}">{n}</b>'
                    f"nodes {s}</div>" for s, n in counts.get("nodes", {}).items() if n)
    body = [f'<div class="banner" style="background:{colour}"><h1>gpucheck cluster — {_e(VERDICT.get(code, "?"))} '
            f"(exit {code})</h1><small>started {_e(doc.get('started'))} · {doc.get('duration_s', 0):.1f} s · "
            f"{len(doc.get('nodes', {}))} nodes · inventory {_e(', '.join(inv.get('sources', [])))} · pattern "
            f"{_e(inv.get('pattern'))}{' · limit ' + _e(inv['limit']) if inv.get('limit') else ''}</small></div><main>"]
    if not doc.get("complete"):
        body.append('<p><b>Incomplete:</b> written before the run ended (a later stage may still be running, or '
                    "the run was interrupted).</p>")
    body.append(f'<div class="tiles">{tiles}</div>')
    if doc.get("drain"):
        body.append("<h2>Nodes to drain</h2><pre>" + _e(render_drain(doc)) + "</pre>")
    results = doc.get("cluster", [])
    body.append("<h2>Cluster checks</h2>")
    not_pass = [r for r in results if r["status"] != "pass"]
    if not_pass:
        body.append(_results_table(not_pass))
    passed = [r for r in results if r["status"] == "pass"]
    if passed:
        body.append(f"<details><summary>{len(passed)} passing cluster check(s)</summary>{_results_table(passed)}"
                    "</details>")
    if doc.get("pairs"):
        body.append("<h2>Pair bandwidth</h2>" + pair_heatmap_svg(doc["pairs"], list(doc.get("nodes", {}))))
    if doc.get("scaling"):
        refs = _published_scaling()
        body.append("<h2>Scaling efficiency</h2>" + scaling_chart_svg(doc["scaling"])
                    + f'<p class="note">Published references: {_e(refs)}.</p>')
    body.append("<h2>Nodes</h2>" + _node_rows(doc))
    body.append(f'<p class="note">gpucheck {_e(doc.get("gpucheck_version", ""))} · written {_e(doc.get("written"))}'
                " · everything is in report.json</p></main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>gpucheck cluster — "
            f"{_e(VERDICT.get(code, '?'))}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
