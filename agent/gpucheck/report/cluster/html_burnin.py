"""The GPU burn-in section of report.html (burnin.burnin_section's data): stragglers and memory
errors named, the fleet per SKU, and every node and GPU with each figure's share of its SKU's fleet median
and of the figure its node judged it against; a straggler's cell tinted."""

from __future__ import annotations

from typing import Any

from ..gpu_figures import number_text
from .burnin import heading, reference_text, share
from .html_parts import esc, tint

FOLD_ROWS = 64  # more GPUs than this: the per-GPU table is folded


def cell(data: dict[str, Any] | None) -> str:
    if data is None:
        return "<td></td>"
    if "of_median" not in data:  # not compared with a median (memtest bad words): any is an error
        colour = tint("fail" if data["value"] else "pass")
        return f'<td style="background:{colour}">{esc(number_text(data["value"]))}</td>'
    style = f' style="background:{tint("warn")}"' if data.get("straggler") else ""
    return (f"<td{style}>{esc(number_text(data['value']))}<div class=\"muted\">{esc(share(data['of_median']))} / "
            f"{esc(share(data['of_reference']))}</div></td>")


def render_burnin(section: dict[str, Any]) -> str:
    fraction = section["fraction"]
    parts = ["<h2>GPU burn-in</h2>",
             f'<p class="note">{len(section["gpus"])} GPU(s) on {section["nodes"]} node(s). Under each figure: its '
             "share of the fleet median of GPUs of its SKU / of the figure its node judged it against (the data "
             f"sheet, or the PCIe link for host copies). A straggler is below {fraction:g} x its SKU's fleet "
             "median.</p>", "<h3>Stragglers</h3>"]
    if section["stragglers"]:
        parts.append("<ul>" + "".join(
            f"<li><b>{esc(s['node'])}</b> {esc(s['gpu'])} ({esc(s['sku'])}): {esc(heading(s['figure']))} "
            f"{esc(number_text(s['value']))} = {esc(share(s['of_median']))} of the fleet median "
            f"{esc(number_text(s['median']))}</li>" for s in section["stragglers"]) + "</ul>")
    else:
        parts.append(f"<p>None: every GPU is within {fraction:g} x its SKU's fleet median.</p>")
    if section["memory_errors"]:
        parts.append("<h3>Memory errors (memtest)</h3><ul>" + "".join(
            f"<li><b>{esc(m['node'])}</b> {esc(m['gpu'])}: {esc(m['bad_words'])} bad word(s)</li>"
            for m in section["memory_errors"]) + "</ul>")
    fleet = "".join(
        f"<tr><td>{esc(f['sku'])}</td><td>{esc(heading(f['figure']))}</td><td>{esc(f['gpus'])}</td>"
        f"<td>{esc(number_text(f['median']) if f['median'] is not None else '-')}</td>"
        f"<td>{esc(number_text(f['min']))}</td><td>{esc(number_text(f['max']))}</td><td>{esc(reference_text(f))}</td>"
        "</tr>" for f in section["fleet"])
    parts.append("<h3>Fleet</h3><table><tr><th>SKU</th><th>figure</th><th>GPUs</th><th>median</th><th>min</th>"
                 f"<th>max</th><th>SKU figure (median's share)</th></tr>{fleet}</table>")
    figures = section["figures"]
    head = "<tr><th>node</th><th>GPU</th><th>SKU</th>" + "".join(f"<th>{esc(heading(f))}</th>" for f in figures)
    rows = "".join(f"<tr><td><b>{esc(g['node'])}</b></td><td>{esc(g['gpu'])}</td><td>{esc(g['sku'])}</td>"
                   + "".join(cell(g["figures"].get(f)) for f in figures) + "</tr>" for g in section["gpus"])
    table = f'<div style="overflow-x:auto"><table>{head}</tr>{rows}</table></div>'
    if len(section["gpus"]) > FOLD_ROWS:
        table = f"<details><summary>{len(section['gpus'])} GPUs</summary>{table}</details>"
    parts.append("<h3>Per GPU</h3>" + table)
    if section["without"]:
        parts.append(f'<p class="note">No burn-in figures from {esc(", ".join(section["without"]))} (the burn-in '
                     "runs with gpucheck cluster --full).</p>")
    return "".join(parts)
