"""GPU health checks: ECC, retired pages, row remapping, clock events, temperature, power."""

from __future__ import annotations

from typing import Any

from ..model import Result, Status
from ..profiles import Profile
from . import Check
from .per_gpu import (
    EVIDENCE,
    Finding,
    any_unread,
    asks,
    field_error,
    live_gpus,
    per_gpu,
    requires,
    skip_unless_unread,
    stated,
    thresholds,
)

# "-i N": the GPU a finding is about; per_gpu writes each such GPU's index in its place (for_gpus)
RESET = "reset the GPU (nvidia-smi -r -i N) or reboot"
RESET_HINT = f"{EVIDENCE}; drain the node and {RESET}"
RMA_HINT = "open an RMA for the GPU"  # after RESET_HINT or a drain: the node is drained once


def ecc_mode(f: dict[str, Any], p: Profile) -> Result:
    nvml = f["nvml"]
    if not requires(p, nvml, "ecc_required"):
        return skip_unless_unread("gpu.ecc_mode", nvml, ("ecc_mode",), "profile does not require ECC")

    def inspect(g: dict[str, Any]) -> Finding:
        if not p.for_gpu(g, "ecc_required", False):
            return None
        if g.get("ecc_mode") is False:
            return Status.FAIL, "ECC disabled"
        if g.get("ecc_mode") is None and field_error(g, "ecc_mode") is None:
            return Status.FAIL, "ECC mode not supported by this GPU"
        return None

    return per_gpu("gpu.ecc_mode", nvml, inspect, lambda g: g.get("ecc_mode"),
                   stated(thresholds(p, nvml, "ecc_required")), "ECC enabled",
                   "enable ECC (nvidia-smi -i N -e 1) and reset the GPU (nvidia-smi -r -i N); training without ECC "
                   "risks silent corruption",
                   fields=("ecc_mode",))


def ecc_errors(f: dict[str, Any], p: Profile) -> Result:
    volatile_max = p.get("gpu", "ecc_volatile_uncorrected_max", 0)
    aggregate_max = p.get("gpu", "ecc_aggregate_uncorrected_max")

    def inspect(g: dict[str, Any]) -> Finding:
        counts = g.get("ecc_errors") or {}  # none: ECC off or unsupported (gpu.ecc_mode says so) or not read
        volatile, aggregate = counts.get("volatile_uncorrected"), counts.get("aggregate_uncorrected")
        if volatile is not None and volatile > volatile_max:
            return Status.FAIL, f"{volatile} volatile uncorrected ECC error(s) since the last reset"
        if aggregate_max is not None and aggregate is not None and aggregate > aggregate_max:
            return Status.WARN, f"{aggregate} uncorrected ECC error(s) over the GPU's lifetime (> {aggregate_max})"
        return None

    fields = ("ecc_volatile_uncorrected",) + (("ecc_aggregate_uncorrected",) if aggregate_max is not None else ())
    return per_gpu("gpu.ecc_errors", f["nvml"], inspect,
                   lambda g: {k: v for k, v in (g.get("ecc_errors") or {}).items() if "uncorrected" in k} or None,
                   {"volatile_uncorrected_max": volatile_max, "aggregate_uncorrected_max": aggregate_max},
                   "no uncorrected ECC errors", f"{RESET_HINT}; if errors return, {RMA_HINT}", fields=fields)


def retired_pages(f: dict[str, Any], p: Profile) -> Result:
    limit = p.get("gpu", "retired_pages_max")
    fields = ("retired_pages", "retired_pages_pending")

    def inspect(g: dict[str, Any]) -> Finding:
        pages = g.get("retired_pages")
        if pages is None:
            return None
        known = pages["single_bit"] + (pages["double_bit"] or 0)
        total = f"{known}" if pages["double_bit"] is not None else f"at least {known}"
        if pages.get("pending"):
            return Status.FAIL, f"page retirement pending ({total} retired): reset needed to blacklist them"
        if limit is not None and known > limit:
            return Status.FAIL, f"{total} retired pages > {limit}"
        return None

    nvml = f["nvml"]
    if all(g.get("retired_pages") is None for g in live_gpus(nvml)) and not any_unread(nvml, fields):
        return Result("gpu.retired_pages", Status.SKIP,
                      reason="page retirement not supported by these GPUs (they use row remapping)")
    return per_gpu("gpu.retired_pages", nvml, inspect, lambda g: g.get("retired_pages"),
                   {"pending": False, "retired_pages_max": limit}, "no page retirement pending",
                   f"{RESET_HINT}; above NVIDIA's retirement limit, {RMA_HINT}", fields=fields)


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
    if all(g.get("remapped_rows") is None for g in live_gpus(nvml)) and not any_unread(nvml, ("remapped_rows",)):
        return Result("gpu.row_remap", Status.SKIP, reason="row remapping not supported by these GPUs")
    return per_gpu("gpu.row_remap", nvml, inspect, lambda g: g.get("remapped_rows"),
                   {"pending": False, "failure": False}, "no row remap pending or failed",
                   f"{EVIDENCE}; drain the node; pending: {RESET}; failure: {RMA_HINT}", fields=("remapped_rows",))


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
                   "a PSU or board fault", fields=("clocks_event_reasons",))


def temperature(f: dict[str, Any], p: Profile) -> Result:
    maximum = p.get("gpu", "temperature_C_max")
    margin = p.get("gpu", "temperature_slowdown_margin_C_min", 5)

    def inspect(g: dict[str, Any]) -> Finding:
        temp, slowdown = g.get("temperature_C"), g.get("temperature_slowdown_C")
        if temp is None:
            return None if field_error(g, "temperature") else (Status.ERROR, "temperature not reported")
        if slowdown is not None and temp >= slowdown:
            return Status.FAIL, f"{temp} °C at or above its slowdown threshold {slowdown} °C"
        if maximum is not None and temp > maximum:
            return Status.WARN, f"{temp} °C > {maximum} °C"
        if slowdown is not None and slowdown - temp < margin:
            return Status.WARN, f"{temp} °C within {margin} °C of slowdown ({slowdown} °C)"
        return None

    return per_gpu("gpu.temperature", f["nvml"], inspect, lambda g: g.get("temperature_C"),
                   {"max_C": maximum, "slowdown_margin_C_min": margin}, "temperatures in range",
                   "check airflow, fans and inlet temperature for this node",
                   fields=("temperature", "temperature_slowdown"))


def power(f: dict[str, Any], p: Profile) -> Result:
    fields = ("power", "power_limit")
    if not asks(p, f["nvml"], "power_limit_W_min"):
        return skip_unless_unread("gpu.power", f["nvml"], fields, "profile sets no power limit")
    wanted = stated(thresholds(p, f["nvml"], "power_limit_W_min"), lambda watts: f"limit >= {watts:g} W")

    def inspect(g: dict[str, Any]) -> Finding:
        minimum, limit = p.for_gpu(g, "power_limit_W_min"), g.get("power_limit_W")
        if minimum is None:
            return None
        if limit is None:
            return None if field_error(g, "power_limit") else (Status.ERROR, "enforced power limit not reported")
        if limit < minimum:  # a GPU capped below its rating runs slower than the cluster was sized for
            return Status.FAIL, f"power capped at {limit:g} W < {minimum:g} W"
        return None

    return per_gpu("gpu.power", f["nvml"], inspect,
                   lambda g: {"draw_W": g.get("power_W"), "limit_W": g.get("power_limit_W")},
                   wanted, "power limits at the board's rating",
                   "reset the limit (nvidia-smi -pl) or check the BMC/PSU power capping policy; a site that caps "
                   "on purpose states its cap in its profile (gpu.power_limit_W_min)", fields=fields)


CHECKS = [
    Check("gpu.ecc_mode", ("nvml",), ecc_mode, "ECC enabled"),
    Check("gpu.ecc_errors", ("nvml",), ecc_errors, "no volatile uncorrected ECC errors"),
    Check("gpu.retired_pages", ("nvml",), retired_pages, "no page retirement pending, count under the limit"),
    Check("gpu.row_remap", ("nvml",), row_remap, "no row remap pending or failed"),
    Check("gpu.clocks", ("nvml",), clocks, "no hardware/thermal clock slowdown"),
    Check("gpu.temperature", ("nvml",), temperature, "temperature below slowdown with a margin"),
    Check("gpu.power", ("nvml",), power, "enforced power limit not capped"),
]
