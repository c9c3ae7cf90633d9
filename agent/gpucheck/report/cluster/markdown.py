"""The cluster report as report.md: the verdict, the drain list, what to do (each action once), what Slurm did,
what did not pass, nodes, the GPU burn-in, the pair-bandwidth matrix (slow pairs, the blamed node and nodes left
out marked), scaling (CPU ranks said as such, never called a collapse; a GPU collapse named). Any value may be odd
(a node's text, a figure that is not a number): each is shown as text in its cell."""

from __future__ import annotations

import re
from typing import Any

from ..gpu_figures import number_text
from ..values import figure
from .burnin import burnin_section, heading, reference_text, share
from .drain import render_drain, would_drain_line
from .scheduler import scheduler_lines
from .training import training_lines
from .wording import (
    CPU_LABEL,
    CPU_NOTE,
    actions,
    blamed_nodes,
    collapses,
    counts_text,
    cpu_drops,
    drop_text,
    left_out_nodes,
    measured_pairs,
    node_map,
    number,
    on_cpu,
    pair_text,
    published_scaling,
    scaling_points,
    slow_pairs,
    speed_text,
    status_of,
    title,
    verdict,
)

MATRIX_MAX = 16  # nodes: a larger cluster's pairs are listed, not drawn as a matrix
BREAKS = re.compile(r"[\r\n\x00-\x08\x0b-\x1f\x7f\u2028\u2029]+")


def _cell(text: Any) -> str:
    """Text that stays inside one table cell."""
    return BREAKS.sub(" ", str(text)).replace("|", "\\|")


def _code(text: Any) -> str:
    return "`" + _cell(text).replace("`", "'") + "`"


def _items(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [x for x in doc.get(key) or () if isinstance(x, dict)]


def burnin_cell(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return ""
    if "of_median" not in cell:  # not compared (memtest bad words)
        return number_text(cell["value"])
    text = f"{number_text(cell['value'])} ({share(cell['of_median'])} / {share(cell['of_reference'])})"
    return f"**{text}**" if cell.get("straggler") else text


def burnin_lines(section: dict[str, Any]) -> list[str]:
    """The burn-in section: stragglers, memory errors, the fleet per SKU, then every node and GPU."""
    fraction = section["fraction"]
    lines = ["", "## GPU burn-in", "",
             f"{len(section['gpus'])} GPU(s) on {section['nodes']} node(s). Each figure: its value (its share of the "
             "fleet median of GPUs of its SKU / of the figure its node judged it against: the data sheet, or the "
             f"PCIe link for host copies). A straggler is below {fraction:g} x its SKU's fleet median.", "",
             "### Stragglers", ""]
    lines += [f"- {_cell(s['node'])} {_cell(s['gpu'])} ({_cell(s['sku'])}): {_cell(heading(s['figure']))} "
              f"{number_text(s['value'])} = {share(s['of_median'])} of the fleet median {number_text(s['median'])}"
              for s in section["stragglers"]] or [f"None: every GPU is within {fraction:g} x its SKU's fleet median."]
    if section["memory_errors"]:
        lines += ["", "### Memory errors (memtest)", ""]
        lines += [f"- {_cell(m['node'])} {_cell(m['gpu'])}: {m['bad_words']} bad word(s)"
                  for m in section["memory_errors"]]
    lines += ["", "### Fleet", "", "| SKU | figure | GPUs | median | min | max | SKU figure (median's share) |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {_cell(f['sku'])} | {_cell(heading(f['figure']))} | {f['gpus']} | "
              f"{number_text(f['median']) if f['median'] is not None else '-'} | {number_text(f['min'])} | "
              f"{number_text(f['max'])} | {reference_text(f)} |" for f in section["fleet"]]
    figures = section["figures"]
    lines += ["", "### Per GPU", "", "| node | GPU | SKU | " + " | ".join(heading(f) for f in figures) + " |",
              "|---|---|---|" + "---|" * len(figures)]
    lines += [f"| {_cell(g['node'])} | {_cell(g['gpu'])} | {_cell(g['sku'])} | "
              + " | ".join(burnin_cell(g["figures"].get(f)) for f in figures) + " |" for g in section["gpus"]]
    if section["without"]:
        lines += ["", "No burn-in figures from " + _cell(", ".join(section["without"]))
                  + " (the burn-in runs with gpucheck cluster --full)."]
    return lines


def what_to_do_lines(doc: dict[str, Any]) -> list[str]:
    found = actions(doc)
    if not found:
        return []
    return (["## What to do", ""] + [f"- **{_cell(action)}** — {_cell('; '.join(where))}" for action, where in found]
            + [""])


def matrix_lines(pairs: list[dict[str, Any]], nodes: list[str], blamed: dict[str, str],
                 left_out: dict[str, str]) -> list[str]:
    """node x node: each cell the pair's figure, a slow pair in bold with `slow`, the diagonal `·`, a pair not
    measured empty, a node left out `—` across its row and column."""
    value = {}
    for p in pairs:
        text = number_text(p["value"])
        text = f"**{text} slow**" if p.get("status") in ("fail", "warn") else text
        value[(str(p["a"]), str(p["b"]))] = value[(str(p["b"]), str(p["a"]))] = text

    def name(node: str) -> str:
        return node + (" (blamed)" if node in blamed else " (left out)" if node in left_out else "")

    def cell(a: str, b: str) -> str:
        return "·" if a == b else "—" if a in left_out or b in left_out else value.get((a, b), "")

    unit = next((str(p.get("unit")) for p in pairs if p.get("unit")), "")
    lines = ["| " + _cell(unit) + " | " + " | ".join(_cell(name(n)) for n in nodes) + " |",
             "|---|" + "---|" * len(nodes)]
    return lines + ["| " + _cell(name(a)) + " | " + " | ".join(cell(a, b) for b in nodes) + " |" for a in nodes]


def pair_lines(doc: dict[str, Any]) -> list[str]:
    pairs = measured_pairs(doc)
    if not pairs:
        return []
    blamed, left_out = blamed_nodes(doc), left_out_nodes(doc, pairs)
    inside = {str(x) for p in pairs for x in (p["a"], p["b"])}
    nodes = [str(n) for n in node_map(doc) if str(n) in inside or str(n) in left_out]
    nodes += sorted(inside - set(nodes))
    lines = ["", "## Pair bandwidth", ""]
    if len(nodes) <= MATRIX_MAX:
        lines += matrix_lines(pairs, nodes, blamed, left_out) + [""]
    else:
        lines += ["| a | b | value | status |", "|---|---|---|---|"]
        lines += [f"| {_cell(p['a'])} | {_cell(p['b'])} | {_cell(figure(p['value'], str(p.get('unit', ''))))} "
                  f"| {_cell(p.get('status', ''))} |" for p in pairs] + [""]
    slow = slow_pairs(pairs)
    lines.append("- Slow pairs: " + _cell(", ".join(pair_text(p) for p in slow)) if slow else "- No slow pair.")
    lines += [f"- Blamed: {_cell(node)} — {_cell(why)}" for node, why in blamed.items()]
    if left_out:
        lines.append("- Left out of this stage: " + _cell("; ".join(f"{n} ({why})" for n, why in left_out.items())))
    return lines


def scaling_lines(doc: dict[str, Any]) -> list[str]:
    points = scaling_points(doc)
    if not points:
        return []
    cpu = [on_cpu(p) for p in points]
    ranks = "CPU ranks" if all(cpu) else "GPUs" if not any(cpu) else "GPUs or CPU ranks"
    lines = ["", "## Scaling", ""]
    if any(cpu):
        lines += [f"**CPU ranks, not GPUs.** {CPU_NOTE}", ""]
    lines += [f"| job | {ranks} | throughput | efficiency |", "|---|---|---|---|"]
    for s in points:
        label = str(s.get("label"))
        label += f" {CPU_LABEL}" if on_cpu(s) and CPU_LABEL not in label else ""
        throughput = figure(s.get("throughput"), str(s.get("unit", "")))
        lines.append(f"| {_cell(label)} | {_cell(s.get('gpus'))} | {_cell(throughput)} | "
                     f"{number(s.get('efficiency'), '.0%')} |")
    lines += [""] + [f"- **Collapse**: {_cell(speed_text(p))}" for p in collapses(points)]
    lines += [f"- **Low efficiency on CPU ranks**: {_cell(drop_text(p))}" for p in cpu_drops(points)]
    if not all(cpu):
        lines.append(f"- Published GPU scaling: {published_scaling()}.")
    return lines


def render_markdown(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    lines = [f"# {_cell(title(doc))} — {verdict(code)} (exit {code})", ""]
    if not doc.get("complete"):
        lines += ["**Incomplete**: this report was written before the run ended.", ""]
    inv = doc.get("inventory") if isinstance(doc.get("inventory"), dict) else {}
    counts = doc.get("counts") or {}
    lines += [f"- started {doc.get('started')}, {figure(doc.get('duration_s', 0), 's')}",
              f"- inventory {_cell(', '.join(map(str, inv.get('sources') or [])))}, pattern {_code(inv.get('pattern'))}"
              + (f", limit {_code(inv.get('limit'))}" if inv.get("limit") else ""),
              f"- nodes: {counts_text(counts.get('nodes'))}; cluster checks: {counts_text(counts.get('cluster'))}",
              ""]
    if doc.get("drain"):
        lines += ["## Nodes to drain", "", "```"] + render_drain(doc).replace("```", "'''").splitlines() + ["```", ""]
    if would := would_drain_line(doc):
        lines += [would, ""]
    lines += what_to_do_lines(doc)
    name, told = scheduler_lines(doc)
    if told:
        lines += [f"## {name}", ""] + [f"- {_cell(label)}: {_cell(text)}" for label, text in told] + [""]
    results = _items(doc, "cluster")
    not_pass = [r for r in results if status_of(r) != "pass"]
    lines += ["## Cluster checks", ""]
    if not_pass:
        lines += ["| status | check | reason |", "|---|---|---|"]
        lines += [f"| {_cell(status_of(r).upper())} | {_code(r.get('check'))} | {_cell(r.get('reason', ''))} |"
                  for r in not_pass]
    lines += ["", f"{len(results) - len(not_pass)} cluster check(s) pass.", "", "## Nodes", "",
              "| node | address | status | reason | time (s) |", "|---|---|---|---|---|"]
    for host, node in node_map(doc).items():
        node = node if isinstance(node, dict) else {}
        lines.append(f"| {_cell(host)} | {_cell(node.get('address', ''))} | {_cell(status_of(node).upper())} | "
                     f"{_cell(node.get('reason', ''))} | {_cell(figure(node.get('wall_s') or 0))} |")
    burnin = burnin_section(doc)
    if burnin:
        lines += burnin_lines(burnin)
    lines += pair_lines(doc) + scaling_lines(doc) + training_lines(doc)
    return "\n".join(lines) + "\n"
