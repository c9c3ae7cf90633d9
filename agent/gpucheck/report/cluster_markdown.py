"""The cluster report as report.md: the verdict, the drain list, what did not pass, nodes, pairs, scaling."""

from __future__ import annotations

from typing import Any

from .cluster_drain import render_drain
from .cluster_wording import counts_text, published_scaling, verdict


def _cell(text: Any) -> str:
    """Text that stays inside one table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    lines = [f"# gpucheck cluster — {verdict(code)} (exit {code})", ""]
    if not doc.get("complete"):
        lines += ["**Incomplete**: this report was written before the run ended.", ""]
    inv = doc.get("inventory", {})
    lines += [f"- started {doc.get('started')}, {doc.get('duration_s', 0):.1f} s",
              f"- inventory {', '.join(inv.get('sources', []))}, pattern `{inv.get('pattern')}`"
              + (f", limit `{inv.get('limit')}`" if inv.get("limit") else ""),
              f"- nodes: {counts_text(doc['counts']['nodes'])}; "
              f"cluster checks: {counts_text(doc['counts']['cluster'])}",
              ""]
    if doc.get("drain"):
        lines += ["## Nodes to drain", "", "```"] + render_drain(doc).splitlines() + ["```", ""]
    not_pass = [r for r in doc.get("cluster", []) if r["status"] != "pass"]
    lines += ["## Cluster checks", ""]
    if not_pass:
        lines += ["| status | check | reason |", "|---|---|---|"]
        lines += [f"| {r['status'].upper()} | `{r['check']}` | {_cell(r['reason'])} |" for r in not_pass]
    passed = len(doc.get("cluster", [])) - len(not_pass)
    lines += ["", f"{passed} cluster check(s) pass.", "", "## Nodes", "",
              "| node | address | status | reason | time (s) |", "|---|---|---|---|---|"]
    for host, node in doc.get("nodes", {}).items():
        lines.append(f"| {_cell(host)} | {_cell(node.get('address', ''))} | {node['status'].upper()} | "
                     f"{_cell(node.get('reason', ''))} | {float(node.get('wall_s') or 0):.1f} |")
    if doc.get("pairs"):
        lines += ["", "## Pair bandwidth", "", "| a | b | value | status |", "|---|---|---|---|"]
        lines += [f"| {p['a']} | {p['b']} | {p['value']:g} {p.get('unit', '')} | {p.get('status', '')} |"
                  for p in doc["pairs"]]
    if doc.get("scaling"):
        lines += ["", "## Scaling", "", "| job | GPUs | throughput | efficiency |", "|---|---|---|---|"]
        lines += [f"| {s['label']} | {s['gpus']} | {s['throughput']:g} {s.get('unit', '')} | {s['efficiency']:.0%} |"
                  for s in doc["scaling"]]
        lines += ["", f"Published: {published_scaling()}."]
    return "\n".join(lines) + "\n"
