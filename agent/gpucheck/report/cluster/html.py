"""The cluster report as report.html: one self-contained page (inline CSS and SVG, no external asset) with the
verdict banner, the drain list, what to do (each action once), what Slurm did, cluster checks, the pair-bandwidth
heat map, the scaling chart, the GPU burn-in, the GPUs over time (throughput and temperature heat maps), each
node against its past and the nodes. A failed or errored node's results are open and every value and evidence is
shown whole (a cell wraps, evidence scrolls; nothing is cut). Any value may be odd (a node's text, a figure that
is not a number): each is escaped and shown as text."""

from __future__ import annotations

from typing import Any

from ..values import figure, plural, unit_of_check
from ..views import for_person
from .burnin import burnin_section
from .drain import render_drain, would_drain_line
from .html_burn_map import burn_map_html
from .html_burnin import render_burnin
from .html_charts import pair_heatmap_svg, scaling_chart_svg
from .html_history import history_section
from .html_parts import COLOURS, CSS, NEUTRAL, badge, esc, esc_wrapping, tint
from .html_values import value_html
from .scheduler import scheduler_lines
from .training import training_html
from .wording import (
    CPU_NOTE,
    actions,
    blamed_nodes,
    collapses,
    cpu_drops,
    dicts,
    drop_text,
    left_out_nodes,
    measured_pairs,
    node_map,
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

# a tile's words after its count: "1 node failed", "3 nodes passed"
TILE_WORDS = {"pass": "passed", "warn": "warned", "fail": "failed", "skip": "skipped", "error": "could not be checked"}
OPEN = ("fail", "error")  # statuses whose results and evidence are shown without a click


def check_name(check: Any) -> str:
    """A check id as a person reads it: whole, on one line (cluster.history.repeat_offender is 31 characters, which
    fits beside a reason at 900 px; broken at its dots it read as two words)."""
    return f'<code class="id">{esc(check)}</code>'


def evidence_html(result: dict[str, Any]) -> str:
    """A result's evidence whole, in a box that scrolls: open on a failure or an error, folded otherwise."""
    evidence = result.get("evidence")
    if not evidence or status_of(result) == "pass":
        return ""
    state = " open" if status_of(result) in OPEN else ""
    return f"<details{state}><summary>evidence</summary><pre>{esc(evidence)}</pre></details>"


def results_table(results: list[dict[str, Any]]) -> str:
    """One row per result; an action shown once per table (the first row that calls for it)."""
    said: set[str] = set()
    rows = []
    for r in results:
        action = str(r.get("remediation") or "") if status_of(r) != "pass" else ""
        note = f'<div class="note">{esc(action)}</div>' if action and action not in said else ""
        said.add(action)
        measured = value_html(for_person(r.get("check"), r.get("measured")), unit_of_check(r.get("check")),
                              r.get("reason"))
        rows.append(f'<tr style="background:{tint(status_of(r))}"><td>{badge(status_of(r))}</td>'
                    f'<td>{check_name(r.get("check", ""))}</td>'
                    f'<td>{measured}</td>'
                    f'<td>{value_html(r.get("expected"))}</td>'
                    f'<td>{esc_wrapping(r.get("reason", ""))}{note}{evidence_html(r)}</td></tr>')
    return ("<table><tr><th>status</th><th>check</th><th>measured</th><th>expected</th><th>reason</th></tr>"
            + "".join(rows) + "</table>")


def what_to_do(doc: dict[str, Any]) -> str:
    """Each distinct action once, with the nodes and checks that call for it."""
    found = actions(doc)
    if not found:
        return ""
    rows = "".join(f"<li><b>{esc(action)}</b><div class=\"note\">{esc('; '.join(where))}</div></li>"
                   for action, where in found)
    return f"<h2>What to do</h2><ul>{rows}</ul>"


def scheduler_section(doc: dict[str, Any]) -> str:
    """What the scheduler did: the launcher, nodes checked over SSH instead, nodes drained, resumed or left."""
    name, lines = scheduler_lines(doc)
    if not lines:
        return ""
    items = "".join(f"<li><b>{esc(label)}</b>: {esc(text)}</li>" for label, text in lines)
    return f"<h2>{esc(name)}</h2><ul>{items}</ul>"


def pair_section(doc: dict[str, Any]) -> str:
    """The heat map, then the slow pairs, the blamed node and the nodes left out in words, every pair folded."""
    pairs = measured_pairs(doc)
    if not pairs:
        return ""
    blamed, left_out = blamed_nodes(doc), left_out_nodes(doc, pairs)
    notes = []
    slow = slow_pairs(pairs)
    notes.append("<b>Slow pairs</b>: " + esc(", ".join(pair_text(p) for p in slow)) if slow else "No slow pair.")
    notes += [f"<b>Blamed</b>: {esc(node)} — {esc(why)}" for node, why in blamed.items()]
    if left_out:
        notes.append("<b>Left out of this stage</b>: " + esc("; ".join(f"{n} ({why})" for n, why in left_out.items())))
    rows = "".join(f'<tr style="background:{tint(status_of(p))}"><td>{esc(p["a"])}</td><td>{esc(p["b"])}</td>'
                   f'<td>{esc(figure(p["value"], str(p.get("unit", ""))))}</td><td>{badge(status_of(p))}</td></tr>'
                   for p in pairs)
    return ("<h2>Pair bandwidth</h2>" + pair_heatmap_svg(pairs, list(node_map(doc)), blamed, left_out)
            + "<ul>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul>"
            + f"<details><summary>{esc(plural(len(pairs), 'pair'))} measured</summary><table><tr><th>a</th>"
            f"<th>b</th><th>bandwidth</th><th>status</th></tr>{rows}</table></details>")


def scaling_section(doc: dict[str, Any]) -> str:
    """The chart, then in words: CPU ranks as such, or the published GPU figures; any collapse."""
    points = scaling_points(doc)
    if not points:
        return ""
    notes = [f"<b>Collapse</b>: {esc(speed_text(p))}" for p in collapses(points)]
    notes += [f"<b>Low efficiency on CPU ranks</b>: {esc(drop_text(p))}" for p in cpu_drops(points)]
    if any(on_cpu(p) for p in points):
        notes.insert(0, f"<b>CPU ranks, not GPUs.</b> {esc(CPU_NOTE)}")
    if not all(on_cpu(p) for p in points):
        notes.append(f"Published GPU scaling (the green band): {esc(published_scaling())}.")
    return ("<h2>Scaling efficiency</h2>" + scaling_chart_svg(points)
            + "".join(f'<p class="note">{n}</p>' for n in notes))


def node_detail(node: dict[str, Any], report: dict[str, Any]) -> str:
    """A node's results that did not pass, or its evidence when it sent no report: open when the node failed or
    errored, folded when it only warned."""
    state = " open" if status_of(node) in OPEN else ""
    bad = [r for r in dicts(report.get("results")) if status_of(r) in ("fail", "error", "warn")]
    if bad:
        return (f"<details{state}><summary>{esc(plural(len(bad), 'result'))} not passing</summary>"
                f"{results_table(bad)}</details>")
    if node.get("evidence") and not report:
        return f"<details{state}><summary>evidence</summary><pre>{esc(node['evidence'])}</pre></details>"
    return ""


def nodes_table(doc: dict[str, Any]) -> str:
    """One row per node: status, reason, counts, profile, driver; under it, across the table, its results that
    did not pass or its evidence (node_detail)."""
    rows = []
    for host, node in node_map(doc).items():
        node = node if isinstance(node, dict) else {}
        report = node.get("report") if isinstance(node.get("report"), dict) else {}
        facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
        counts = report.get("counts") if isinstance(report.get("counts"), dict) else {}
        tally = " ".join(f"{counts[s]} {s}" for s in ("fail", "error", "warn") if counts.get(s))
        background = f'style="background:{tint(status_of(node))}"'
        rows.append(
            f'<tr {background}><td><b>{esc(host)}</b>'
            f'<div class="muted">{esc(node.get("address", ""))}</div></td><td>{badge(status_of(node))}</td>'
            f"<td>{esc(node.get('reason', ''))}</td><td>{esc(tally)}</td>"
            f"<td>{esc(facts.get('profile', ''))}</td><td>{esc(facts.get('driver_version') or '')}</td>"
            f"<td>{esc(figure(node.get('wall_s') or 0))}</td></tr>")
        detail = node_detail(node, report)
        if detail:
            rows.append(f'<tr {background}><td></td><td colspan="6">{detail}</td></tr>')
    return ("<table><tr><th>node</th><th>status</th><th>reason</th><th>counts</th><th>profile</th><th>driver</th>"
            "<th>time (s)</th></tr>" + "".join(rows) + "</table>")


def banner(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    colour = {0: COLOURS["pass"], 1: COLOURS["warn"], 2: COLOURS["fail"]}.get(code, COLOURS["error"])
    inv = doc.get("inventory") if isinstance(doc.get("inventory"), dict) else {}
    return (f'<div class="banner" style="background:{colour}"><h1>{esc(title(doc))} — {esc(verdict(code))} '
            f"(exit {esc(code)})</h1><small>started {esc(doc.get('started'))} · "
            f"{esc(figure(doc.get('duration_s', 0), 's'))} · {plural(len(node_map(doc)), 'node')} · "
            "inventory "
            f"{esc(', '.join(map(str, inv.get('sources') or [])))} · pattern "
            f"{esc(inv.get('pattern'))}{' · limit ' + esc(inv['limit']) if inv.get('limit') else ''}</small></div>")


def render_html(doc: dict[str, Any]) -> str:
    code = doc.get("exit_code", 3)
    counts = (doc.get("counts") or {}).get("nodes") or {}
    tiles = "".join(f'<div class="tile" style="border-color:{COLOURS.get(s, NEUTRAL)}"><b style="color:'
                    f'{COLOURS.get(s, NEUTRAL)}">{esc(n)}</b>{"node" if n == 1 else "nodes"} '
                    f"{esc(TILE_WORDS.get(s, s))}</div>" for s, n in counts.items() if n)
    body = [banner(doc), "<main>"]
    if not doc.get("complete"):
        body.append('<p><b>Incomplete:</b> written before the run ended (a later stage may still be running, or '
                    "the run was interrupted).</p>")
    body.append(f'<div class="tiles">{tiles}</div>')
    if doc.get("drain"):
        body.append("<h2>Nodes to drain</h2><pre>" + esc(render_drain(doc)) + "</pre>")
    if would := would_drain_line(doc):
        body.append(f"<p>{esc(would)}</p>")
    body.append(what_to_do(doc))
    body.append(scheduler_section(doc))
    results = dicts(doc.get("cluster"))
    body.append("<h2>Cluster checks</h2>")
    not_pass = [r for r in results if status_of(r) != "pass"]
    if not_pass:
        body.append(results_table(not_pass))
    passed = [r for r in results if status_of(r) == "pass"]
    if passed:
        body.append(f"<details><summary>{len(passed)} passing cluster check(s)</summary>{results_table(passed)}"
                    "</details>")
    body += [pair_section(doc), scaling_section(doc), training_html(doc)]
    burnin = burnin_section(doc)
    if burnin:
        body.append(render_burnin(burnin))
    body.append(burn_map_html(doc))  # GPUs over time, also from the burn stage alone (no per-node burn-in)
    body.append(history_section(doc))
    body.append("<h2>Nodes</h2>" + nodes_table(doc))
    body.append(f'<p class="note">gpucheck {esc(doc.get("gpucheck_version", ""))} · written {esc(doc.get("written"))}'
                " · everything is in report.json</p></main>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{esc(title(doc))} — "
            f"{esc(verdict(code))}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
