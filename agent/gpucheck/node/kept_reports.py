"""The node's own last reports, <state dir>/reports/ (docs/history.md): each `gpucheck node` run's JSON report, so
what Slurm's health check saw between two cluster runs is not lost (`gpucheck history import` reads the folder).
Kept: every report that did not pass, every one that ran active checks (--full: the figures a GPU is followed by),
and the latest passive pass (a health check every 5 minutes would otherwise fill the folder with passes); at most
KEEP_MAX files, the oldest going first, the newest active pass always kept. Never raises: keeping a copy never costs
a run."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import re
from pathlib import Path
from typing import Any

from ..files import read_file, write_atomically
from ..model import KEPT_REPORTS_MAX, Report, Result, Status, verdict_of_exit
from .kernel_log import state_dir

KEPT_REPORT_MAX_B = 16 << 20  # a kept report is tens of kB; more is not one of ours
VERDICTS = {s.value for s in Status}
KEEP_MAX = KEPT_REPORTS_MAX
NAME = re.compile(r"(\d{8}T\d{6}Z)(?:\.(\d+))?-(pass|warn|fail|error|skip)(-full)?\.json")


def folder() -> Path:
    return state_dir() / "reports"


def file_name(report: Report, active: bool, taken: set[str]) -> str:
    try:
        when = dt.datetime.fromisoformat(report.started).astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    except (TypeError, ValueError):
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    status = verdict_of_exit(report.exit_code)
    suffix = f"-{status}{'-full' if active else ''}.json"
    name, n = f"{when}{suffix}", 1
    while name in taken:  # two runs in one second
        n += 1
        name = f"{when}.{n}{suffix}"
    return name


def prune(directory: Path) -> None:
    """Every passive pass but the newest (and those that resumed the node), then the oldest beyond KEEP_MAX, but never
    the newest run of active checks that passed or only warned: "no active check passed in N days" and its figures
    are read from it."""
    kept = sorted((m.group(1), int(m.group(2) or 1), m.group(3), bool(m.group(4)), p.name)
                  for p in directory.iterdir() if (m := NAME.fullmatch(p.name)))
    passes = [k for k in kept if k[2] == "pass" and not k[3]]
    doomed = {k[4] for k in passes[:-1] if not returned_a_node(directory / k[4])}
    active_passes = [k[4] for k in kept if k[3] and k[2] in ("pass", "warn")]
    spared = set(active_passes[-1:])
    rest = [k for k in kept if k[4] not in doomed and k[4] not in spared]
    doomed |= {k[4] for k in rest[:max(0, len(rest) - (KEEP_MAX - len(spared)))]}
    for name in doomed:
        with contextlib.suppress(FileNotFoundError):  # another run pruned it first
            (directory / name).unlink()


def returned_a_node(path: Path) -> bool:
    """Whether this kept pass resumed the node in Slurm: the history's `returned` transition is read from it, so it
    is kept like any other report (until KEEP_MAX), not as one more passive pass."""
    try:
        doc = read(path)
    except (OSError, ValueError, RecursionError):
        return False
    told = ((doc.get("facts") or {}).get("slurm") or {}) if isinstance(doc, dict) else {}
    return isinstance(told, dict) and told.get("action") == "resume"


def last_active_pass(report: Report, active: bool) -> str | None:
    """When the node last passed (or only warned in) a run of active checks, UTC: this run if it is one, else the
    newest kept; None when none is kept. What "last active check passed N days ago" is read from."""
    if active and report.exit_code in (0, 1):
        return kept_time(file_name(report, active, set()))
    try:
        names = os.listdir(folder())
    except OSError:
        return None
    found = sorted(m.group(1) for n in names if (m := NAME.fullmatch(n)) and m.group(4) and m.group(3) in
                   ("pass", "warn"))
    return kept_time(found[-1]) if found else None


def read(path: Path) -> Any:
    """A kept report's JSON document; OSError, ValueError (not JSON) or RecursionError (nested past Python's
    stack) when it cannot be read."""
    return json.loads(read_file(path, KEPT_REPORT_MAX_B))


def last_active_results() -> list[Result]:
    """The checks of the newest kept run of active checks that passed or only warned; [] when none can be read."""
    try:
        names = sorted((m.group(1), m.group(2) or "", n) for n in os.listdir(folder())
                       if (m := NAME.fullmatch(n)) and m.group(4) and m.group(3) in ("pass", "warn"))
        doc = read(folder() / names[-1][2]) if names else {}
    except (OSError, ValueError, RecursionError):
        return []
    found = []
    for r in doc.get("results") or [] if isinstance(doc, dict) else []:
        if isinstance(r, dict) and isinstance(r.get("check"), str) and r.get("status") in VERDICTS:
            found.append(Result(r["check"], Status(r["status"]), r.get("measured")))
    return found


def order(name: str) -> tuple[str, int]:
    """A kept report's place among the others: its time, then its number within that second."""
    m = NAME.fullmatch(name)
    return (m.group(1), int(m.group(2) or 1)) if m else ("", 0)


def listing(directory: Path, after: str | None = None) -> list[str]:
    """The names of the reports kept in `directory`, oldest first; only those kept after `after` when given.
    OSError when the directory cannot be read."""
    names = [n for n in os.listdir(directory) if NAME.fullmatch(n)]
    return sorted((n for n in names if after is None or order(n) > order(after)), key=order)


def kept_time(name: str) -> str:
    """20261127T050000Z... -> 2026-11-27T05:00:00Z"""
    stamp = name[:16]
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"


def keep(report: Report, text: str, active: bool) -> str | None:
    """Keep `text` (the report as JSON); a one-line note when it could not be kept, None otherwise. Not being
    allowed to write there (a user's run without root) is no news: None."""
    directory = folder()
    try:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError:  # a file where the directory must be
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
        write_atomically(directory / file_name(report, active, set(os.listdir(directory))), text)
        prune(directory)
    except PermissionError:
        return None
    except OSError as exc:
        return f"this report is not kept on the node: cannot write {directory} ({exc.strerror or exc})"
    return None
