"""What the node remembers of its repairs, in /var/lib/gpucheck/repairs.json: when each returned the node (a fault
back within the window after one is a fault no repair mends) and a reboot under way (the proof comes after it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..files import write_atomically
from ..node.kernel_log import state_dir
from .plan import Plan

FILE = "repairs.json"
KEPT = 100  # returns remembered: far more than a node sees within any window


def path() -> Path:
    return state_dir() / FILE


def load() -> dict[str, Any]:
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(data: dict[str, Any]) -> str | None:
    """A one-line note when it could not be written (a full disk): the repair goes on regardless."""
    try:
        os.makedirs(state_dir(), mode=0o700, exist_ok=True)
        write_atomically(path(), json.dumps(data, sort_keys=True) + "\n")
    except OSError as exc:
        return f"cannot remember the repair in {path()} ({exc.strerror or exc})"
    return None


def returned_within(plan: Plan, window_s: float, now: float | None = None) -> dict[str, Any] | None:
    """The last return by a repair, within `window_s`, of a fault like this one: a check in common, and a GPU in
    common where both name GPUs."""
    now = time.time() if now is None else now
    uuids = {g.uuid for g in plan.gpus if g.uuid}
    for entry in reversed(load().get("returned") or []):
        if not isinstance(entry, dict) or now - float(entry.get("at") or 0) > window_s:
            continue
        theirs = set(entry.get("gpus") or [])
        if set(entry.get("checks") or []) & set(plan.checks) and (not uuids or not theirs or uuids & theirs):
            return entry
    return None


def record_return(plan: Plan, now: float | None = None) -> str | None:
    data = load()
    returned = [e for e in data.get("returned") or [] if isinstance(e, dict)]
    returned.append({"at": time.time() if now is None else now, "action": plan.action, "checks": list(plan.checks),
                     "gpus": sorted(g.uuid for g in plan.gpus if g.uuid)})
    data["returned"] = returned[-KEPT:]
    return save(data)


def set_reboot(state: dict[str, Any] | None) -> str | None:
    """Remember (or forget: None) a reboot under way: the plan, the steps so far, the boot it was asked from."""
    data = load()
    if state is None:
        data.pop("rebooting", None)
    else:
        data["rebooting"] = state
    return save(data)


def reboot_under_way() -> dict[str, Any] | None:
    state = load().get("rebooting")
    return state if isinstance(state, dict) else None
