"""Xid errors and "fallen off the bus" reports in the kernel log, graded by NVIDIA's severity."""

from __future__ import annotations

from typing import Any

from ..model import Result, Status
from ..parsers import ParseError, parse
from ..process import run
from ..profiles import Profile
from . import Check, CollectError, Context

EVIDENCE_LINES = 20  # of an output that could not be read, kept as the evidence


def collect(ctx: Context) -> dict[str, Any]:
    """The kernel ring buffer; journalctl when dmesg is restricted (kernel.dmesg_restrict) or its output
    cannot be read. An empty log has no Xids; an output the xid parser cannot read is never taken for
    "no Xids": it is a harness error, with the output as evidence."""
    attempts, unreadable = [], []
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        done = run(argv, ctx.timeout)
        if not done.ok:
            attempts.append(done.describe_failure())
            continue
        parsed: dict[str, Any] = {"events": [], "fallen_off_bus": [], "counts": {}}  # an empty ring buffer
        if done.stdout.strip():
            try:
                parsed = parse("xid", done.stdout)
            except ParseError as exc:
                attempts.append(f"{argv[0]}: output not readable as a kernel log: {exc}")
                unreadable.append(_head(argv, done.stdout))
                continue
        return {"source": argv[0], **parsed,
                "evidence": "\n".join(line for line in done.stdout.splitlines() if "NVRM" in line)}
    reason = "cannot read the kernel log: " + "; ".join(attempts)
    if unreadable:
        raise CollectError(reason, remediation="run dmesg by hand and look at what it prints",
                           evidence="\n".join(unreadable), harness=True)
    raise CollectError(reason, remediation="run as root, or allow it (sysctl kernel.dmesg_restrict=0)", harness=True)


def _head(argv: list[str], output: str) -> str:
    """The command and the first lines of its output, control characters written as escapes ("\\x1b")."""
    lines = ["".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in line)
             for line in output.splitlines()[:EVIDENCE_LINES]]
    return "\n".join([f"$ {' '.join(argv)}", *lines])


def xid(f: dict[str, Any], p: Profile) -> Result:
    log = f["kernel_log"]
    events, fallen = log.get("events", []), log.get("fallen_off_bus", [])
    by_severity: dict[str, list[dict[str, Any]]] = {"fatal": [], "warn": [], "info": []}
    for event in events:
        by_severity.setdefault(event.get("severity") or "warn", []).append(event)

    def describe(items: list[dict[str, Any]]) -> str:
        seen: dict[tuple[int, str], int] = {}
        for e in items:
            key = (e["xid"], e.get("pci") or "?")
            seen[key] = seen.get(key, 0) + 1
        return ", ".join(f"Xid {x} on {pci}" + (f" x{n}" if n > 1 else "") for (x, pci), n in seen.items())

    measured = {"counts": log.get("counts", {}), "fallen_off_bus": fallen}
    expected = "no fatal Xid, no GPU fallen off the bus"
    if fallen or by_severity["fatal"]:
        parts = [f"GPU {pci} has fallen off the bus" for pci in fallen]
        if by_severity["fatal"]:
            parts.append("fatal: " + describe(by_severity["fatal"]))
        return Result("gpu.xid", Status.FAIL, measured, expected, "; ".join(parts),
                      "drain the node; reset the GPU or reboot, and RMA if it recurs "
                      "(see NVIDIA's Xid catalog for the code)", log.get("evidence", ""))
    if by_severity["warn"]:
        return Result("gpu.xid", Status.WARN, measured, expected, "needs attention: " + describe(by_severity["warn"]),
                      "look up the Xid in NVIDIA's catalog; watch for recurrence", log.get("evidence", ""))
    reason = "no Xid errors in the kernel log"
    if by_severity["info"]:
        reason = "only application-level Xids: " + describe(by_severity["info"])
    return Result("gpu.xid", Status.PASS, measured, expected, reason, evidence=log.get("evidence", ""))


CHECKS = [Check("gpu.xid", ("kernel_log",), xid, "no fatal Xid errors or fallen-off-the-bus reports")]
COLLECTORS = {"kernel_log": collect}
