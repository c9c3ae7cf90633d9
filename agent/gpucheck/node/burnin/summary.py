"""`facts.burnin` of the node report (docs/burnin.md "Facts the node side keeps"): each GPU's burn-in figures,
for `gpucheck cluster` to compare across nodes, and the node's SDC checksum with the key that says which nodes'
checksums may be compared (the same SKU and the same CuPy, cuBLAS and driver compute the same bits).

Only what was measured is present: a test that failed with a fault or could not run gives no figure here.
"""

from __future__ import annotations

from typing import Any

from .burn_verdicts import majority


def measured(results: dict[str, Any], test: str) -> dict[str, Any] | None:
    result = results.get(test)
    if not isinstance(result, dict) or result.get("error") or result.get("fault"):
        return None
    return result


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def gpu_figures(results: dict[str, Any], sku: dict[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = {"sku": sku["id"]} if sku else {}
    if gemm := measured(results, "gemm"):
        tflops = {dtype: value for dtype, value in (gemm.get("tflops") or {}).items() if number(value)}
        if tflops:
            found["gemm_TFLOPS"] = tflops
    for test, keys in (("memory_bandwidth", ("copy_GBps", "stream_add_GBps")), ("host_bandwidth", ("h2d_GBps",
                                                                                                   "d2h_GBps"))):
        if result := measured(results, test):
            found.update({key: result[key] for key in keys if number(result.get(key))})
    if memtest := measured(results, "memtest"):
        for key, name in (("bad_words", "memtest_bad_words"), ("coverage", "memtest_coverage")):
            if number(memtest.get(key)):
                found[name] = memtest[key]
    if burn := measured(results, "burn"):
        median = (burn.get("tflops") or {}).get("median")
        hottest = ((burn.get("nvml") or {}).get("temperature_C") or {}).get("max")
        if number(median):
            found["burn_TFLOPS_median"] = median
        if number(hottest):
            found["burn_temperature_C_max"] = hottest
        over_time = {"TFLOPS": burn.get("windows_timeline"), "nvml": (burn.get("nvml") or {}).get("timeline")}
        if any(isinstance(line, dict) for line in over_time.values()):  # for a chart of GPUs over time
            found["burn_timeline"] = {key: line for key, line in over_time.items() if isinstance(line, dict)}
    if (sdc := measured(results, "sdc")) and isinstance(sdc.get("checksum"), str):
        found["sdc_checksum"] = sdc["checksum"]
        found["sdc_inputs"] = f"n={sdc.get('n')}, seed {sdc.get('seed')}"
    return found


def sdc_summary(facts: dict[str, Any], gpus: dict[str, Any]) -> dict[str, Any] | None:
    """The checksum of the node's most common GPU model (its majority's; None without one), the GPUs that
    disagree, and the key two nodes' checksums must share to be compared."""
    work = facts["gpuwork"].get("gpus") or {}
    names = {g["index"]: g.get("name") for g in (facts.get("nvml") or {}).get("gpus", [])}
    models: dict[str, dict[str, str]] = {}
    for label, figures in gpus.items():
        if "sdc_checksum" in figures:
            model = figures.get("sku") or names.get(work[label].get("index")) or "unknown GPU"
            models.setdefault(f"{model} | sdc {figures.get('sdc_inputs')}", {})[label] = figures["sdc_checksum"]
    if not models:
        return None
    model, checksums = max(models.items(), key=lambda item: len(item[1]))
    checksum, disagree = majority(checksums)
    begin = next((work[label].get("begin") for label in checksums if work[label].get("begin")), None) or {}
    driver = (facts.get("nvml") or {}).get("driver_version") or begin.get("cuda_driver")
    key = f"{model} | cupy {begin.get('cupy')} | cuBLAS {begin.get('cublas')} | driver {driver}"
    return {"checksum": checksum, "key": key, "disagree": disagree}


def summary(facts: dict[str, Any]) -> dict[str, Any] | None:
    """facts.burnin from the collected facts; None when the burn-in did not run."""
    if not isinstance(facts.get("gpuwork"), dict):
        return None
    skus = (facts.get("sku") or {}).get("gpus") or {}
    gpus = {label: gpu_figures(work.get("results") or {}, skus.get(label))
            for label, work in (facts["gpuwork"].get("gpus") or {}).items()}
    return {"gpus": gpus, "sdc": sdc_summary(facts, gpus)}
