"""The repairs themselves, one function each behind `do`: restart Fabric Manager or DCGM's host engine, reset GPUs
(`nvidia-smi -r`), reboot. Each returns what it did in one line, or raises Failed saying why it did not work.

A GPU reset is refused by the driver while anything has the GPU open, monitoring included: NVML's users (DCGM's
host engine, the persistence daemon, gpucheck watch's own NVML thread, which the caller has released) are stopped
first and started again after, whatever the reset did. A GPU some other program still uses is not reset at all."""

from __future__ import annotations

from collections.abc import Callable

from ..process import run
from .plan import Plan

UNIT_OF = {"restart-fabric-manager": "nvidia-fabricmanager", "restart-dcgm": "nvidia-dcgm"}
# What holds every GPU open for as long as it runs; the driver refuses a reset beside it (docs/watch.md).
HOLDERS = ("nvidia-dcgm", "nvidia-persistenced")
UNIT_TIMEOUT_S = 120.0  # a unit's stop or start: Fabric Manager's start trains the NVSwitch links
RESET_TIMEOUT_S = 120.0


class Failed(Exception):
    """The repair did not work (or was not allowed): str(e) says why, in one line."""


def do(plan: Plan, allow_reboot: bool, users: Callable[[], dict[str, str]]) -> str:
    """Carry out `plan`; `users()`: the GPUs some program uses now ("GPU3" -> who), asked before a reset."""
    if plan.action in UNIT_OF:
        return restart(UNIT_OF[plan.action])
    if plan.action == "reset-gpu":
        return reset(plan, users)
    if not allow_reboot:
        raise Failed("a reboot is the profile's repair, but node.yaml does not allow one (repair: allow_reboot: "
                     "true; the role's gpucheck_agent_repair_allow_reboot)")
    done = run(["systemctl", "reboot"], UNIT_TIMEOUT_S)
    if not done.ok:
        raise Failed(f"systemctl reboot: {done.describe_failure()}")
    return "reboot asked for"


def active(unit: str) -> bool:
    return run(["systemctl", "is-active", "--quiet", unit], UNIT_TIMEOUT_S).ok


def restart(unit: str) -> str:
    done = run(["systemctl", "restart", unit], UNIT_TIMEOUT_S)
    if not done.ok:
        raise Failed(f"systemctl restart {unit}: {done.describe_failure()}")
    if not active(unit):
        raise Failed(f"{unit} is not running after its restart (journalctl -u {unit})")
    return f"{unit} restarted"


def reset(plan: Plan, users: Callable[[], dict[str, str]]) -> str:
    stopped = [unit for unit in HOLDERS if active(unit)]
    try:
        for unit in stopped:
            done = run(["systemctl", "stop", unit], UNIT_TIMEOUT_S)
            if not done.ok:
                raise Failed(f"cannot stop {unit} for the reset: {done.describe_failure()}")
        used = {label: who for label, who in users().items() if label in {g.label for g in plan.gpus}}
        if used:
            raise Failed("not reset: " + "; ".join(f"{label} is used by {who}" for label, who in sorted(used.items())))
        said = []
        for gpu in plan.gpus:
            done = run(["nvidia-smi", "-r", "-i", gpu.bus or str(gpu.index)], RESET_TIMEOUT_S)
            if not done.ok:
                raise Failed(f"{gpu.label} not reset: {done.describe_failure()}")
            said.append(gpu.label)
    finally:
        for unit in stopped:  # started again whatever the reset did
            run(["systemctl", "start", unit], UNIT_TIMEOUT_S)
    return f"{', '.join(said)} reset" + (f" ({', '.join(stopped)} stopped for it and started again)" if stopped else "")
