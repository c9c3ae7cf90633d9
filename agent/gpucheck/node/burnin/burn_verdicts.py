"""The burn-in's sustained-load and silent-data-corruption verdicts: gpu.burn and gpu.sdc.

gpu.burn: a GPU fails on a clock event reason the profile names (burnin.burn_reasons_fail: HW slowdown, HW thermal,
HW power brake by default) in any NVML sample, a sample hotter than the limit (burnin.burn_temperature_C_max, else
NVML's slowdown threshold), an Xid logged for it during the run, or a throughput collapse (the lowest ~1 s window
below burnin.burn_collapse_fraction_min x the run's median). SW power cap is what a GPU at its power limit shows
under load (the H100 measured for this project sat at 700 W with only it set): normal, never a failure alone.

gpu.sdc: the same seeded GEMM on every GPU gives the same bits on GPUs of one model; the GPUs whose checksum
differs from the majority fail, named; with no majority every GPU of the group fails. One GPU is compared across
nodes by `gpucheck cluster` (facts.burnin.sdc), not here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...model import Result, Status
from ...profiles import Profile
from .judge import Gpu, Judged, combine, fmt, gpus_of, judge_each, outcome, setting, settle, shown, unreached

XID_OF_OUR_KILL = 45  # "preemptive cleanup": what the driver logs when a process with GPU work in flight is killed
NORMAL_REASONS = {"sw_power_cap": "the GPU at its power limit, normal under load", "gpu_idle": "between kernels"}
CHECKSUM_SHOWN = 16  # hex digits of a checksum in `measured` and reasons


def figure(stats: Any, key: str) -> float | None:
    value = stats.get(key) if isinstance(stats, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def burn_measured(result: dict[str, Any]) -> dict[str, Any]:
    tflops, nvml = result.get("tflops") or {}, result.get("nvml") or {}
    found = {"TFLOPS_min": figure(tflops, "min"), "TFLOPS_median": figure(tflops, "median"),
             "TFLOPS_max": figure(tflops, "max"), "sm_clock_MHz_min": figure(nvml.get("sm_clock_MHz"), "min"),
             "temperature_C_max": figure(nvml.get("temperature_C"), "max"),
             "power_W_max": figure(nvml.get("power_W"), "max")}
    return {key: shown(value) for key, value in found.items() if value is not None}


def describe_xids(events: list[dict[str, Any]]) -> str:
    seen = Counter(e.get("xid") for e in events)
    first = min((e["uptime_s"] for e in events if isinstance(e.get("uptime_s"), (int, float))), default=None)
    kinds = ", ".join(f"Xid {xid}" + (f" x{n}" if n > 1 else "") for xid, n in seen.items())
    return f"{kinds} logged during the run" + (f" (first at {first:.0f} s after boot)" if first is not None else "")


def burn(f: dict[str, Any], p: Profile) -> Result:
    collapse = setting(p, "burn_collapse_fraction_min")
    reasons_fail = list(setting(p, "burn_reasons_fail"))
    temperature_max = p.get("burnin", "burn_temperature_C_max")
    work = f["gpuwork"]
    xids, xid_error = work.get("xids_during") or {}, work.get("xid_error")

    def judge(gpu: Gpu, result: dict[str, Any]) -> Judged:
        judged = Judged(Status.PASS, measured=burn_measured(result))
        findings: list[tuple[Status, str]] = []
        notes: list[str] = []
        low, median = judged.measured.get("TFLOPS_min"), judged.measured.get("TFLOPS_median")
        if low is None or not median:
            findings.append((Status.ERROR, "no throughput figures in the worker's result"))
        else:
            judged.expected["TFLOPS_min"] = f">= {fmt(collapse * median)} ({collapse:g} x the median {fmt(median)})"
            judged.ratios["TFLOPS_min"] = low / median
            if low < collapse * median:
                findings.append((Status.FAIL, f"throughput collapsed: the lowest ~1 s window {fmt(low)} TFLOP/s < "
                                              f"{collapse:g} x the median {fmt(median)} ({low / median:.2f})"))
        if result.get("nvml"):
            sampled(gpu, result, judged, findings, notes)
        if result.get("nvml_error"):
            what = "only what was sampled" if result.get("nvml") else "only the throughput"
            findings.append((Status.ERROR, f"NVML not fully sampled during the burn ({result['nvml_error']}): "
                                           f"{what} was judged"))
        if result.get("fallback_reason"):
            notes.append(f"burned in {result.get('dtype')}: {result['fallback_reason']}")
        if xid_error:
            findings.append((Status.ERROR, f"Xids during the run not known: {xid_error}"))
        events = [e for e in xids.get(gpu.label, [])
                  if not (gpu.work.get("timed_out") and e.get("xid") == XID_OF_OUR_KILL)]
        judged.expected["xids"] = "none during the run"
        if events:
            findings.append((Status.FAIL, describe_xids(events)))
        return settle(judged, findings, notes)

    def sampled(gpu: Gpu, result: dict[str, Any], judged: Judged, findings: list, notes: list) -> None:
        nvml = result.get("nvml") or {}
        samples = result.get("samples")
        of = f" of {samples}" if isinstance(samples, int) else ""
        seen = {name: n for name, n in (nvml.get("reasons_seen") or {}).items() if n}
        judged.expected["clock_event_reasons"] = "none of " + ", ".join(reasons_fail)
        for name, count in seen.items():
            if name in reasons_fail:
                findings.append((Status.FAIL, f"{name} in {count}{of} samples"))
            elif name in NORMAL_REASONS:
                notes.append(f"{name} seen ({NORMAL_REASONS[name]})")
            else:
                notes.append(f"{name} seen (not a failure in this profile)")
        limit, source = temperature_max, "burnin.burn_temperature_C_max"
        if limit is None:
            limit = nvml.get("slowdown_temperature_C") or gpu.nvml.get("temperature_slowdown_C")
            source = "NVML's slowdown threshold"
        hottest = judged.measured.get("temperature_C_max")
        if limit is None:
            notes.append("temperature not judged: no burnin.burn_temperature_C_max and no slowdown threshold from NVML")
        elif hottest is not None:
            judged.expected["temperature_C_max"] = f"<= {limit:g}"
            if hottest > limit:
                findings.append((Status.FAIL, f"hottest sample {hottest:g} °C > {limit:g} °C ({source})"))

    def ok(found: dict[str, Judged]) -> str:
        ratios = sorted((j.ratios["TFLOPS_min"], label) for label, j in found.items() if "TFLOPS_min" in j.ratios)
        hottest = max(((j.measured["temperature_C_max"], label) for label, j in found.items()
                       if "temperature_C_max" in j.measured), default=None)
        seconds = work.get("burn_seconds")
        text = f"sustained load for {seconds:g} s" if isinstance(seconds, (int, float)) else "sustained load"
        if ratios:
            text += f": no throughput collapse (lowest window {ratios[0][0]:.2f} of the median, {ratios[0][1]})"
        if hottest:
            text += f", hottest {hottest[0]:g} °C ({hottest[1]})"
        return text + ", no failing clock event reason, no Xid"

    return judge_each("gpu.burn", "burn", f, judge, ok,
                      "a GPU that slows down or faults under load: check cooling (fans, inlet air, heatsink "
                      "seating), power (PSU, cables, gpu.power), and the Xid named (gpu.xid); drain the node if it "
                      "recurs")


# ---------------------------------------------------------------- gpu.sdc

def majority(checksums: dict[str, str]) -> tuple[str | None, list[str]]:
    """(the checksum more than half of the GPUs gave, the GPUs that differ); (None, all) when no majority."""
    top, count = Counter(checksums.values()).most_common(1)[0]
    if count * 2 > len(checksums):
        return top, [label for label, checksum in checksums.items() if checksum != top]
    return None, list(checksums)


def model_groups(gpus: list[Gpu], checksums: dict[str, str], inputs: dict[str, str]) -> dict[str, dict[str, str]]:
    """The checksums by GPU model (the SKU, else NVML's name) and GEMM inputs (size and seed: the worker shrinks
    the GEMM on a GPU short of memory): only GPUs of one model given the same inputs compute the same bits."""
    groups: dict[str, dict[str, str]] = {}
    for gpu in gpus:
        if gpu.label in checksums:
            model = gpu.sku["id"] if gpu.sku else gpu.name
            groups.setdefault(f"{model}{inputs[gpu.label]}", {})[gpu.label] = checksums[gpu.label]
    return groups


def sdc(f: dict[str, Any], p: Profile) -> Result:
    gpus, gone = gpus_of(f), unreached(f)
    if not gpus and not gone:
        return Result("gpu.sdc", Status.SKIP, reason="no GPU to run the burn-in on")
    found: dict[str, Judged] = {}
    checksums: dict[str, str] = {}
    inputs: dict[str, str] = {}
    for gpu in gpus:
        got = outcome(gpu, "sdc")
        if isinstance(got, Judged):
            found[gpu.label] = got
        elif not isinstance(got.get("checksum"), str) or not got["checksum"]:
            found[gpu.label] = Judged(Status.ERROR, "no checksum in the worker's result")
        else:
            checksums[gpu.label] = got["checksum"]
            inputs[gpu.label] = f" (n={got.get('n')}, seed {got.get('seed')})"
            found[gpu.label] = Judged(Status.PASS, measured={"checksum": got["checksum"][:CHECKSUM_SHOWN]})
    if len(gpus) == 1 and checksums and not gone:
        return Result("gpu.sdc", Status.SKIP, {label: j.measured for label, j in found.items()}, None,
                      "one GPU: gpucheck cluster compares it across nodes")
    for model, group in model_groups(gpus, checksums, inputs).items():
        if len(group) == 1:
            label = next(iter(group))
            found[label] = Judged(Status.SKIP, f"not compared: no other {model} GPU of this node gave a checksum",
                                  found[label].measured)
            continue
        top, differ = majority(group)
        for label in differ:
            mine = group[label][:CHECKSUM_SHOWN]
            why = (f"checksum {mine} differs from the {len(group) - len(differ)} other {model} GPUs' "
                   f"{top[:CHECKSUM_SHOWN]}" if top else
                   f"no majority among the {len(group)} {model} GPUs' checksums ({len(set(group.values()))} "
                   f"different): at least one computes wrong bits")
            found[label] = Judged(Status.FAIL, why, found[label].measured)
        for label in group:
            found[label].expected = {"checksum": "the same on every GPU of one model"}
    return combine("gpu.sdc", found, gpus, "the same seeded GEMM gave bitwise-identical results on every GPU",
                   "silent data corruption: the GPU named computes wrong results without raising an error; drain "
                   "the node, rerun `gpucheck node --only gpu.sdc`, and RMA the GPU if it recurs", gone)
