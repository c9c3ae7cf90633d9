"""Helpers that turn per-GPU findings into one Result naming every affected GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import Result, Status, worst

Finding = tuple[Status, str] | None


def gpu_label(gpu: dict[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU{gpu['index']}" + (f" ({bus})" if bus else "")


def live_gpus(nvml: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in nvml.get("gpus", []) if not g.get("lost")]


def per_gpu(
    check: str,
    nvml: dict[str, Any],
    inspect: Callable[[dict[str, Any]], Finding],
    measure: Callable[[dict[str, Any]], Any],
    expected: Any,
    ok_reason: str,
    remediation: str = "",
) -> Result:
    """Inspect each responsive GPU; the result is the worst finding, naming each GPU found."""
    gpus = live_gpus(nvml)
    if not gpus:
        return Result(check, Status.SKIP, expected=expected, reason="no responsive GPU to inspect")
    findings = [(gpu, inspect(gpu)) for gpu in gpus]
    bad = [(gpu, f) for gpu, f in findings if f is not None and f[0] != Status.PASS]
    measured = {f"GPU{g['index']}": measure(g) for g in gpus}
    if not bad:
        return Result(check, Status.PASS, measured, expected, ok_reason)
    status = worst([f[0] for _, f in bad])
    reason = "; ".join(f"{gpu_label(gpu)}: {f[1]}" for gpu, f in bad)
    return Result(check, status, measured, expected, reason, remediation if status != Status.PASS else "")
