"""The node report as the terminal table: one row per check, what to do, the counts and exit code. A
result with per-GPU figures (the active GPU checks) has its figures on indented lines under its row."""

from __future__ import annotations

from ..model import Report, Result, Status
from . import gpu_figures
from .values import show

STATUS_WORD = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip",
               Status.ERROR: "ERROR"}
BELOW = "below"  # the cell of a value shown on the lines under the row
INDENT = "    "


def cells(r: Result) -> tuple[str, str, str, str, str]:
    gpus = gpu_figures.per_gpu(r.measured)
    if gpus is None:
        return STATUS_WORD[r.status], r.check, show(r.measured), show(r.expected), r.reason
    expected = BELOW if gpu_figures.expected_per_figure(r.expected) else show(r.expected)
    return STATUS_WORD[r.status], r.check, f"{len(gpus)} GPU(s), {BELOW}", expected, r.reason


def render_text(report: Report) -> str:
    rows = [cells(r) for r in report.results]
    headers = ("STATUS", "CHECK", "MEASURED", "EXPECTED", "REASON")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers[:4])]
    lines = [f"gpucheck node on {report.host} — profile {report.profile}", ""]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*headers))
    for r, row in zip(report.results, rows, strict=True):
        lines.append(fmt.format(*row))
        lines += [INDENT + line for line in gpu_figures.lines(r.measured, r.expected)]
    fixes = [r for r in report.results if r.status in (Status.FAIL, Status.ERROR, Status.WARN) and r.remediation]
    if fixes:
        lines += ["", "What to do:"]
        lines += [f"  {r.check}: {r.remediation}" for r in fixes]
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines += ["", f"{summary} in {report.duration_s:.2f} s — exit code {report.exit_code}"]
    return "\n".join(lines) + "\n"
