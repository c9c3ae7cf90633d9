"""Collect GPU facts through NVML (nvidia-ml-py). No verdicts here: only what the library reports.

Every NVML call goes through `_call`, which records the call in progress so that, when a call hangs
(a wedged GPU or driver), the error names it. Unsupported fields become None; other per-field
errors are kept under the GPU's `errors` so evaluation can tell "not supported" from "failed".
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..process import CallTimeout, call_with_timeout
from . import CollectError, Context

# Clock event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode(value: Any) -> Any:
    """nvidia-ml-py 13 returns str; older releases returned bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def clock_event_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


class _Collector:
    def __init__(self) -> None:
        import pynvml  # imported here: a missing package must be a result, not an import crash

        self.nv = pynvml
        self.current = "nvmlInit"

    def _call(self, label: str, fn: Any, *args: Any) -> Any:
        self.current = label
        return decode(fn(*args))

    def _field(self, gpu: dict[str, Any], key: str, label: str, fn: Any, *args: Any) -> Any:
        """One optional per-GPU field: None when unsupported, error text kept when it failed."""
        try:
            return self._call(label, fn, *args)
        except self.nv.NVMLError as exc:
            if isinstance(exc, self.nv.NVMLError_GpuIsLost):
                raise
            if not isinstance(exc, self.nv.NVMLError_NotSupported):
                gpu["errors"][key] = str(exc)
            return None

    def collect(self) -> dict[str, Any]:
        nv = self.nv
        self._call("nvmlInit", nv.nvmlInit)
        try:
            facts: dict[str, Any] = {
                "driver_version": self._call("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion),
                "nvml_version": self._call("nvmlSystemGetNVMLVersion", nv.nvmlSystemGetNVMLVersion),
            }
            cuda = self._call("nvmlSystemGetCudaDriverVersion", nv.nvmlSystemGetCudaDriverVersion)
            facts["cuda_driver_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
            count = self._call("nvmlDeviceGetCount", nv.nvmlDeviceGetCount)
            facts["gpus"] = [self.gpu(index) for index in range(count)]
            return facts
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    def gpu(self, index: int) -> dict[str, Any]:
        nv = self.nv
        gpu: dict[str, Any] = {"index": index, "lost": False, "errors": {}}
        tag = f"(GPU{index})"
        try:
            handle = self._call(f"nvmlDeviceGetHandleByIndex{tag}", nv.nvmlDeviceGetHandleByIndex, index)
            gpu["name"] = self._field(gpu, "name", f"nvmlDeviceGetName{tag}", nv.nvmlDeviceGetName, handle)
            gpu["uuid"] = self._field(gpu, "uuid", f"nvmlDeviceGetUUID{tag}", nv.nvmlDeviceGetUUID, handle)
            pci = self._field(gpu, "pci", f"nvmlDeviceGetPciInfo{tag}", nv.nvmlDeviceGetPciInfo, handle)
            gpu["pci_bus_id"] = decode(pci.busId) if pci is not None else None
            mem = self._field(gpu, "memory", f"nvmlDeviceGetMemoryInfo{tag}", nv.nvmlDeviceGetMemoryInfo, handle)
            gpu["memory_total_MiB"] = mem.total // (1024 * 1024) if mem is not None else None
            cc = self._field(gpu, "compute_capability", f"nvmlDeviceGetCudaComputeCapability{tag}",
                             nv.nvmlDeviceGetCudaComputeCapability, handle)
            gpu["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
            persistence = self._field(gpu, "persistence_mode", f"nvmlDeviceGetPersistenceMode{tag}",
                                      nv.nvmlDeviceGetPersistenceMode, handle)
            gpu["persistence_mode"] = None if persistence is None else bool(persistence)
            mig = self._field(gpu, "mig_mode", f"nvmlDeviceGetMigMode{tag}", nv.nvmlDeviceGetMigMode, handle)
            gpu["mig_mode"] = None if mig is None else bool(mig[0])
            gpu["mig_mode_pending"] = None if mig is None else bool(mig[1])
            ecc = self._field(gpu, "ecc_mode", f"nvmlDeviceGetEccMode{tag}", nv.nvmlDeviceGetEccMode, handle)
            gpu["ecc_mode"] = None if ecc is None else bool(ecc[0])
            gpu["ecc_errors"] = self.ecc_counts(gpu, handle, tag) if gpu["ecc_mode"] else None
            gpu["retired_pages"] = self.retired_pages(gpu, handle, tag)
            rows = self._field(gpu, "remapped_rows", f"nvmlDeviceGetRemappedRows{tag}",
                               nv.nvmlDeviceGetRemappedRows, handle)
            gpu["remapped_rows"] = None if rows is None else {
                "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
            reasons = self._field(gpu, "clocks_event_reasons", f"nvmlDeviceGetCurrentClocksEventReasons{tag}",
                                  nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
            gpu["clocks_event_reasons"] = clock_event_names(reasons)
            gpu["temperature_C"] = self._field(gpu, "temperature", f"nvmlDeviceGetTemperature{tag}",
                                               nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
            gpu["temperature_slowdown_C"] = self._field(
                gpu, "temperature_slowdown", f"nvmlDeviceGetTemperatureThreshold{tag}",
                nv.nvmlDeviceGetTemperatureThreshold, handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
            power = self._field(gpu, "power", f"nvmlDeviceGetPowerUsage{tag}", nv.nvmlDeviceGetPowerUsage, handle)
            gpu["power_W"] = None if power is None else power / 1000
            limit = self._field(gpu, "power_limit", f"nvmlDeviceGetEnforcedPowerLimit{tag}",
                                nv.nvmlDeviceGetEnforcedPowerLimit, handle)
            gpu["power_limit_W"] = None if limit is None else limit / 1000
            gpu["pcie"] = {
                key: self._field(gpu, f"pcie_{key}", f"{fn.__name__}{tag}", fn, handle)
                for key, fn in (
                    ("gen", nv.nvmlDeviceGetCurrPcieLinkGeneration),
                    ("gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration),
                    ("width", nv.nvmlDeviceGetCurrPcieLinkWidth),
                    ("width_max", nv.nvmlDeviceGetMaxPcieLinkWidth),
                )
            }
            gpu["nvlink"] = self.nvlinks(gpu, handle, tag)
            gpu["numa_node"] = self._field(gpu, "numa_node", f"nvmlDeviceGetNumaNodeId{tag}",
                                           nv.nvmlDeviceGetNumaNodeId, handle)
        except nv.NVMLError_GpuIsLost:
            gpu["lost"] = True
        return gpu

    def ecc_counts(self, gpu: dict[str, Any], handle: Any, tag: str) -> dict[str, int | None]:
        nv = self.nv
        counts: dict[str, int | None] = {}
        for kind, error_type in (("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
                                 ("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED)):
            for scope, counter in (("volatile", nv.NVML_VOLATILE_ECC), ("aggregate", nv.NVML_AGGREGATE_ECC)):
                counts[f"{scope}_{kind}"] = self._field(
                    gpu, f"ecc_{scope}_{kind}", f"nvmlDeviceGetTotalEccErrors{tag}",
                    nv.nvmlDeviceGetTotalEccErrors, handle, error_type, counter)
        return counts

    def retired_pages(self, gpu: dict[str, Any], handle: Any, tag: str) -> dict[str, Any] | None:
        nv = self.nv
        label = f"nvmlDeviceGetRetiredPages{tag}"
        sbe = self._field(gpu, "retired_pages", label, nv.nvmlDeviceGetRetiredPages, handle,
                          nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        if sbe is None:
            return None  # A100 and later retire rows by remapping instead
        dbe = self._field(gpu, "retired_pages", label, nv.nvmlDeviceGetRetiredPages, handle,
                          nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = self._field(gpu, "retired_pages_pending", f"nvmlDeviceGetRetiredPagesPendingStatus{tag}",
                              nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        return {"single_bit": len(sbe), "double_bit": len(dbe or []),
                "pending": None if pending is None else bool(pending)}

    def nvlinks(self, gpu: dict[str, Any], handle: Any, tag: str) -> dict[str, Any] | None:
        nv = self.nv
        states: list[bool] = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                states.append(bool(self._call(f"nvmlDeviceGetNvLinkState{tag}", nv.nvmlDeviceGetNvLinkState,
                                              handle, link)))
            except nv.NVMLError_NotSupported:
                if link == 0:
                    return None  # no NVLink on this GPU
                break
            except nv.NVMLError_InvalidArgument:
                break  # past the last link of this GPU
            except nv.NVMLError as exc:
                if isinstance(exc, nv.NVMLError_GpuIsLost):
                    raise
                gpu["errors"]["nvlink"] = str(exc)
                break
        return {"links": len(states), "up": sum(states), "down": [i for i, up in enumerate(states) if not up]}


def collect(ctx: Context) -> dict[str, Any]:
    """Facts for every GPU. Raises CollectError when NVML cannot answer at all."""
    try:
        collector = _Collector()
    except ImportError:
        raise CollectError("the nvidia-ml-py package (pynvml) is not installed",
                           remediation="pip install nvidia-ml-py", harness=True) from None
    nv = collector.nv
    try:
        return call_with_timeout(collector.collect, ctx.timeout)
    except CallTimeout as exc:
        raise CollectError(f"NVML call {collector.current} {exc}: the GPU or driver is not responding",
                           remediation="check `dmesg` for Xid errors; a GPU reset or reboot is likely needed",
                           harness=True) from None
    except nv.NVMLError_LibraryNotFound:
        raise CollectError("NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed",
                           remediation="install the NVIDIA driver (site.yml --tags gpu)") from None
    except nv.NVMLError_DriverNotLoaded:
        raise CollectError("NVIDIA kernel driver is not loaded",
                           remediation="load the nvidia module (modprobe nvidia) or reboot after install") from None
    except nv.NVMLError_LibRmVersionMismatch:
        raise CollectError("NVML driver/library version mismatch (user-space library and kernel module differ)",
                           remediation="reboot to load the kernel module matching the installed driver") from None
    except nv.NVMLError as exc:
        raise CollectError(f"NVML call {collector.current} failed: {exc}") from None
