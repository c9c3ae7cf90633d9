"""The cluster run's last lines on the terminal: counts, odd nodes and checks, the GPU burn-in's stragglers
and memory errors, the scaling efficiency (CPU ranks said as such), the drain list, where the report is, the
verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..values import figure
from .burnin import burnin_section, heading
from .drain import one_line, would_drain_line
from .training import training_summary
from .wording import counts_text, node_map, number, scaling_points, scaling_summary, status_of, verdict


def burnin_line(section: dict[str, Any], limit: int) -> str:
    """`burn-in: 32 GPU(s) on 4 node(s); 1 straggler(s): node02 GPU3 gemm bf16 TFLOP/s 79% of median`."""
    line = f"burn-in: {len(section['gpus'])} GPU(s) on {section['nodes']} node(s)"
    stragglers = [f"{s['node']} {s['gpu']} {heading(s['figure'])} {number(s['of_median'], '.0%')} of median"
                  for s in section["stragglers"]]
    errors = [f"{m['node']} {m['gpu']} {m['bad_words']} bad word(s)" for m in section["memory_errors"]]
    for what, items in (("straggler(s)", stragglers), ("memory error(s)", errors)):
        if items:
            more = f" and {len(items) - limit} more (report.md)" if len(items) > limit else ""
            line += f"; {len(items)} {what}: " + ", ".join(items[:limit]) + more
    if not stragglers and not errors:
        line += ", no straggler, no memory error"
    return one_line(line)


def render_summary(doc: dict[str, Any], report_dir: Path | str, limit: int = 10) -> str:
    """At most `limit` odd nodes and `limit` odd cluster checks; the rest are counted (report.md has them)."""
    code = doc.get("exit_code", 3)
    nodes = node_map(doc)
    counts = doc.get("counts") or {}
    lines = ["", f"gpucheck cluster: {len(nodes)} node(s): {counts_text(counts.get('nodes'))}; "
                 f"cluster checks: {counts_text(counts.get('cluster'))} ({figure(doc.get('duration_s', 0), 's')})"]
    bad = [(h, n) for h, n in nodes.items() if status_of(n) not in ("pass", "skip")]
    for host, node in bad[:limit]:
        reason = node.get("reason", "") if isinstance(node, dict) else node
        lines.append(f"  {status_of(node).upper():<7} {host}: {one_line(reason)}")
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more node(s) (report.md)")
    odd = [r for r in doc.get("cluster") or () if status_of(r) not in ("pass", "skip")]
    for result in odd[:limit]:
        lines.append(f"  {status_of(result).upper():<7} {result.get('check')}: {one_line(result.get('reason', ''))}")
    if len(odd) > limit:
        lines.append(f"  ... and {len(odd) - limit} more cluster check(s) (report.md)")
    burnin = burnin_section(doc)
    if burnin:
        lines.append(burnin_line(burnin, limit))
    lines += [one_line("scaling: " + line) for line in scaling_summary(scaling_points(doc))[:limit]]
    if training_summary(doc):
        lines.append(one_line(training_summary(doc)))
    drained = [str(d.get("node")) for d in doc.get("drain") or () if isinstance(d, dict)]
    if drained:
        shown = ", ".join(drained[:20]) + (f" and {len(drained) - 20} more" if len(drained) > 20 else "")
        lines.append(f"drain ({len(drained)}): {shown}  -> {Path(report_dir) / 'drain.txt'}")
    if would := would_drain_line(doc):
        lines.append(would)
    lines += [f"report: {report_dir}/", f"verdict: {verdict(code)} — exit {code}"]
    return "\n".join(lines) + "\n"
