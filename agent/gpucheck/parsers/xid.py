"""NVIDIA Xid events and "fallen off the bus" reports in kernel log text.

Accepts dmesg (with or without timestamps, -T), journalctl -k / syslog, and raw /dev/kmsg
records. Continuation lines (indented, no timestamp of their own) are joined to the line
they continue, so a report wrapped over several lines is read as one. A kernel log can hold stray
bytes (NUL, control characters, bytes that are not UTF-8): they are dropped and counted in
`stray_bytes`, and every line around them is read; one NUL must not hide an Xid.

Each event (and each "fallen off the bus" report, in `fallen_reports`) carries `uptime_s`, its time in
seconds since boot, where the line says it: dmesg's `[ 1234.567890]` stamp (journalctl -o short-monotonic
writes the same) or a /dev/kmsg record's microseconds; None for wall-clock stamps (dmesg -T, syslog, ISO 8601 as
`[2026-04-22T21:26:20.599Z]`, which `timestamp` keeps) and lines without a stamp. `last_uptime_s` is the latest
such stamp in the whole text: how far it reaches. `suspended_s` is the time the kernel says it spent suspended
("Timekeeping suspended for N seconds"): /proc/uptime counts it, the since-boot stamps do not.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ._common import ParseError, drop_stray_bytes, guard, text_lines

KIND = "xid"

# Severity per Xid code, from NVIDIA's Xid catalog: docs.nvidia.com/deploy/xid-errors/
# ("Analyzing Xid Errors with the Xid Catalog": resolution bucket per code; "Xid Error Listing"),
# and the GPU memory error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/)
# for 48/63/64/94/95/160/171/172.
#   fatal: the catalog's immediate action is a GPU reset, node reboot or RMA -> drain the node.
#   warn:  worth attention (can be hardware, or needs a reset at the next convenient time).
#   info:  usually caused by the application, or informational (restart the app, nothing else).
# Codes not listed are "warn": unknown is never silently fine. Severity comes from the code, never from words
# elsewhere in the line (a process name is the user's choice: `name=fatal`). The one exception is NVIDIA's own:
# the Blackwell NVLink Xids 144-150 say Fatal/Nonfatal right after their unit name, and that word decides.
SEVERITY: dict[int, str] = {
    8: "warn",     # GPU stopped processing (timeout); RESTART_APP, contact support if it repeats
    13: "info",    # Graphics Engine Exception: usually an application fault (out-of-bounds, illegal instruction)
    31: "info",    # GPU memory page fault (MMU fault): usually an application illegal address access
    32: "warn",    # Invalid or corrupted push buffer stream: DMA/PCIe quality
    38: "warn",    # Driver firmware error
    43: "info",    # GPU stopped processing: user application fault, GPU stays healthy
    44: "fatal",   # Graphics Engine fault during context switch: reset
    45: "info",    # Preemptive cleanup, due to previous errors (Ctrl-C, kill, or another Xid)
    46: "fatal",   # GPU stopped processing: reset, then service if it repeats
    48: "fatal",   # Double Bit ECC error (uncorrectable): reset the GPU
    56: "warn",    # Display engine error
    57: "warn",    # Error programming video memory interface
    58: "warn",    # Unstable video memory interface detected
    61: "fatal",   # Internal micro-controller breakpoint/warning: reset
    62: "fatal",   # Internal micro-controller halt: reset
    63: "warn",    # ECC page retirement / row remapping recorded: reset at a convenient time to activate
    64: "fatal",   # ECC page retirement / row remapping failure: drain, RMA if it persists
    68: "warn",    # NVDEC0 exception
    69: "info",    # Graphics Engine class error: usually application
    74: "fatal",   # NVLink error: reset (the peer at the other end of the link may be the cause)
    79: "fatal",   # GPU has fallen off the bus: reboot, check power/PCIe/hardware
    92: "warn",    # High single-bit ECC error rate
    94: "warn",    # Contained ECC error: only the affected application dies; row remap pending
    95: "fatal",   # Uncontained ECC error: reset
    109: "warn",   # Context switch timeout
    110: "fatal",  # Security fault error
    119: "fatal",  # GSP RPC timeout: reset/reboot
    120: "fatal",  # GSP error: reset/reboot
    121: "warn",   # C2C link corrected errors: reset to retrain when convenient
    122: "warn",   # SPI PMU RPC read failure
    123: "warn",   # SPI PMU RPC write failure
    124: "warn",   # SPI PMU RPC erase failure
    125: "warn",   # Inforom FS failure
    137: "info",   # NVLink FLA privilege error: usually application
    140: "fatal",  # Unrecovered ECC error
    143: "fatal",  # GPU initialization failure
    144: "warn",   # NVLink (Blackwell) SAW/MVB error: the line's Fatal/Nonfatal decides
    145: "warn",   # NVLink RLW error: the line's Fatal/Nonfatal decides
    146: "warn",   # NVLink TLW error: the line's Fatal/Nonfatal decides
    147: "warn",   # NVLink TREX error: the line's Fatal/Nonfatal decides
    148: "warn",   # NVLink NVLPW_CTRL error: the line's Fatal/Nonfatal decides
    149: "warn",   # NVLink NETIR error: the line's Fatal/Nonfatal decides
    150: "warn",   # NVLink MSE error: the line's Fatal/Nonfatal decides
    154: "fatal",   # GPU recovery action changed (reset / reboot required); "(None)" is info, below
    155: "fatal",  # NVLink link down
    156: "warn",   # Resource retirement event
    157: "fatal",  # Resource retirement failure
    158: "fatal",  # GPU fatal timeout
    159: "fatal",  # CHI non-data error
    160: "warn",   # GPU memory marked for repair (channel/row repair pending reset)
    171: "warn",   # Uncorrectable DRAM error detail: the accompanying 48/94/95 decides
    172: "warn",   # Uncorrectable SRAM error detail: the accompanying 48/94/95 decides
}
_RANK = {"info": 0, "warn": 1, "fatal": 2}

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)[^)]{0,200}\):\s*"
    r"(?P<xid>\d+),\s*(?P<message>.*)$"  # message: rstrip in code (a lazy `.*?\s*$` is quadratic in blanks)
)
_PID = re.compile(r"\bpid=(?P<pid>'?[^,\s]*)")
_PROCESS = re.compile(r"\bname=(?P<name>[^,\s]+)")
WORD_SEVERITY_CODES = range(144, 151)
_WORD_SEVERITY = re.compile(r"^[A-Z][A-Z0-9_]* (?P<word>Nonfatal|Non-fatal|Fatal)\b")  # "NETIR_LINK_EVT Fatal XC0"
_RECOVERED = re.compile(r"to 0x0 \(None\)")  # Xid 154 going back to "no action needed"
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
_PCI_ADDRESS = re.compile(r"(?<![0-9A-Fa-f:])(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?")

# How a line of kernel log starts, to tell a kernel log (even one with no Xid) from other text.
_DMESG_STAMP = re.compile(r"\[\s*(?P<ts>\d+\.\d+|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
                          r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]")
_SYSLOG_STAMP = re.compile(
    r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*)(?: \S+)? kernel:"
)
_KMSG = re.compile(r"^\d+,\d+,(?P<ts>\d+),[^;]*;")
# dmesg -x (and log shippers after it): "kern  :warn  : " or "kern: warning: " before the stamp
_DECODED = re.compile(r"^kern\s*:\s*(?:emerg|alert|crit|err|warn|warning|notice|info|debug)\s*:")
# Seconds since boot: dmesg's (and journalctl -o short-monotonic's) "[ 1234.567890]"; digits bounded so that
# no stamp reads as infinity.
_UPTIME = re.compile(r"\[\s*(?P<s>\d{1,12}\.\d{1,9})\]")
MAX_KMSG_DIGITS = 18  # a /dev/kmsg stamp is in microseconds: 18 digits are 31,000 years
_JOURNAL_NOTE = re.compile(r"^-- (?:Logs begin|Journal begins|No entries|Boot )")
# kernel/time/timekeeping_debug.c: "Timekeeping suspended for 90000.123 seconds" (older kernels: "Suspended for")
_SUSPENDED = re.compile(r"\b(?:Timekeeping suspended|Suspended) for (?P<s>\d{1,12}(?:\.\d{1,9})?) seconds")


def counts_by_code(events: list[dict[str, Any]]) -> dict[str, int]:
    """Events per Xid code, in code order: {"45": 8, "62": 1} (the parser's `counts`; gpu.xid's per window)."""
    counts = Counter(str(e["xid"]) for e in events)
    return {code: counts[code] for code in sorted(counts, key=int)}


def _logical_lines(lines: list[str]) -> list[str]:
    """Join indented continuation lines (no timestamp of their own) to the line they continue."""
    joined: list[str] = []
    for line in lines:
        if joined and line[:1].isspace() and line.strip() and not _DMESG_STAMP.match(line.strip()):
            joined[-1] = f"{joined[-1]} {line.strip()}"
        else:
            joined.append(line.rstrip())
    return joined


def _timestamp(prefix: str) -> str | None:
    """The stamp written before "NVRM:": wall-clock (syslog/journal) first, else dmesg's, else kmsg's."""
    for pattern in (_SYSLOG_STAMP, _DMESG_STAMP, _KMSG):
        if match := pattern.search(prefix):
            return match["ts"]
    return None


def _uptime(prefix: str) -> float | None:
    """Seconds since boot from the stamp written before the message, if it is one (not a wall clock)."""
    if match := _KMSG.match(prefix):
        return int(match["ts"]) / 1e6 if len(match["ts"]) <= MAX_KMSG_DIGITS else None
    if match := _UPTIME.search(prefix):
        return float(match["s"])
    return None


def _line_uptime(line: str) -> float | None:
    """The since-boot stamp a line starts with (dmesg, journalctl -o short-monotonic, kmsg), else None."""
    if match := _UPTIME.match(line.lstrip()):
        return float(match["s"])
    return _uptime(line) if _KMSG.match(line) else None


def _severity(xid: int, message: str) -> str:
    if xid in WORD_SEVERITY_CODES and (word := _WORD_SEVERITY.match(message)):
        return "fatal" if word["word"] == "Fatal" else "warn"
    if xid == 154 and _RECOVERED.search(message):
        return "info"
    return SEVERITY.get(xid, "warn")


def _event(line: str, match: re.Match) -> dict:
    message = match["message"].rstrip()
    pid = _PID.search(message)
    process = _PROCESS.search(message)
    pid_text = pid["pid"] if pid else ""
    xid = int(match["xid"])
    return {
        "xid": xid,
        "pci": match["pci"].lower(),
        "pid": int(pid_text) if pid_text.isdigit() else None,
        "process": process["name"] if process and process["name"] != "<unknown>" else None,
        "message": message,
        "severity": _severity(xid, message),
        "timestamp": _timestamp(line[: match.start()]),
        "uptime_s": _uptime(line[: match.start()]),
    }


def _is_kernel_log(line: str) -> bool:
    return bool("NVRM:" in line or _DMESG_STAMP.match(line.lstrip()) or _SYSLOG_STAMP.match(line)
                or _DECODED.match(line) or _KMSG.match(line) or _JOURNAL_NOTE.match(line))


@guard(KIND)
def parse(text: str) -> dict:
    text, stray = drop_stray_bytes(text)
    lines = _logical_lines(text_lines(text, KIND))
    if not any(_is_kernel_log(line) for line in lines):
        raise ParseError(f"not {KIND} input: no kernel log lines (dmesg, journalctl, syslog or kmsg)")
    events, reports = [], []
    stamps: list[float] = []
    suspended = 0.0
    for line in lines:
        if match := _SUSPENDED.search(line):
            suspended += float(match["s"])
        match = _XID.search(line)
        if match:
            events.append(_event(line, match))
        if _FALLEN.search(line):
            # The GPU's address: the Xid's own, else the first PCI address on the (joined) line.
            address = match or _PCI_ADDRESS.search(line)
            if address:
                prefix = line[: line.find("NVRM:")] if "NVRM:" in line else line[: address.start()]
                reports.append({"pci": address["pci"].lower().split(".")[0], "timestamp": _timestamp(prefix),
                                "uptime_s": _uptime(prefix)})
        if (stamp := _line_uptime(line)) is not None:
            stamps.append(stamp)
    stamps += [e["uptime_s"] for e in [*events, *reports] if e["uptime_s"] is not None]
    fallen = {r["pci"] for r in reports}
    severities = [e["severity"] for e in events] + (["fatal"] if fallen else [])
    return {
        "events": events,
        "counts": counts_by_code(events),
        "fallen_off_bus": sorted(fallen),
        "fallen_reports": reports,
        "last_uptime_s": max(stamps, default=None),
        "worst_severity": max(severities, key=_RANK.__getitem__, default=None),
        "suspended_s": suspended,
        "stray_bytes": stray,
    }
