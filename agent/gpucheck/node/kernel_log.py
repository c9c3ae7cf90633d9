"""Xid errors and "fallen off the bus" reports in the kernel log, graded by NVIDIA's severity.

The Xid window: only the events logged since the later of the last clean run of this boot (a run whose gpu.xid
passed: the state file remembers how far it read the log) and the look-back (--xid-lookback, 24 h) are judged,
so a repaired GPU stops failing the node without a reboot and a storm of old lines cannot hide which are new.
Older events are not judged but shown: counted in `measured`, named in the reason, kept in the evidence. An
event without a time since boot (a log without stamps) is always judged. `--xid-since boot` judges the whole
boot. The stamps are the kernel's own ([ 1234.567890], seconds since boot), compared with /proc/uptime.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

from ..files import write_atomically
from ..model import Result, Status
from ..parsers import ParseError, parse
from ..parsers.xid import counts_by_code
from ..process import run
from ..profiles import Profile
from . import Check, CollectError, Context
from .per_gpu import NODE_EVIDENCE

EVIDENCE_LINES = 20  # of an output that could not be read, kept as the evidence
# The look-back when no clean run of this boot is remembered: a node whose Xids are all older than a day passes
# again (a GPU reset or repair without a reboot), and one logged within the day still counts. A health check
# run every few minutes (Slurm's HealthCheckInterval) remembers a clean run long before that.
XID_LOOKBACK_S = 24 * 3600.0
STATE_DIR = Path("/var/lib/gpucheck")  # the gpucheck_agent role's gpucheck_agent_state_dir
STATE_FILE = "xid-window.json"  # {"boot_id", "read_to_s", "source"} of the last run whose gpu.xid passed
MAX_STATE_B = 4096
OLDER_SHOWN = 3  # kinds of older event named in the reason; the rest are counted in `measured`


def state_dir() -> Path:
    """/var/lib/gpucheck, or the directory GPUCHECK_STATE_DIR names (tests, and users who are not root)."""
    return Path(os.environ.get("GPUCHECK_STATE_DIR") or STATE_DIR)


def proc_root() -> Path:
    """/proc, or a fake tree named by GPUCHECK_PROC_ROOT (only tests and the lab set it): uptime, boot id."""
    return Path(os.environ.get("GPUCHECK_PROC_ROOT") or "/proc")


def collect(ctx: Context) -> dict[str, Any]:
    """The kernel ring buffer; journalctl when dmesg is restricted (kernel.dmesg_restrict) or its output
    cannot be read. An empty log has no Xids; an output the xid parser cannot read is never taken for
    "no Xids": it is a harness error, with the output as evidence."""
    attempts, unreadable = [], []
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"]):
        done = run(argv, ctx.timeout)
        if not done.ok:
            attempts.append(done.describe_failure())
            continue
        parsed: dict[str, Any] = {"events": [], "fallen_off_bus": [], "counts": {}}  # an empty ring buffer
        if argv[0] == "journalctl" and not done.stdout.strip():
            # the journal always holds this boot's kernel messages: nothing at all means not allowed to read them
            attempts.append("journalctl -k printed nothing (exit 0): this user may not read the journal's kernel "
                            "messages (not in group adm or systemd-journal?); no log is not a clean log")
            continue
        if done.stdout.strip():
            try:
                parsed = parse("xid", done.stdout)
            except ParseError as exc:
                attempts.append(f"{argv[0]}: output not readable as a kernel log: {exc}")
                unreadable.append(_head(argv, done.stdout))
                continue
        window = read_window(argv[0], _lookback(ctx), parsed.get("suspended_s") or 0.0)
        return {"source": argv[0], **parsed, "window": window,
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


def _lookback(ctx: Context) -> float | None:
    """The look-back in seconds; None: --xid-since boot (every Xid of this boot, no clean run asked)."""
    if ctx.xid_since_boot:
        return None
    return ctx.xid_lookback_s or XID_LOOKBACK_S


def clock_suspended_s() -> float:
    """The time this machine spent suspended since boot, by its clocks: CLOCK_BOOTTIME (which /proc/uptime reads)
    counts it, CLOCK_MONOTONIC (the kernel log's stamps) does not."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return 0.0
    return max(0.0, time.clock_gettime(boottime) - time.clock_gettime(time.CLOCK_MONOTONIC))


def read_window(source: str, lookback_s: float | None, logged_suspended_s: float = 0.0) -> dict[str, Any]:
    """Where the judged events begin, in seconds since boot (`start_s`; None: at boot) and how to say it
    (`since`), with what remembering a clean run needs (`boot_id`, `source`, `default_start_s`: where the default
    look-back would begin). What cannot be read is a note, never an error, and only ever widens the window.

    The log's stamps leave out the time spent suspended, /proc/uptime does not: "now" on the log's clock is the
    uptime less that time (the larger of what the log says and what the clocks say), so no event is judged older
    than it is."""
    notes: list[str] = []
    boot_id, uptime = _boot_id(notes), _uptime(notes)
    suspended = max(logged_suspended_s, clock_suspended_s())
    now = None if uptime is None else max(0.0, uptime - suspended)
    if now is not None and suspended >= 1:
        notes.append(f"{_span(round(suspended))} spent suspended (in /proc/uptime, not in the log's stamps) is not "
                     "counted in the events' age")
    window: dict[str, Any] = {"since": "since boot", "start_s": None, "boot_id": boot_id, "source": source,
                              "uptime_s": uptime, "default_start_s": None, "notes": notes}
    if lookback_s is None:
        window["since"] = "since boot (--xid-since boot)"
        return window
    clean = _last_clean_run(boot_id, source, uptime, notes)
    starts = [(clean, f"since the last clean run ({clean:.0f} s after boot)")] if clean is not None else []
    if now is not None and now > lookback_s:
        starts.append((now - lookback_s, f"in the last {_span(lookback_s)} (since {now - lookback_s:.0f} s "
                                         f"after boot)"))
    if starts:
        window["start_s"], window["since"] = max(starts)
    defaults = [clean] if clean is not None else []
    if now is not None and now > XID_LOOKBACK_S:
        defaults.append(now - XID_LOOKBACK_S)
    window["default_start_s"] = max(defaults, default=None)
    return window


def _span(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and (seconds * 10 / size).is_integer():
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _read_small(path: Path) -> str:
    """A small text file (a state file, a /proc entry); refuses what is not a regular file (a FIFO would
    block) and what is larger than any of them is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        data = os.read(fd, MAX_STATE_B + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_STATE_B:
        raise OSError(f"larger than {MAX_STATE_B} bytes")
    return data.decode("utf-8")


def _why(exc: Exception) -> str:
    """Why a file could not be read or written, in a few words ("No such file or directory")."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def boot_id_path() -> Path:
    return proc_root() / "sys" / "kernel" / "random" / "boot_id"


def read_boot_id() -> str | None:
    """The kernel's boot id (drawn at each boot), or None when the file holds none. Raises OSError or
    UnicodeDecodeError when it cannot be read. The Xid window and the node's identity (identity.py) both use it."""
    text = _read_small(boot_id_path()).strip()
    return text if text and len(text) <= 64 and text.isprintable() else None


def _boot_id(notes: list[str]) -> str | None:
    try:
        found = read_boot_id()
    except (OSError, UnicodeDecodeError) as exc:
        notes.append(f"no clean run can be remembered: cannot read {boot_id_path()} ({_why(exc)})")
        return None
    if found is None:
        notes.append(f"no clean run can be remembered: {boot_id_path()} holds no boot id")
    return found


def _uptime(notes: list[str]) -> float | None:
    path = proc_root() / "uptime"
    try:
        value = float(_read_small(path).split()[0])
    except (OSError, UnicodeDecodeError) as exc:
        notes.append(f"the look-back cannot be applied: cannot read {path} ({_why(exc)})")
        return None
    except (ValueError, IndexError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        notes.append(f"the look-back cannot be applied: {path} does not say the uptime")
        return None
    return value


def _last_clean_run(boot_id: str | None, source: str, uptime: float | None, notes: list[str]) -> float | None:
    """How far the last clean run of this boot read the log (seconds since boot), from the state file; None
    when there is none, it is of another boot (all of this boot is new) or read another log (other stamps)."""
    path = state_dir() / STATE_FILE
    try:
        state = _state(_read_small(path))
    except FileNotFoundError:
        return None  # no clean run remembered yet
    except (OSError, UnicodeDecodeError) as exc:
        notes.append(f"the last clean run is not known: cannot read {path} ({_why(exc)})")
        return None
    if state is None:
        notes.append(f"the last clean run is not known: {path} is not an Xid state file (ignored)")
        return None
    if boot_id is None or state["boot_id"] != boot_id or state["source"] != source:
        return None
    if uptime is not None and state["read_to_s"] > uptime:
        notes.append(f"the last clean run is not known: {path} says {state['read_to_s']:.0f} s after boot, "
                     f"later than now ({uptime:.0f} s; ignored)")
        return None
    return state["read_to_s"]


def _state(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    boot_id, read_to, source = data.get("boot_id"), data.get("read_to_s"), data.get("source")
    if not (isinstance(boot_id, str) and boot_id and isinstance(source, str)):
        return None
    if isinstance(read_to, bool) or not isinstance(read_to, int | float) or not math.isfinite(read_to) or read_to < 0:
        return None
    return {"boot_id": boot_id, "read_to_s": float(read_to), "source": source}


def remember_clean_run(results: list[Result]) -> str | None:
    """After a run whose gpu.xid passed: remember (atomically) how far this boot's kernel log was read, so the
    next run judges only what comes after. Returns a one-line note when that could not be written (the next
    window is then the look-back); None otherwise. Never raises: a state file never costs a run."""
    result = next((r for r in results if r.check == "gpu.xid"), None)
    if result is None or result.status != Status.PASS or not isinstance(result.measured, dict):
        return None
    window = result.measured.get("window") or {}
    if not window.get("boot_id") or window.get("read_to_s") is None:
        return None
    start, default = window.get("start_s"), window.get("default_start_s")
    if start is not None and (default is None or start > default):
        return None  # a shorter look-back than the default passed: what it did not judge is not clean
    path = state_dir() / STATE_FILE
    # never back before where this run's window began (a log cut short since, `dmesg -C`)
    reach = max(window["read_to_s"], window.get("start_s") or 0.0)
    state = {"boot_id": window["boot_id"], "read_to_s": reach, "source": window.get("source")}
    try:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the first run on a node makes it, private
        except FileExistsError:  # a file where the directory must be
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
        write_atomically(path, json.dumps(state) + "\n")
    except OSError as exc:
        return f"this clean run is not remembered: cannot write {path} ({_why(exc)}); the Xid window falls back to " \
               "the look-back"
    return None


def _split(items: list[dict[str, Any]], start: float | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(judged, older): older are those stamped at or before the window's start; no stamp: judged."""
    judged: list[dict[str, Any]] = []
    older: list[dict[str, Any]] = []
    for e in items:
        old = start is not None and e.get("uptime_s") is not None and e["uptime_s"] <= start
        (older if old else judged).append(e)
    return judged, older


def _describe(items: list[dict[str, Any]]) -> str:
    seen: dict[tuple[int, str], int] = {}
    for e in items:
        key = (e["xid"], e.get("pci") or "?")
        seen[key] = seen.get(key, 0) + 1
    return ", ".join(f"Xid {x} on {pci}" + (f" x{n}" if n > 1 else "") for (x, pci), n in seen.items())


def _describe_older(events: list[dict[str, Any]], fallen: list[dict[str, Any]]) -> str:
    """The older events by kind, each with its (last) time since boot; the first few kinds."""
    kinds: dict[str, list[float]] = {}
    for e in events:
        kinds.setdefault(f"Xid {e['xid']} on {e.get('pci') or '?'}", []).append(e["uptime_s"])
    for r in fallen:
        kinds.setdefault(f"GPU {r['pci']} fallen off the bus", []).append(r["uptime_s"])
    shown = [f"{kind} at {times[0]:.0f} s after boot" if len(times) == 1 else
             f"{kind} x{len(times)} (the last at {max(times):.0f} s after boot)"
             for kind, times in list(kinds.items())[:OLDER_SHOWN]]
    more = len(kinds) - OLDER_SHOWN
    return ", ".join(shown) + (f", and {more} more kind{'s' if more > 1 else ''}" if more > 0 else "")


def xid(f: dict[str, Any], p: Profile) -> Result:
    """The events in the window, graded; `measured` counts those (`counts`, `fallen_off_bus`), says the window
    (`window`) and counts the older ones apart (`older`)."""
    log = f["kernel_log"]
    window = log.get("window") or {}
    start = window.get("start_s")
    events, older = _split(log.get("events", []), start)
    reports = log.get("fallen_reports")
    if reports is None:  # facts that do not say when: every GPU reported is judged
        reports = [{"pci": pci, "uptime_s": None} for pci in log.get("fallen_off_bus", [])]
    new_reports, old_reports = _split(reports, start)
    fallen = sorted({r["pci"] for r in new_reports})
    by_severity: dict[str, list[dict[str, Any]]] = {"fatal": [], "warn": [], "info": []}
    for event in events:
        by_severity.setdefault(event.get("severity") or "warn", []).append(event)

    measured: dict[str, Any] = {
        "counts": counts_by_code(events), "fallen_off_bus": fallen,
        "window": {"since": window.get("since", "since boot"), "start_s": start, "boot_id": window.get("boot_id"),
                   "source": log.get("source"), "uptime_s": window.get("uptime_s"),
                   "default_start_s": window.get("default_start_s"),
                   "read_to_s": log.get("last_uptime_s"), "notes": window.get("notes", [])}}
    suffix = ""
    if older or old_reports:
        on_xid_lines = {(e.get("pci"), e.get("uptime_s")) for e in older}  # an Xid 79 line is not two events
        old_plain = [r for r in old_reports if (r["pci"], r.get("uptime_s")) not in on_xid_lines]
        n = len(older) + len(old_plain)
        measured["older"] = {"events": n, "counts": counts_by_code(older),
                             "fallen_off_bus": sorted({r["pci"] for r in old_reports})}
        suffix += (f"; {n} older event{'s' if n > 1 else ''} before the window, not judged: "
                   f"{_describe_older(older, old_plain)}")
    unstamped_xids = {e.get("pci") for e in events if e.get("uptime_s") is None}
    unstamped = len([e for e in events if e.get("uptime_s") is None]) + len(
        [r for r in new_reports if r.get("uptime_s") is None and r["pci"] not in unstamped_xids])
    if start is not None and unstamped:
        measured["unstamped"] = unstamped
        suffix += (f"; {unstamped} without a time since boot, judged whatever their age (the window cannot be "
                   f"applied to them)")
    suffix += "".join(f"; {note}" for note in window.get("notes", []))

    expected = "no fatal Xid, no GPU fallen off the bus"
    if fallen or by_severity["fatal"]:
        parts = [f"GPU {pci} has fallen off the bus" for pci in fallen]
        if by_severity["fatal"]:
            parts.append("fatal: " + _describe(by_severity["fatal"]))
        return Result("gpu.xid", Status.FAIL, measured, expected, "; ".join(parts) + suffix,
                      f"{NODE_EVIDENCE}; drain the node; reset the GPU or reboot, and RMA if it recurs "
                      "(see NVIDIA's Xid catalog for the code)", log.get("evidence", ""))
    if by_severity["warn"]:
        return Result("gpu.xid", Status.WARN, measured, expected,
                      "needs attention: " + _describe(by_severity["warn"]) + suffix,
                      "look up the Xid in NVIDIA's catalog; watch for recurrence", log.get("evidence", ""))
    reason = "no Xid errors in the kernel log" if start is None else f"no Xid errors {window.get('since')}"
    if by_severity["info"]:
        reason = "only application-level Xids: " + _describe(by_severity["info"])
    return Result("gpu.xid", Status.PASS, measured, expected, reason + suffix, evidence=log.get("evidence", ""))


CHECKS = [Check("gpu.xid", ("kernel_log",), xid, "no fatal Xid errors or fallen-off-the-bus reports")]
COLLECTORS = {"kernel_log": collect}
