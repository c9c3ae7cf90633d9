"""Which GPUs another program is using: an active check (burn-in, peer copies, DCGM, NCCL) never runs beside it.

NVML lists each GPU's compute and graphics processes when the nvml collector runs, before any of the agent's own
GPU work starts, so every process listed is someone else's (inside a container NVML gives host pids, which match
nothing here: no pid is ever taken for the agent's own). A GPU with one is "busy": its active checks are `error`
with who holds it, never `fail` and never a reason to drain, since a busy GPU measures slow and a user's job must
not be disturbed. `--allow-busy` runs them anyway, and every figure then says it was taken beside that program.
"""

from __future__ import annotations

from typing import Any

from . import CollectError, Context
from .kernel_log import proc_root
from .per_gpu import live_gpus

GIB = 1024
BUSY_HINT = ("wait until the GPU is free, or take the node out of service first (drain it in the scheduler); "
             "--allow-busy measures it anyway, beside that program")


def process_name(pid: int) -> str | None:
    """The command name of `pid` as this machine's /proc shows it; None when no such process is visible here
    (another PID namespace, a container, or it has ended)."""
    try:
        return (proc_root() / str(pid) / "comm").read_text(errors="replace").strip() or None
    except OSError:
        return None


def collect(ctx: Context) -> dict[str, Any]:
    """{"allowed": --allow-busy, "gpus": {"GPU3": [{"pid", "name", "used_MiB", "kind"}, ...]}} for the GPUs in use."""
    users: dict[str, list[dict[str, Any]]] = {}
    for gpu in live_gpus(ctx.facts.get("nvml") or {}):
        found = [{**p, "name": process_name(p["pid"])} for p in gpu.get("processes") or []]
        if found:
            users[f"GPU{gpu['index']}"] = found
    return {"allowed": ctx.allow_busy, "gpus": users}


def described(processes: list[dict[str, Any]]) -> str:
    """"pid 576 (python3) holds 70.8 GiB; pid 99 (not visible here) holds an unknown amount"."""
    parts = []
    for p in processes:
        name = p.get("name") or "not visible here"
        held = p.get("used_MiB")
        amount = "an amount NVML does not report" if held is None else f"{held / GIB:.1f} GiB"
        parts.append(f"pid {p['pid']} ({name}, {p.get('kind', 'compute')}) holds {amount}")
    return "; ".join(parts)


def busy(users: dict[str, Any] | None) -> dict[str, str]:
    """GPU label -> "busy: ..." for each GPU another program uses, unless --allow-busy."""
    if not users or users.get("allowed"):
        return {}
    return {label: f"busy: {described(processes)}" for label, processes in (users.get("gpus") or {}).items()}


def beside(users: dict[str, Any] | None) -> dict[str, str]:
    """GPU label -> what its figures were taken beside, under --allow-busy."""
    if not users or not users.get("allowed"):
        return {}
    return {label: f"measured beside another program (--allow-busy): {described(processes)}"
            for label, processes in (users.get("gpus") or {}).items()}


def refuse_if_busy(ctx: Context, what: str) -> None:
    """A check that loads every GPU at once (DCGM, NCCL, the peer copies) does not start while one is busy."""
    found = busy(ctx.facts.get("gpu_users"))
    if found:
        raise CollectError(f"{what} not run: " + "; ".join(f"{label} {why}" for label, why in found.items()),
                           BUSY_HINT, harness=True)


CHECKS: list = []
COLLECTORS = {"gpu_users": collect}
