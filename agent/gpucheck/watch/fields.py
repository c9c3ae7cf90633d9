"""The cheap fields the watcher polls, and which check each one concerns: NVML's, and each InfiniBand port's
link_downed (a flap; read from sysfs at each poll, whatever NVML does).

NVML is asked from one thread of its own (`Sampler`), initialised once and kept so: a poll is a few dozen calls
that answer in microseconds. A call that does not answer within the limit leaves that thread where it hangs (a C
call cannot be interrupted): the sampler says "hung" at once and asks nothing more until the thread comes back.
NVML gone (the driver unloaded during an upgrade) is "unavailable", asked again after a back-off.

`concerned` is pure: two samples in, the ids of the checks whose facts moved out, with why, in words.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..node.links import find_fabric_manager
from ..node.nvml import error_name

# Which check each field concerns: per GPU, then the node's (gpu_count, fabric_manager).
CHECK_OF = {"ecc_uncorrected": "gpu.ecc_errors", "remapped_rows": "gpu.row_remap",
            "retired_pending": "gpu.retired_pages", "clock_events": "gpu.clocks", "temperature_c": "gpu.temperature",
            "power_limit_mw": "gpu.power", "pcie_width": "gpu.pcie", "nvlinks_up": "gpu.nvlink", "gpu": "gpu.count",
            "gpu_count": "gpu.count", "fabric_manager": "gpu.fabric_manager"}
FLAP_CHECK = "ib.counters"  # what a port's link_downed stepping concerns (not NVML's: an NVML hang leaves it be)
# Clock-event bits that mean the GPU is held back by something other than its own choice (nvml.h:
# SW thermal 0x20, HW slowdown 0x8, HW thermal 0x40, HW power brake 0x80): idle, application clocks and the SW
# power cap come and go with the load and would wake the judge for nothing.
CLOCK_EVENTS_WATCHED = 0x8 | 0x20 | 0x40 | 0x80
TEMPERATURE_STEP_C = 5  # a rise this large since the last judged reading is judged again; a fall never is
NVLINK_MAX = 18  # NVML_NVLINK_MAX_LINKS
UNAVAILABLE_RETRY_S = 30.0


class Hung(Exception):
    """NVML did not answer within the limit (the thread that asked is still inside the call)."""


class Unavailable(Exception):
    """NVML cannot be initialised (no driver, the library gone): str(e) says why."""


@dataclass
class Sampler:
    call_limit: float = 10.0

    def __post_init__(self) -> None:
        self.requests: queue.Queue[str] = queue.Queue()
        self.answers: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.pending = 0  # requests the thread has not answered (1 while it hangs)
        self.thread: threading.Thread | None = None
        self.retry_at = 0.0

    def sample(self) -> dict[str, Any]:
        """{"gpu_count", "fabric_manager", "gpus": {index: {field: value}}}; Hung or Unavailable."""
        if self.pending:
            try:  # an answer that came late (the hang ended): dropped, a fresh one is asked for
                self.answers.get_nowait()
                self.pending -= 1
            except queue.Empty:
                raise Hung("NVML has not answered since a call hung") from None
        if time.monotonic() < self.retry_at:
            raise Unavailable("NVML could not be initialised; asked again shortly")
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="gpucheck-watch-nvml", daemon=True)
            self.thread.start()
        self.requests.put("sample")
        self.pending += 1
        try:
            kind, value = self.answers.get(timeout=self.call_limit)
        except queue.Empty:
            raise Hung(f"an NVML call did not answer within {self.call_limit:g} s") from None
        self.pending -= 1
        if kind == "unavailable":
            self.retry_at = time.monotonic() + UNAVAILABLE_RETRY_S
            raise Unavailable(value)
        return value

    def release(self) -> None:
        """Let go of NVML (nvmlShutdown) before a GPU reset, which the driver refuses while anyone holds the GPU;
        the next sample initialises it again. Waits for the thread, unless a call of it hangs."""
        if self.thread is None or self.pending:
            return
        self.requests.put("release")
        self.pending += 1
        try:
            self.answers.get(timeout=self.call_limit)
            self.pending -= 1
        except queue.Empty:
            pass

    def _serve(self) -> None:
        import pynvml

        ready = False
        while True:
            if self.requests.get() == "release":
                if ready:
                    with contextlib.suppress(pynvml.NVMLError):
                        pynvml.nvmlShutdown()
                ready = False
                self.answers.put(("released", None))
                continue
            try:
                if not ready:
                    pynvml.nvmlInit()
                    ready = True
                self.answers.put(("sample", read_all(pynvml)))
            except pynvml.NVMLError as exc:
                if ready:
                    with contextlib.suppress(pynvml.NVMLError):
                        pynvml.nvmlShutdown()
                ready = False
                self.answers.put(("unavailable", f"NVML: {exc}"))
            except Exception as exc:  # a library that is not NVML at all
                self.answers.put(("unavailable", f"NVML: {type(exc).__name__}: {exc}"))


def read_all(nv: Any) -> dict[str, Any]:
    """One poll: every GPU's watched fields. A field NVML does not support is None; one it refused is the error's
    name (a change of it is a change); a GPU whose handle cannot be had is only its error."""
    count = nv.nvmlDeviceGetCount()
    gpus: dict[str, Any] = {}
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            gpus[str(index)] = {"gpu": error_name(nv, exc)}
            continue
        gpus[str(index)] = {
            "ecc_uncorrected": _field(nv, nv.nvmlDeviceGetTotalEccErrors, handle, 1, 0),  # uncorrected, volatile
            "remapped_rows": _field(nv, lambda h: list(nv.nvmlDeviceGetRemappedRows(h))[1:], handle),
            "retired_pending": _field(nv, nv.nvmlDeviceGetRetiredPagesPendingStatus, handle),
            "clock_events": _masked(_field(nv, nv.nvmlDeviceGetCurrentClocksEventReasons, handle)),
            "temperature_c": _field(nv, nv.nvmlDeviceGetTemperature, handle, 0),
            "power_limit_mw": _field(nv, nv.nvmlDeviceGetEnforcedPowerLimit, handle),
            "pcie_width": _field(nv, nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
            "nvlinks_up": _links_up(nv, handle),
        }
    return {"gpu_count": count, "fabric_manager": find_fabric_manager()["running"], "gpus": gpus}


def _field(nv: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nv.NVMLError_NotSupported:
        return None
    except nv.NVMLError as exc:
        return error_name(nv, exc)


def _masked(value: Any) -> Any:
    return value & CLOCK_EVENTS_WATCHED if isinstance(value, int) else value


def _links_up(nv: Any, handle: Any) -> Any:
    up = 0
    for link in range(NVLINK_MAX):
        try:
            up += bool(nv.nvmlDeviceGetNvLinkState(handle, link))
        except nv.NVMLError_NotSupported:
            return up if link else None  # past the GPU's last link, or no NVLink at all
        except nv.NVMLError_InvalidArgument:
            return up
        except nv.NVMLError as exc:
            return error_name(nv, exc)
    return up


def concerned(before: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, list[str]]:
    """The checks to run now, each with what moved ("GPU2 ecc_uncorrected 0 -> 1"). No earlier sample: nothing."""
    if before is None:
        return {}
    moved: dict[str, list[str]] = {}

    def note(key: str, what: str, old: Any, new: Any) -> None:
        moved.setdefault(CHECK_OF[key], []).append(f"{what}{key} {old} -> {new}")

    for key in ("gpu_count", "fabric_manager"):
        if before.get(key) != now.get(key):
            note(key, "", before.get(key), now.get(key))
    for index, fields in now.get("gpus", {}).items():
        old = before.get("gpus", {}).get(index, {})
        for key, value in fields.items():
            was = old.get(key)
            if key == "temperature_c" and isinstance(value, int) and isinstance(was, int):
                if value - was >= TEMPERATURE_STEP_C:
                    note(key, f"GPU{index} ", was, value)
            elif value != was:
                note(key, f"GPU{index} ", was, value)
    return moved


def flaps(before: dict[str, int] | None, now: dict[str, int]) -> dict[str, list[str]]:
    """The InfiniBand ports whose link_downed stepped (a flap) as `concerned` says moves: nothing without an earlier
    reading, nor for a port not read before."""
    stepped = [f"{port} link_downed {before[port]} -> {count}" for port, count in now.items()
               if before is not None and port in before and before[port] != count]
    return {FLAP_CHECK: stepped} if stepped else {}


def settled(before: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any]:
    """The sample the next one is compared with: `now`, except that a temperature keeps the reading last judged
    until it rises by a step (a slow climb is judged once per step, never missed)."""
    if before is None:
        return now
    out = {**now, "gpus": {}}
    for index, fields in now.get("gpus", {}).items():
        kept = dict(fields)
        was = before.get("gpus", {}).get(index, {}).get("temperature_c")
        value = fields.get("temperature_c")
        if isinstance(was, int) and isinstance(value, int) and value - was < TEMPERATURE_STEP_C:
            kept["temperature_c"] = min(was, value)
        out["gpus"][index] = kept
    return out
