"""GPU health checks: ECC, retired pages, row remapping, clock events, temperature, power."""

from __future__ import annotations

from typing import Any

from ..model import Result, Status
from ..profiles import Profile
from . import Check
from .per_gpu import Finding, per_gpu

RESET_HINT = "drain the node and reset the GPU (nvidia-smi -r -i N) or reboot"
RMA_HINT = "drain the node and open an RMA for the GPU"


def ecc_mode(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("gpu", "ecc_required", False):
        return Result("gpu.ecc_mode", Status.SKIP, reason="profile does not require ECC")
    return per_gpu(
        "gpu.ecc_mode", f["nvml"],
        lambda g: None if g.get("ecc_mode") else (Status.FAIL, "ECC disabled" if g.get("ecc_mode") is False
                                                   else "ECC mode not reported"),
        lambda g: g.get("ecc_mode"), True, "ECC enabled",
        "enable ECC (nvidia-smi -e 1) and reset the GPU; training without ECC risks silent corruption")


def ecc_errors(f: dict[str, Any], p: Profile) -> Result:
    volatile_max = p.get("gpu", "ecc_volatile_uncorrected_max", 0)
    aggregate_max = p.get("gpu", "ecc_aggregate_uncorrected_max")

    def inspect(g: dict[str, Any]) -> Finding:
        counts = g.get("ecc_errors")
        if not counts:
            return None  # ECC off or unsupported: gpu.ecc_mode reports that
        volatile = counts.get("volatile_uncorrected") or 0
        aggregate = counts.get("aggregate_uncorrected") or 0
        if volatile > volatile_max:
            return Status.FAIL, f"{volatile} volatile uncorrected ECC error(s) since the last reset"
        if aggregate_max is not None and aggregate > aggregate_max:
            return Status.WARN, f"{aggregate} uncorrected ECC error(s) over the GPU's lifetime (> {aggregate_max})"
        return None

    return per_gpu("gpu.ecc_errors", f["nvml"], inspect,
                   lambda g: {k: v for k, v in (g.get("ecc_errors") or {}).items() if "uncorrected" in k} or None,
                   {"volatile_uncorrected_max": volatile_max, "aggregate_uncorrected_max": aggregate_max},
                   "no uncorrected ECC errors", f"{RESET_HINT}; if errors return, {RMA_HINT}")


def retired_pages(f: dict[str, Any], p: Profile) -> Result:
    limit = p.get("gpu", "retired_pages_max")

    def inspect(g: dict[str, Any]) -> Finding:
        pages = g.get("retired_pages")
        if pages is None:
            return None
        total = pages["single_bit"] + pages["double_bit"]
        if pages.get("pending"):
            return Status.FAIL, f"page retirement pending ({total} retired): reset needed to blacklist them"
        if limit is not None and total > limit:
            return Status.FAIL, f"{total} retired pages > {limit}"
        return None

    nvml = f["nvml"]
    if all(g.get("retired_pages") is None for g in nvml.get("gpus", []) if not g.get("lost")):
        return Result("gpu.retired_pages", Status.SKIP,
                      reason="page retirement not supported by these GPUs (they use row remapping)")
    return per_gpu("gpu.retired_pages", nvml, inspect, lambda g: g.get("retired_pages"),
                   {"pending": False, "retired_pages_max": limit}, "no page retirement pending",
                   f"{RESET_HINT}; above NVIDIA's retirement limit, {RMA_HINT}")


def row_remap(f: dict[str, Any], p: Profile) -> Result:
    def inspect(g: dict[str, Any]) -> Finding:
        rows = g.get("remapped_rows")
        if rows is None:
            return None
        if rows["failure"]:
            return Status.FAIL, "row remapping failed: no spare rows left"
        if rows["pending"]:
            return Status.FAIL, f"row remap pending ({rows['uncorrectable']} uncorrectable): reset needed"
        return None

    nvml = f["nvml"]
    if all(g.get("remapped_rows") is None for g in nvml.get("gpus", []) if not g.get("lost")):
        return Result("gpu.row_remap", Status.SKIP, reason="row remapping not supported by these GPUs")
    return per_gpu("gpu.row_remap", nvml, inspect, lambda g: g.get("remapped_rows"),
                   {"pending": False, "failure": False}, "no row remap pending or failed",
                   f"pending: {RESET_HINT}; failure: {RMA_HINT}")


# HW slowdown and power brake mean the board protects itself (power supply, cooling); thermal
# slowdown means cooling cannot keep up. Idle, app clocks, sync boost and SW power cap are normal.
DEFAULT_FAIL_REASONS = ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
DEFAULT_WARN_REASONS = ["sw_thermal_slowdown"]


def clocks(f: dict[str, Any], p: Profile) -> Result:
    fail_on = set(p.get("health", "clocks_event_reasons_fail", DEFAULT_FAIL_REASONS))
    warn_on = set(p.get("health", "clocks_event_reasons_warn", DEFAULT_WARN_REASONS))

    def inspect(g: dict[str, Any]) -> Finding:
        active = set(g.get("clocks_event_reasons") or [])
        if active & fail_on:
            return Status.FAIL, "clocks held down by " + ", ".join(sorted(active & fail_on))
        if active & warn_on:
            return Status.WARN, "clocks held down by " + ", ".join(sorted(active & warn_on))
        return None

    return per_gpu("gpu.clocks", f["nvml"], inspect, lambda g: g.get("clocks_event_reasons"),
                   {"fail_on": sorted(fail_on), "warn_on": sorted(warn_on)}, "no hardware or thermal clock slowdown",
                   "check cooling (fans, inlet temperature) and power supplies; HW slowdown also follows "
                   "a PSU or board fault")


def temperature(f: dict[str, Any], p: Profile) -> Result:
    maximum = p.get("gpu", "temperature_C_max")
    margin = p.get("gpu", "temperature_slowdown_margin_C_min", 5)

    def inspect(g: dict[str, Any]) -> Finding:
        temp, slowdown = g.get("temperature_C"), g.get("temperature_slowdown_C")
        if temp is None:
            return Status.ERROR, "temperature not reported"
        if slowdown is not None and temp >= slowdown:
            return Status.FAIL, f"{temp} C at or above its slowdown threshold {slowdown} C"
        if maximum is not None and temp > maximum:
            return Status.WARN, f"{temp} C > {maximum} C"
        if slowdown is not None and slowdown - temp < margin:
            return Status.WARN, f"{temp} C within {margin} C of slowdown ({slowdown} C)"
        return None

    return per_gpu("gpu.temperature", f["nvml"], inspect, lambda g: g.get("temperature_C"),
                   {"max_C": maximum, "slowdown_margin_C_min": margin}, "temperatures in range",
                   "check airflow, fans and inlet temperature for this node")


def power(f: dict[str, Any], p: Profile) -> Result:
    minimum = p.get("gpu", "power_limit_W_min")
    if minimum is None:
        return Result("gpu.power", Status.SKIP, reason="profile sets no power limit")

    def inspect(g: dict[str, Any]) -> Finding:
        limit = g.get("power_limit_W")
        if limit is None:
            return Status.ERROR, "enforced power limit not reported"
        if limit < minimum:
            return Status.WARN, f"power capped at {limit:g} W < {minimum:g} W"
        return None

    return per_gpu("gpu.power", f["nvml"], inspect,
                   lambda g: {"draw_W": g.get("power_W"), "limit_W": g.get("power_limit_W")},
                   f"limit >= {minimum} W", "power limits at the board's rating",
                   "reset the limit (nvidia-smi -pl) or check the BMC/PSU power capping policy")


CHECKS = [
    Check("gpu.ecc_mode", ("nvml",), ecc_mode, "ECC enabled"),
    Check("gpu.ecc_errors", ("nvml",), ecc_errors, "no volatile uncorrected ECC errors"),
    Check("gpu.retired_pages", ("nvml",), retired_pages, "no page retirement pending, count under the limit"),
    Check("gpu.row_remap", ("nvml",), row_remap, "no row remap pending or failed"),
    Check("gpu.clocks", ("nvml",), clocks, "no hardware/thermal clock slowdown"),
    Check("gpu.temperature", ("nvml",), temperature, "temperature below slowdown with a margin"),
    Check("gpu.power", ("nvml",), power, "enforced power limit not capped"),
]
