"""NVML sampled during the burn by a daemon thread: SM clock, temperature, power and the clocks event reasons
twice a second, and the slowdown temperature once.

NVML failing, missing or hanging never stops the burn: the thread records why (`nvml_error`), and a call
that never returns leaves the thread behind (a daemon: the worker still reports and exits)."""

from __future__ import annotations

import math
import statistics
import threading
from typing import Any

SAMPLE_INTERVAL_S = 0.5
JOIN_TIMEOUT_S = 2.0
# The series kept whole, for a chart of GPUs over time (a 10-minute burn: a point every 5 s; an hour: every 30 s).
TIMELINE_POINTS = 120
# nvmlClocksEventReason* bits 0..8 (nvml.h), by the names the scenarios and docs/burnin.md use.
REASON_BITS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
               "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting")


def reason_names(mask: int) -> list[str]:
    names = [name for bit, name in enumerate(REASON_BITS) if mask & (1 << bit)]
    return names + [f"bit{bit}" for bit in range(len(REASON_BITS), 64) if mask & (1 << bit)]


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": round(statistics.median(values), 3), "max": max(values)}


def timeline(series: dict[str, list[float]], interval_s: float) -> dict[str, Any]:
    """Series over time (the NVML samples, or the burn's throughput windows), at most TIMELINE_POINTS points each:
    the mean of each run of `every` values taken `interval_s` apart (a run cut short at the end is the mean of what it
    has), one point every `every_s` seconds."""
    every = max(1, math.ceil(max(map(len, series.values()), default=0) / TIMELINE_POINTS))
    return {"every_s": round(every * interval_s, 3),
            **{key: [round(statistics.fmean(values[i:i + every]), 2) for i in range(0, len(values), every)]
               for key, values in series.items()}}


def nvml_failure(call: str, exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{call}: {text}"


class Sampler:
    """Start with start(); stop() returns the figures (`samples`, `nvml`, `nvml_error`)."""

    def __init__(self, bus_id: str | None, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.bus_id = bus_id
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.calling: str | None = None  # the NVML call in progress (named if it never returns)
        self.samples = 0
        self.series: dict[str, list[float]] = {"sm_clock_MHz": [], "temperature_C": [], "power_W": []}
        self.reasons: dict[str, int] = {}
        self.slowdown_C: float | None = None
        self.errors: dict[str, str] = {}
        self.thread = threading.Thread(target=self.work, name="nvml-sampler", daemon=True)

    def start(self) -> None:
        if self.bus_id:
            self.thread.start()

    def call(self, name: str, function: Any, *args: Any) -> Any:
        """One NVML call; its failure is recorded under its name and answered None."""
        self.calling = name
        try:
            return function(*args)
        except Exception as exc:
            with self.lock:
                self.errors.setdefault(name, nvml_failure(name, exc))
            return None
        finally:
            self.calling = None

    def work(self) -> None:
        try:
            import pynvml
        except Exception as exc:
            self.errors["pynvml"] = f"pynvml cannot be imported: {exc}"
            return
        self.call("nvmlInit", pynvml.nvmlInit)
        if "nvmlInit" in self.errors:
            return
        try:
            handle = self.call("nvmlDeviceGetHandleByPciBusId_v2", pynvml.nvmlDeviceGetHandleByPciBusId,
                               self.bus_id)
            if handle is not None:
                self.slowdown_C = self.call("nvmlDeviceGetTemperatureThreshold",
                                            pynvml.nvmlDeviceGetTemperatureThreshold, handle,
                                            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
                while not self.stopping.is_set():
                    self.sample(pynvml, handle)
                    self.stopping.wait(self.interval_s)
        finally:
            self.call("nvmlShutdown", pynvml.nvmlShutdown)

    def sample(self, pynvml: Any, handle: Any) -> None:
        clock = self.call("nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
        temperature = self.call("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature, handle,
                                pynvml.NVML_TEMPERATURE_GPU)
        power_mW = self.call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, handle)
        reasons = self.call("nvmlDeviceGetCurrentClocksEventReasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons,
                            handle)
        if (clock, temperature, power_mW, reasons) == (None, None, None, None):
            return  # nothing answered: not a sample (the errors say why)
        with self.lock:
            self.samples += 1
            for key, value in (("sm_clock_MHz", clock), ("temperature_C", temperature),
                               ("power_W", None if power_mW is None else power_mW / 1000)):
                if value is not None:
                    self.series[key].append(value)
            for name in reason_names(reasons or 0):
                self.reasons[name] = self.reasons.get(name, 0) + 1

    def stop(self) -> dict[str, Any]:
        if not self.bus_id:
            return {"samples": 0, "sample_interval_s": self.interval_s, "nvml": None,
                    "nvml_error": "no --bus-id given: NVML not sampled"}
        self.stopping.set()
        self.thread.join(JOIN_TIMEOUT_S)
        hung = self.calling if self.thread.is_alive() else None
        with self.lock:
            errors = dict(self.errors)
            if hung:
                errors[hung] = f"{hung}: did not return within the burn (NVML hung)"
            sampled = self.samples > 0
            nvml = {**{key: spread(values) for key, values in self.series.items()},
                    "reasons_seen": dict(self.reasons), "slowdown_temperature_C": self.slowdown_C,
                    "timeline": timeline(self.series, self.interval_s)} if sampled else None
            error = "; ".join(errors[name] for name in sorted(errors) if name != "nvmlShutdown") or None
            return {"samples": self.samples, "sample_interval_s": self.interval_s, "nvml": nvml,
                    "nvml_error": error}
