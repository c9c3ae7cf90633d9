"""ib.counters: every InfiniBand port's error counters (sysfs: class/infiniband/DEV/ports/N/counters), read on every
run, kept with the report, and judged by how much each rose since the last run of this boot (a state file beside the
Xid window's; the first run of a boot judges the counts since boot, where the driver started them at 0). A link that
went down and came back is a flap even when the port is ACTIVE now: link_downed rising fails the node. The other
error counters rising past the profile's limit (infiniband.counter_limits; by default ibqueryerrors' thresholds)
warn, each naming its port and what its rising points at; a counter at the top of its width counts no more (the
port's PMA saturates it) and warns until it is reset. Counters lower than last run's were reset (perfquery -R, a
driver reload): judged from 0."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
from pathlib import Path
from typing import Any

from ..files import write_atomically
from ..model import Result, Status
from ..parsers.ib_counters import ERRORS, OTHERS, top, value
from ..profiles import Profile
from . import Check, Context
from .kernel_log import read_boot_id, state_dir
from .links import sysfs_root

CHECK = "ib.counters"
STATE_FILE = "ib-counters.json"  # {"boot_id", "time", "ports": {DEV/PORT: {counter: count}}} of the last judged run
IBQUERYERRORS = "ibqueryerrors' default (infiniband-diags 44.0: /etc/infiniband-diags/error_thresholds)"
FLAP = ("any: the link went down and came back while the node ran (IBA LinkDownedCounter), which ends every NCCL "
        "job over it; operators ask for flaps to be caught (NVSentinel #1236, #642)")
# counter -> (the most it may rise between two runs, where that number comes from); a profile's counter_limits win
LIMITS: dict[str, tuple[int, str]] = {
    "link_downed": (0, FLAP),
    **{name: (limit, IBQUERYERRORS) for name, limit in (
        ("symbol_error", 10), ("link_error_recovery", 10), ("port_rcv_errors", 10),
        ("port_rcv_remote_physical_errors", 100), ("port_rcv_switch_relay_errors", 100), ("port_xmit_discards", 100),
        ("port_xmit_constraint_errors", 100), ("port_rcv_constraint_errors", 100),
        ("local_link_integrity_errors", 10), ("excessive_buffer_overrun_errors", 10), ("VL15_dropped", 100))},
}
PORT_FILES = ("link_layer", "state", "phys_state", "rate")
REMEDIATION = ("reseat or replace the cable or transceiver of the named port; if several nodes behind one leaf switch "
               "move together, look at the switch (gpucheck cluster's shape stage names it); perfquery -x DEV PORT "
               "shows the counters, perfquery -R resets them")


def port_dirs() -> dict[str, Path]:
    """DEV/PORT -> its sysfs directory, for every InfiniBand port (none: no class/infiniband)."""
    root = sysfs_root() / "class" / "infiniband"
    return {f"{device.name}/{port.name}": port for device in (sorted(root.iterdir()) if root.is_dir() else [])
            for port in (sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else [])}


def link_downs() -> dict[str, int]:
    """DEV/PORT -> its link_downed count now (what `gpucheck watch` polls: one small file a port)."""
    found = {}
    for key, port in port_dirs().items():
        try:
            count = value((port / "counters" / "link_downed").read_text())
        except (OSError, ValueError):
            continue
        if count is not None:
            found[key] = count
    return found


def collect(ctx: Context) -> dict[str, Any]:
    """The ports' attributes and counters as sysfs has them now, and the last judged run's counters if of this boot."""
    ports: dict[str, dict[str, Any]] = {}
    unreadable: dict[str, str] = {}
    for key, port in port_dirs().items():
        entry: dict[str, Any] = {name: _text(port / name) for name in PORT_FILES}
        counters: dict[str, int | None] = {}
        for path in sorted((port / "counters").iterdir()) if (port / "counters").is_dir() else []:
            try:
                counters[path.name] = value(path.read_text())
            except (OSError, ValueError) as exc:  # a counter a driver refuses to read, or not a count
                unreadable[f"{key}/{path.name}"] = getattr(exc, "strerror", None) or str(exc)
        ports[key] = {**entry, "counters": counters}
    try:
        boot_id = read_boot_id()
    except (OSError, UnicodeDecodeError):
        boot_id = None
    return {"ports": ports, "unreadable": unreadable, "boot_id": boot_id, "before": _before(boot_id)}


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _before(boot_id: str | None) -> dict[str, Any] | None:
    """The last judged run's state when it is of this boot (else every count is since boot)."""
    try:
        state = json.loads((state_dir() / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(state, dict) and boot_id and state.get("boot_id") == boot_id
            and isinstance(state.get("ports"), dict)):
        return None
    return state


def limits(p: Profile) -> dict[str, tuple[int, str]]:
    """Each error counter's limit and its source: the profile's infiniband.counter_limits over LIMITS."""
    own = p.get("infiniband", "counter_limits", None) or {}
    return {name: ((int(own[name]), f"profile {p.name}") if isinstance(own.get(name), int) else default)
            for name, default in LIMITS.items()}


def judge(f: dict[str, Any], p: Profile) -> Result:
    facts = f["ib_counters"]
    ports: dict[str, dict[str, Any]] = facts["ports"]
    if not ports:
        return Result(CHECK, Status.SKIP, reason="no InfiniBand port in sysfs (class/infiniband)")
    before = facts.get("before") or {}
    since = f"since the last run ({before['time']})" if before.get("time") else "since boot (no earlier run this boot)"
    allowed = limits(p)
    unknown = sorted(set(p.get("infiniband", "counter_limits", None) or {}) - set(LIMITS))
    ignored = f"; the profile's counter_limits name no such counter: {', '.join(unknown)} (ignored)" if unknown else ""
    rose: dict[str, dict[str, int]] = {}
    flaps, over, stuck = [], [], []
    for key, port in ports.items():
        was = (before.get("ports") or {}).get(key) or {}
        for name, now in port["counters"].items():
            if name not in ERRORS or now is None:
                continue
            then = was.get(name) if isinstance(was.get(name), int) else 0
            change = now - then if now >= then else now  # lower than before: reset since, counted from 0
            if change:
                rose.setdefault(key, {})[name] = change
            limit, _ = allowed[name]
            said = f"{key} {name} +{change} (now {now}): {ERRORS[name][1]}"
            if name == "link_downed" and change > limit:
                flaps.append(f"{key} flapped: link_downed +{change} (now {now}), port {_state(port)} now")
            elif change > limit:
                over.append(f"{said} (limit {limit} a run)")
            if now == top(name):
                stuck.append(f"{key} {name} at {now}, its top: it counts no more (reset: perfquery -R)")
    measured = {"ports": {key: {n: c for n, c in port["counters"].items() if n in ERRORS or n in OTHERS}
                          for key, port in ports.items()},
                "rose": rose, "since": since, "boot_id": facts.get("boot_id"), "unreadable": facts["unreadable"]}
    expected = {name: limit for name, (limit, _) in allowed.items()}
    problems = flaps + over + stuck
    if flaps:
        status = Status.FAIL
    elif problems:
        status = Status.WARN
    else:
        moved = sum(len(c) for c in rose.values())
        return Result(CHECK, Status.PASS, measured, expected,
                      f"{len(ports)} port(s): no error counter past its limit {since}"
                      + (f" ({moved} rose within it)" if moved else "") + ignored)
    return Result(CHECK, status, measured, expected, f"{since}: " + "; ".join(problems) + ignored, REMEDIATION)


def _state(port: dict[str, Any]) -> str:
    return (port.get("state") or "?").split(":")[-1].strip()


def remember(results: list[Result]) -> str | None:
    """After a run that judged the counters: keep them (atomically) as the next run's `before`. A one-line note when
    they cannot be written (the next run then judges since boot again); never raises."""
    result = next((r for r in results if r.check == CHECK), None)
    if result is None or result.status in (Status.SKIP, Status.ERROR) or not isinstance(result.measured, dict):
        return None
    if not result.measured.get("boot_id"):
        return None
    state = {"boot_id": result.measured["boot_id"], "time": dt.datetime.now(dt.timezone.utc).isoformat("T", "seconds"),
             "ports": result.measured["ports"]}
    path = state_dir() / STATE_FILE
    try:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
        write_atomically(path, json.dumps(state) + "\n")
    except OSError as exc:
        return f"cannot keep the InfiniBand counters in {path} ({exc.strerror or exc}): the next run judges since boot"
    return None


def limit_rows(p: Profile | None) -> list[tuple[str, str, str]]:
    """(infiniband.counter_limits.NAME, its limit, its source) for `gpucheck profiles`."""
    table = limits(p) if p is not None else LIMITS
    return [(f"infiniband.counter_limits.{name}", f"+{limit} a run", source) for name, (limit, source) in table.items()]


CHECKS = [Check(CHECK, ("ib_counters",), judge, "InfiniBand error counters: no flap, none rising past its limit "
                "since the last run of this boot")]
COLLECTORS = {"ib_counters": collect}
