"""Collect GPU facts through NVML (nvidia-ml-py). No verdicts here: only what the library reports.

Every NVML call runs under its own time limit (`_call`), so a call that hangs (a wedged GPU or
driver) costs only the fields it would have read: what was collected before and after it is kept.
Per field: a value; None when NVML says NOT_SUPPORTED; or None with a record under the GPU's
`errors` (the call, the NVML error name or "hung"/"not_read", its text), so that evaluation can
tell "not applicable" from "could not be read" (per_gpu.py turns the record into the verdict).
A GPU that answers GPU_IS_LOST, whose handle cannot be had, or that answers no call right, is
`lost` with a `lost_reason`.
"""

from __future__ import annotations

import functools
from typing import Any

from ..process import CallTimeout, call_with_timeout
from ..profiles import CLOCK_EVENT_REASONS
from . import CollectError, Context
from .per_gpu import NODE_EVIDENCE

# Clock event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
# NVML's nvmlClocksEventReason* bits 0x1 ... 0x100, named in bit order by the profile schema.
CLOCK_EVENT_BITS = {1 << bit: name for bit, name in enumerate(CLOCK_EVENT_REASONS)}
# A healthy NVML query answers in milliseconds: each gets the node's per-call limit (Context.call_limit);
# nvmlInit (which may bring up every GPU when persistence mode is off) gets the whole --timeout.
HANGS_PER_GPU_MAX = 2  # then the rest of that GPU's fields are not asked for
HANGS_MAX = 4  # then NVML is not asked anything more


def decode(value: Any) -> Any:
    """nvidia-ml-py 13 returns str; older releases returned bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@functools.cache
def _error_names(nv: Any) -> dict[Any, str]:
    return {getattr(nv, n): n for n in dir(nv) if n.startswith("NVML_ERROR_")}


def error_name(nv: Any, exc: Exception) -> str:
    """NVML's name for the error an NVMLError carries (NVML_ERROR_GPU_IS_LOST), from the library module `nv`."""
    code = getattr(exc, "value", None)
    return _error_names(nv).get(code, f"NVML error {code}")


def clock_event_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


class _Unread(Exception):
    """A call that was not answered: it hung, or it was not made because earlier calls hung."""

    def __init__(self, record: dict[str, str]):
        super().__init__(record["text"])
        self.record = record


def _not_responding(call: str, exc: Exception) -> CollectError:
    """NVML hung before any GPU could be read: a wedged driver or GPU is a finding about the node (fail, so
    it is drained), not a probe that could not run."""
    return CollectError(f"NVML call {call} {exc}: the GPU or driver is not responding",
                        remediation=f"check `dmesg` for Xid errors; {NODE_EVIDENCE}; a GPU reset or "
                                    "reboot is likely needed")


class _Collector:
    def __init__(self, timeout: float, call_timeout: float) -> None:
        import pynvml  # imported here: a missing package must be a result, not an import crash

        self.nv = pynvml
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.hung: list[str] = []  # labels of the calls that hung
        self.gpu_hangs: dict[int, list[str]] = {}  # per GPU: the functions that hung on it
        self.answered: dict[int, int] = {}  # per GPU: calls answered with a value or NOT_SUPPORTED

    def error_record(self, call: str, exc: Exception) -> dict[str, str]:
        return {"call": call, "error": error_name(self.nv, exc), "text": str(exc)}

    def _call(self, call: str, fn: Any, *args: Any, index: int | None = None, limit: float | None = None) -> Any:
        """One NVML call under its time limit; NVMLError as the library raises it, _Unread when not answered."""
        if len(self.hung) >= HANGS_MAX:
            raise _Unread({"call": call, "error": "not_read",
                           "text": f"not asked: NVML stopped answering ({len(self.hung)} calls hung)"})
        hung_here = self.gpu_hangs.get(index, []) if index is not None else []
        if len(hung_here) >= HANGS_PER_GPU_MAX:
            raise _Unread({"call": call, "error": "not_read",
                           "text": f"not asked: {', '.join(hung_here)} hung on GPU{index} before"})
        if call in hung_here:  # the same function again (another ECC counter, NVLink): it would hang again
            raise _Unread({"call": call, "error": "not_read", "text": f"not asked: {call} hung on GPU{index} before"})
        limit = self.call_timeout if limit is None else limit
        try:
            return decode(call_with_timeout(fn, limit, *args))
        except CallTimeout:
            self.hung.append(call if index is None else f"{call}(GPU{index})")
            if index is not None:
                self.gpu_hangs.setdefault(index, []).append(call)
            raise _Unread({"call": call, "error": "hung", "text": f"did not return within {limit:g} s"}) from None

    def _field(self, gpu: dict[str, Any], key: str, fn: Any, *args: Any) -> Any:
        """One optional per-GPU field: None when unsupported, an error record kept when not read."""
        call, index = fn.__name__, gpu["index"]
        try:
            value = self._call(call, fn, *args, index=index)
            self.answered[index] = self.answered.get(index, 0) + 1
            return value
        except _Unread as exc:
            gpu["errors"][key] = exc.record
        except self.nv.NVMLError as exc:
            if isinstance(exc, self.nv.NVMLError_GpuIsLost):
                raise
            if isinstance(exc, self.nv.NVMLError_NotSupported):
                self.answered[index] = self.answered.get(index, 0) + 1
            else:
                gpu["errors"][key] = self.error_record(call, exc)
        return None

    def collect(self) -> dict[str, Any]:
        nv = self.nv
        self._init()
        facts: dict[str, Any] = {"errors": {}}
        try:
            for key, fn in (("driver_version", nv.nvmlSystemGetDriverVersion),
                            ("nvml_version", nv.nvmlSystemGetNVMLVersion),
                            ("cuda_driver_version", nv.nvmlSystemGetCudaDriverVersion)):
                facts[key] = self._system_field(facts, key, fn)
            cuda = facts["cuda_driver_version"]
            facts["cuda_driver_version"] = None if cuda is None else f"{cuda // 1000}.{(cuda % 1000) // 10}"
            count = self._required("nvmlDeviceGetCount", nv.nvmlDeviceGetCount)
            facts["gpus"] = [self.gpu(index) for index in range(count)]
            facts["hung_calls"] = list(self.hung)
        finally:
            self._shutdown(facts)
        return facts

    def _init(self) -> None:
        try:
            self._call("nvmlInit", self.nv.nvmlInit, limit=self.timeout)
        except _Unread as exc:
            raise _not_responding("nvmlInit", exc) from None

    def _required(self, call: str, fn: Any) -> Any:
        """A call without which nothing else can be read: its failure fails the collector."""
        try:
            return self._call(call, fn)
        except _Unread as exc:
            raise _not_responding(call, exc) from None
        except self.nv.NVMLError as exc:
            raise CollectError(f"NVML call {call} failed: {exc}") from None

    def _system_field(self, facts: dict[str, Any], key: str, fn: Any) -> Any:
        try:
            return self._call(fn.__name__, fn)
        except _Unread as exc:
            facts["errors"][key] = exc.record
        except self.nv.NVMLError as exc:
            facts["errors"][key] = self.error_record(fn.__name__, exc)
        return None

    def _shutdown(self, facts: dict[str, Any]) -> None:
        """A shutdown that fails or hangs after everything was read costs nothing already collected."""
        if len(self.hung) >= HANGS_MAX:
            return  # NVML stopped answering: the process exits without it
        try:
            self._call("nvmlShutdown", self.nv.nvmlShutdown)
        except _Unread as exc:
            facts["shutdown_error"] = exc.record
        except self.nv.NVMLError as exc:
            facts["shutdown_error"] = self.error_record("nvmlShutdown", exc)

    def gpu(self, index: int) -> dict[str, Any]:
        nv = self.nv
        gpu: dict[str, Any] = {"index": index, "lost": False, "errors": {}}
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", nv.nvmlDeviceGetHandleByIndex, index, index=index)
        except _Unread as exc:
            if exc.record["error"] == "not_read":
                gpu["errors"]["*"] = exc.record  # never asked: every field of it is unread
            else:
                gpu.update(lost=True, lost_reason=f"nvmlDeviceGetHandleByIndex {exc.record['text']}")
            return gpu
        except nv.NVMLError as exc:
            code = self.error_record("nvmlDeviceGetHandleByIndex", exc)["error"]
            gpu.update(lost=True, lost_reason="NVML: GPU is lost" if isinstance(exc, nv.NVMLError_GpuIsLost)
                       else f"nvmlDeviceGetHandleByIndex answered {code}")
            return gpu
        try:
            self.fields(gpu, handle)
        except nv.NVMLError_GpuIsLost:
            gpu.update(lost=True, lost_reason="NVML: GPU is lost")
            return gpu
        own_hangs = self.gpu_hangs.get(index, [])
        # nothing answered right: lost, unless nothing was asked because NVML as a whole stopped answering
        if gpu["errors"] and not self.answered.get(index) and (len(self.hung) < HANGS_MAX or own_hangs):
            first = next(iter(gpu["errors"].values()))
            gpu.update(lost=True, lost_reason=f"no NVML call about it answered ({first['call']}: {first['error']})")
        elif len(own_hangs) >= HANGS_PER_GPU_MAX:
            gpu["stopped_answering"] = f"{' and '.join(own_hangs)} hung"
        return gpu

    def fields(self, gpu: dict[str, Any], handle: Any) -> None:
        nv, field = self.nv, self._field
        gpu["name"] = field(gpu, "name", nv.nvmlDeviceGetName, handle)
        gpu["uuid"] = field(gpu, "uuid", nv.nvmlDeviceGetUUID, handle)
        pci = field(gpu, "pci_bus_id", nv.nvmlDeviceGetPciInfo, handle)
        gpu["pci_bus_id"] = decode(pci.busId) if pci is not None else None
        mem = field(gpu, "memory", nv.nvmlDeviceGetMemoryInfo, handle)
        gpu["memory_total_MiB"] = mem.total // (1024 * 1024) if mem is not None else None
        cc = field(gpu, "compute_capability", nv.nvmlDeviceGetCudaComputeCapability, handle)
        gpu["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
        persistence = field(gpu, "persistence_mode", nv.nvmlDeviceGetPersistenceMode, handle)
        gpu["persistence_mode"] = None if persistence is None else bool(persistence)
        mig = field(gpu, "mig_mode", nv.nvmlDeviceGetMigMode, handle)
        gpu["mig_mode"] = None if mig is None else bool(mig[0])
        gpu["mig_mode_pending"] = None if mig is None else bool(mig[1])
        ecc = field(gpu, "ecc_mode", nv.nvmlDeviceGetEccMode, handle)
        gpu["ecc_mode"] = None if ecc is None else bool(ecc[0])
        # counters are asked for when ECC is on, and when the mode itself could not be read
        gpu["ecc_errors"] = self.ecc_counts(gpu, handle) if gpu["ecc_mode"] or "ecc_mode" in gpu["errors"] else None
        gpu["retired_pages"] = self.retired_pages(gpu, handle)
        rows = field(gpu, "remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
        gpu["remapped_rows"] = None if rows is None else {
            "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
        reasons = field(gpu, "clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
        gpu["clocks_event_reasons"] = clock_event_names(reasons)
        gpu["temperature_C"] = field(gpu, "temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
        gpu["temperature_slowdown_C"] = field(gpu, "temperature_slowdown", nv.nvmlDeviceGetTemperatureThreshold,
                                              handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        power = field(gpu, "power", nv.nvmlDeviceGetPowerUsage, handle)
        gpu["power_W"] = None if power is None else power / 1000
        limit = field(gpu, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        gpu["power_limit_W"] = None if limit is None else limit / 1000
        gpu["pcie"] = {key: field(gpu, f"pcie_{key}", fn, handle) for key, fn in (
            ("gen", nv.nvmlDeviceGetCurrPcieLinkGeneration), ("gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration),
            ("width", nv.nvmlDeviceGetCurrPcieLinkWidth), ("width_max", nv.nvmlDeviceGetMaxPcieLinkWidth))}
        gpu["nvlink"] = self.nvlinks(gpu, handle)
        gpu["numa_node"] = field(gpu, "numa_node", nv.nvmlDeviceGetNumaNodeId, handle)
        gpu["processes"] = self.processes(gpu, handle)
        # what an RMA form asks for (gpucheck rma); asked last, so a GPU that hangs costs no other field for them
        gpu["serial"] = field(gpu, "serial", nv.nvmlDeviceGetSerial, handle)
        gpu["vbios_version"] = field(gpu, "vbios_version", nv.nvmlDeviceGetVbiosVersion, handle)
        gpu["board_part_number"] = field(gpu, "board_part_number", nv.nvmlDeviceGetBoardPartNumber, handle)
        gpu["inforom_image_version"] = field(gpu, "inforom_image_version", nv.nvmlDeviceGetInforomImageVersion,
                                             handle)

    def processes(self, gpu: dict[str, Any], handle: Any) -> list[dict[str, Any]]:
        """The programs on the GPU: [{"pid", "used_MiB" (None: not reported), "kind": compute | graphics}]. Read
        before the agent starts any GPU work of its own, so none of them is the agent's (busy.py)."""
        nv, found = self.nv, []
        for kind, name in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                           ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            fn = getattr(nv, f"{name}_v3", None) or getattr(nv, name)  # _v3: NVML's own name in error records
            for p in self._field(gpu, f"{kind}_processes", fn, handle) or []:
                used = p.usedGpuMemory
                found.append({"pid": int(p.pid), "used_MiB": None if used is None else used // (1024 * 1024),
                              "kind": kind})
        return found

    def ecc_counts(self, gpu: dict[str, Any], handle: Any) -> dict[str, int | None] | None:
        nv = self.nv
        counts: dict[str, int | None] = {}
        for kind, error_type in (("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
                                 ("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED)):
            for scope, counter in (("volatile", nv.NVML_VOLATILE_ECC), ("aggregate", nv.NVML_AGGREGATE_ECC)):
                counts[f"{scope}_{kind}"] = self._field(gpu, f"ecc_{scope}_{kind}", nv.nvmlDeviceGetTotalEccErrors,
                                                        handle, error_type, counter)
        return counts if any(v is not None for v in counts.values()) else None

    def retired_pages(self, gpu: dict[str, Any], handle: Any) -> dict[str, Any] | None:
        nv = self.nv
        sbe = self._field(gpu, "retired_pages", nv.nvmlDeviceGetRetiredPages, handle,
                          nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        if sbe is None:
            return None  # A100 and later retire rows by remapping instead (or the read failed: see errors)
        dbe = self._field(gpu, "retired_pages", nv.nvmlDeviceGetRetiredPages, handle,
                          nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = self._field(gpu, "retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        return {"single_bit": len(sbe), "double_bit": None if dbe is None else len(dbe),
                "pending": None if pending is None else bool(pending)}

    def nvlinks(self, gpu: dict[str, Any], handle: Any) -> dict[str, Any] | None:
        """Link states until NVML says there are no more; None when unsupported or when a link could not be read."""
        nv = self.nv
        states: list[bool] = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                states.append(bool(self._call("nvmlDeviceGetNvLinkState", nv.nvmlDeviceGetNvLinkState, handle, link,
                                              index=gpu["index"])))
            except nv.NVMLError_NotSupported:
                if link == 0:
                    self.answered[gpu["index"]] = self.answered.get(gpu["index"], 0) + 1
                    return None  # no NVLink on this GPU
                break
            except nv.NVMLError_InvalidArgument:
                break  # past the last link of this GPU
            except _Unread as exc:
                gpu["errors"]["nvlink"] = {**exc.record, "call": f"nvmlDeviceGetNvLinkState(link {link})"}
                return None
            except nv.NVMLError as exc:
                if isinstance(exc, nv.NVMLError_GpuIsLost):
                    raise
                gpu["errors"]["nvlink"] = self.error_record(f"nvmlDeviceGetNvLinkState(link {link})", exc)
                return None
        self.answered[gpu["index"]] = self.answered.get(gpu["index"], 0) + 1
        return {"links": len(states), "up": sum(states), "down": [i for i, up in enumerate(states) if not up]}


def collect(ctx: Context) -> dict[str, Any]:
    """Facts for every GPU. Raises CollectError when NVML cannot answer at all."""
    try:
        collector = _Collector(ctx.timeout, ctx.call_limit)
    except ImportError:
        raise CollectError("the nvidia-ml-py package (pynvml) is not installed",
                           remediation="pip install nvidia-ml-py", harness=True) from None
    nv = collector.nv
    try:
        return collector.collect()
    except nv.NVMLError_LibraryNotFound:
        raise CollectError("NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed",
                           remediation="install the NVIDIA driver (site.yml --tags gpu)") from None
    except nv.NVMLError_DriverNotLoaded:
        raise CollectError("NVIDIA kernel driver is not loaded",
                           remediation="load the nvidia module (modprobe nvidia) or reboot after install") from None
    except nv.NVMLError_LibRmVersionMismatch:
        raise CollectError("NVML driver/library version mismatch (user-space library and kernel module differ)",
                           remediation="reboot to load the kernel module matching the installed driver") from None
    except nv.NVMLError as exc:  # only nvmlInit lets one through
        raise CollectError(f"NVML call nvmlInit failed: {exc}") from None
