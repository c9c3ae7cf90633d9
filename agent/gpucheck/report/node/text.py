"""The node report as the terminal table: one row per check, what to do, the counts and exit code. A
result with per-GPU figures (the active GPU checks) has its figures on indented lines under its row, and so has a
measured or expected value too long for its column: whole, never cut. Each action in "What to do" is said once."""

from __future__ import annotations

from ...model import Report, Result, Status
from .. import gpu_figures
from ..values import listed, render, unit_of_check
from ..views import for_person

STATUS_WORD = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip",
               Status.ERROR: "ERROR"}
BELOW = "below"  # the cell of a value shown on the lines under the row
INDENT = "    "
COLUMN = 48  # the widest MEASURED or EXPECTED cell: the table fits a 160-column terminal with a short reason


def cell(value: object, name: str, unit: str = "") -> tuple[str, list[str]]:
    """The value in its cell, or BELOW and a line `name: value` for the lines under the row."""
    text = render(value, unit)
    return (text, []) if len(text) <= COLUMN else (BELOW, [f"{name}: {text}"])


def cells(r: Result) -> tuple[tuple[str, str, str, str, str], list[str]]:
    """The row's cells and the lines under it."""
    gpus = gpu_figures.per_gpu(r.measured)
    if gpus is None:
        (measured, below) = cell(for_person(r.check, r.measured), "measured", unit_of_check(r.check))
        expected, more = cell(r.expected, "expected")
        return (STATUS_WORD[r.status], r.check, measured, expected, r.reason), below + more
    expected, below = (BELOW, []) if gpu_figures.expected_per_figure(r.expected) else cell(r.expected, "expected")
    row = (STATUS_WORD[r.status], r.check, f"{len(gpus)} GPU(s), {BELOW}", expected, r.reason)
    return row, below + gpu_figures.lines(r.measured, r.expected)


def what_to_do(results: list[Result]) -> list[str]:
    """Each distinct action once, after the checks that call for it (17 checks that need the driver: one line)."""
    checks: dict[str, list[str]] = {}
    for r in results:
        if r.status in (Status.FAIL, Status.ERROR, Status.WARN) and r.remediation:
            checks.setdefault(r.remediation, []).append(r.check)
    if not checks:
        return []
    return ["", "What to do:"] + [f"  {listed(names)}: {action}" for action, names in checks.items()]


def render_text(report: Report) -> str:
    rows, under = zip(*(cells(r) for r in report.results), strict=True) if report.results else ((), ())
    headers = ("STATUS", "CHECK", "MEASURED", "EXPECTED", "REASON")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers[:4])]
    lines = [f"gpucheck node on {report.host} — profile {report.profile}", ""]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*headers))
    for row, below in zip(rows, under, strict=True):
        lines.append(fmt.format(*row))
        lines += [INDENT + line for line in below]
    lines += what_to_do(report.results)
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines += ["", f"{summary} in {report.duration_s:.2f} s — exit code {report.exit_code}"]
    return "\n".join(lines) + "\n"
