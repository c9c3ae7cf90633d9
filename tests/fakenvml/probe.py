"""Ask NVML everything the agent may ask, through pynvml, and print one JSON line per answer.

Run in a subprocess whose environment points ``libnvidia-ml.so.1`` at the fake (``env_for``).
Each line is ``{"gpu": N|null, "key": K, "value": V}`` or ``{"gpu": ..., "key": K, "error": CLASS}``
where CLASS is the pynvml exception class name (``NVMLError_GpuIsLost``...). Lines are flushed
one by one, so a run killed by a timeout still shows how far it got.

    python probe.py [--only KEY,KEY...] [--gpus N,N...] [--no-shutdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import pynvml as nv


def emit(gpu: int | None, key: str, fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except nv.NVMLError as exc:
        print(json.dumps({"gpu": gpu, "key": key, "error": type(exc).__name__}), flush=True)
        return None
    print(json.dumps({"gpu": gpu, "key": key, "value": value}), flush=True)
    return value


def struct(obj: Any, fields: list[str]) -> dict[str, Any]:
    out = {}
    for name in fields:
        value = getattr(obj, name)
        out[name] = list(value) if hasattr(value, "__len__") and not isinstance(value, str) else value
    return out


def nvlinks(h: Any) -> dict[str, Any]:
    """States of links 0.. until the first error, and that error."""
    states = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS + 1):
        try:
            states.append(nv.nvmlDeviceGetNvLinkState(h, link))
        except nv.NVMLError as exc:
            if not states:
                raise
            return {"states": states, "stop": type(exc).__name__}
    return {"states": states, "stop": None}


def fabric_v1(h: Any) -> dict[str, Any]:
    info = nv.c_nvmlGpuFabricInfo_t()
    nv.nvmlDeviceGetGpuFabricInfo(h, nv.byref(info))
    return struct(info, ["clusterUuid", "status", "cliqueId", "state"])


def fabric_v(h: Any, cls: Any, fields: list[str]) -> dict[str, Any]:
    info = cls()
    nv.nvmlDeviceGetGpuFabricInfoV(h, nv.byref(info))
    return struct(info, ["version", *fields])


FABRIC_V2 = ["clusterUuid", "status", "cliqueId", "state", "healthMask"]

GPU_CALLS: dict[str, Callable[[Any], Any]] = {
    "index": nv.nvmlDeviceGetIndex,
    "minor_number": nv.nvmlDeviceGetMinorNumber,
    "name": nv.nvmlDeviceGetName,
    "uuid": nv.nvmlDeviceGetUUID,
    "serial": nv.nvmlDeviceGetSerial,
    "vbios_version": nv.nvmlDeviceGetVbiosVersion,
    "board_part_number": nv.nvmlDeviceGetBoardPartNumber,
    "inforom_image_version": nv.nvmlDeviceGetInforomImageVersion,
    "pci": lambda h: struct(nv.nvmlDeviceGetPciInfo(h), [
        "busIdLegacy", "domain", "bus", "device", "pciDeviceId", "pciSubSystemId", "busId"]),
    "memory": lambda h: struct(nv.nvmlDeviceGetMemoryInfo(h), ["total", "free", "used"]),
    "memory_v2": lambda h: struct(nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
                                  ["version", "total", "reserved", "free", "used"]),
    "compute_capability": lambda h: list(nv.nvmlDeviceGetCudaComputeCapability(h)),
    "persistence_mode": nv.nvmlDeviceGetPersistenceMode,
    "mig_mode": nv.nvmlDeviceGetMigMode,
    "ecc_mode": nv.nvmlDeviceGetEccMode,
    "ecc_corrected_volatile": lambda h: nv.nvmlDeviceGetTotalEccErrors(
        h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
    "ecc_corrected_aggregate": lambda h: nv.nvmlDeviceGetTotalEccErrors(
        h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
    "ecc_uncorrected_volatile": lambda h: nv.nvmlDeviceGetTotalEccErrors(
        h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
    "ecc_uncorrected_aggregate": lambda h: nv.nvmlDeviceGetTotalEccErrors(
        h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
    "retired_pages_sbe": lambda h: nv.nvmlDeviceGetRetiredPages(
        h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
    "retired_pages_dbe": lambda h: nv.nvmlDeviceGetRetiredPages(
        h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    "retired_pages_pending": nv.nvmlDeviceGetRetiredPagesPendingStatus,
    "remapped_rows": lambda h: list(nv.nvmlDeviceGetRemappedRows(h)),
    "compute_processes": lambda h: [[p.pid, p.usedGpuMemory] for p in nv.nvmlDeviceGetComputeRunningProcesses(h)],
    "graphics_processes": lambda h: [[p.pid, p.usedGpuMemory] for p in nv.nvmlDeviceGetGraphicsRunningProcesses(h)],
    "clocks_event_reasons": nv.nvmlDeviceGetCurrentClocksEventReasons,
    "clocks_throttle_reasons": nv.nvmlDeviceGetCurrentClocksThrottleReasons,
    "sm_clock_MHz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "mem_clock_MHz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    "temperature": lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "temperature_v": lambda h: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU),
    "threshold_shutdown": lambda h: nv.nvmlDeviceGetTemperatureThreshold(
        h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    "threshold_slowdown": lambda h: nv.nvmlDeviceGetTemperatureThreshold(
        h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
    "threshold_gpu_max": lambda h: nv.nvmlDeviceGetTemperatureThreshold(
        h, nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
    "threshold_mem_max": lambda h: nv.nvmlDeviceGetTemperatureThreshold(
        h, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
    "power_usage_mW": nv.nvmlDeviceGetPowerUsage,
    "enforced_power_limit_mW": nv.nvmlDeviceGetEnforcedPowerLimit,
    "pcie_gen_current": nv.nvmlDeviceGetCurrPcieLinkGeneration,
    "pcie_gen_max": nv.nvmlDeviceGetMaxPcieLinkGeneration,
    "pcie_width_current": nv.nvmlDeviceGetCurrPcieLinkWidth,
    "pcie_width_max": nv.nvmlDeviceGetMaxPcieLinkWidth,
    "nvlink": nvlinks,
    "numa_node": nv.nvmlDeviceGetNumaNodeId,
    "fabric": fabric_v1,
    "fabric_v2": lambda h: fabric_v(h, nv.c_nvmlGpuFabricInfo_v2_t, FABRIC_V2),
    "fabric_v3": lambda h: fabric_v(h, nv.c_nvmlGpuFabricInfo_v3_t, [*FABRIC_V2, "healthSummary"]),
    "handle_by_uuid_index": lambda h: nv.nvmlDeviceGetIndex(
        nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(h))),
    "handle_by_pci_index": lambda h: nv.nvmlDeviceGetIndex(
        nv.nvmlDeviceGetHandleByPciBusId(nv.nvmlDeviceGetPciInfo(h).busId)),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated GPU_CALLS keys")
    parser.add_argument("--gpus", default="", help="comma-separated GPU indices (default: all)")
    parser.add_argument("--no-shutdown", action="store_true")
    args = parser.parse_args()
    only = [k for k in args.only.split(",") if k]
    unknown = [k for k in only if k not in GPU_CALLS]
    if unknown:
        parser.error(f"unknown keys {unknown}")

    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        print(json.dumps({"gpu": None, "key": "init", "error": type(exc).__name__}), flush=True)
        emit(None, "count_after_failed_init", nv.nvmlDeviceGetCount)
        return 0
    print(json.dumps({"gpu": None, "key": "init", "value": None}), flush=True)
    emit(None, "driver_version", nv.nvmlSystemGetDriverVersion)
    emit(None, "nvml_version", nv.nvmlSystemGetNVMLVersion)
    emit(None, "cuda_driver_version", nv.nvmlSystemGetCudaDriverVersion)
    emit(None, "cuda_driver_version_v2", nv.nvmlSystemGetCudaDriverVersion_v2)
    emit(None, "error_string_18", lambda: nv.nvmlErrorString(nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    count = emit(None, "count", nv.nvmlDeviceGetCount) or 0
    gpus = [int(g) for g in args.gpus.split(",") if g] or list(range(count))
    for i in gpus:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as exc:
            print(json.dumps({"gpu": i, "key": "handle", "error": type(exc).__name__}), flush=True)
            continue
        print(json.dumps({"gpu": i, "key": "handle", "value": True}), flush=True)
        for key, call in GPU_CALLS.items():
            if not only or key in only:
                emit(i, key, lambda call=call, h=h: call(h))
    if not args.no_shutdown:
        emit(None, "shutdown", nv.nvmlShutdown)
        emit(None, "count_after_shutdown", nv.nvmlDeviceGetCount)
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
