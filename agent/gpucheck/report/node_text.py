"""The node report as the terminal table: one row per check, what to do, the counts and exit code."""

from __future__ import annotations

from ..model import Report, Status
from .values import show

STATUS_WORD = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip",
               Status.ERROR: "ERROR"}


def render_text(report: Report) -> str:
    rows = [(STATUS_WORD[r.status], r.check, show(r.measured), show(r.expected), r.reason) for r in report.results]
    headers = ("STATUS", "CHECK", "MEASURED", "EXPECTED", "REASON")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers[:4])]
    lines = [f"gpucheck node on {report.host} — profile {report.profile}", ""]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*headers))
    lines += [fmt.format(*row) for row in rows]
    fixes = [r for r in report.results if r.status in (Status.FAIL, Status.ERROR, Status.WARN) and r.remediation]
    if fixes:
        lines += ["", "What to do:"]
        lines += [f"  {r.check}: {r.remediation}" for r in fixes]
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines += ["", f"{summary} in {report.duration_s:.2f} s — exit code {report.exit_code}"]
    return "\n".join(lines) + "\n"
