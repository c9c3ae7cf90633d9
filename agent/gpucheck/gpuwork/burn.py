"""The burn: back-to-back GEMMs for --burn-seconds, throughput per ~1 s window (the GEMMs launched between two
synchronizations), NVML sampled beside it (sampler.py).

bf16 through cuBLAS gemmEx by default; where bf16 cannot run (no cuBLAS gemmEx, a GPU without bf16), fp16
matmul instead, and the result says why (`fallback_reason`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from . import gemm
from .device import synchronize
from .errors import CONTEXT_LOST_ERRORS, cuda_error_name, describe
from .protocol import Interrupted, significant
from .sampler import Sampler, timeline

DEFAULT_SECONDS = 60.0
DEFAULT_DTYPE = "bf16"
FALLBACK_DTYPE = "fp16"
DEFAULT_N = 8192
WINDOW_S = 1.0


def prepared(cp: Any, dtype: str, wanted_n: int) -> tuple[int, Callable[[], None]]:
    """The size and launcher of one GEMM, already run once (cuBLAS set up, the kernel chosen)."""
    n = gemm.fitting_n(cp, dtype, wanted_n)
    call = gemm.gemm_call(cp, dtype, n)
    call()
    synchronize(cp)
    return n, call


def windows(cp: Any, call: Callable[[], None], n: int, seconds: float, found: list[float],
            window_s: float = WINDOW_S) -> None:
    """Appends the TFLOP/s of each window to `found` as it ends, until `seconds` have passed. The GEMM count
    of a window comes from the previous window's pace (launching stops early when the clock says the window
    is over); the last window stretches to end on time (windows of 0.5 to 1.5 window_s)."""
    flops = gemm.flops(n)
    # Calibrate with one GEMM (not a window: too short to mean anything).
    started = time.perf_counter()
    call()
    synchronize(cp)
    per_gemm_s = max(time.perf_counter() - started, 1e-9)
    deadline = started + seconds
    while True:
        left = deadline - time.perf_counter()
        if left < per_gemm_s:
            break
        target = left if left < 1.5 * window_s else window_s
        planned = max(1, int(target / per_gemm_s))
        window_start = time.perf_counter()
        window_end = window_start + target
        count = 0
        while count < planned:
            call()
            count += 1
            if time.perf_counter() > window_end:  # launches block once the GPU is far behind: a slowdown
                break
        synchronize(cp)
        elapsed = max(time.perf_counter() - window_start, 1e-9)
        per_gemm_s = elapsed / count
        found.append(count * flops / elapsed / 1e12)


def run(cp: Any, seconds: float = DEFAULT_SECONDS, dtype: str = DEFAULT_DTYPE, wanted_n: int = DEFAULT_N,
        bus_id: str | None = None) -> dict[str, Any]:
    fallback_reason = None
    try:
        n, call = prepared(cp, dtype, wanted_n)
    except Exception as exc:
        if dtype != DEFAULT_DTYPE or cuda_error_name(exc) in CONTEXT_LOST_ERRORS:
            raise
        fallback_reason = f"{dtype}: {describe(exc)}"
        dtype = FALLBACK_DTYPE
        n, call = prepared(cp, dtype, wanted_n)
    sampler = Sampler(bus_id)
    sampler.start()
    found: list[float] = []
    started = time.perf_counter()
    try:
        windows(cp, call, n, seconds, found)
    except Exception as exc:  # the GPU failed mid-burn: what was seen until then is evidence
        raise Interrupted(exc, figures(dtype, n, time.perf_counter() - started, found, sampler.stop(),
                                       fallback_reason)) from exc
    return figures(dtype, n, time.perf_counter() - started, found, sampler.stop(), fallback_reason)


def figures(dtype: str, n: int, burned_s: float, found: list[float], sampled: dict[str, Any],
            fallback_reason: str | None) -> dict[str, Any]:
    tflops = {"min": significant(min(found)), "median": significant(statistics.median(found)),
              "max": significant(max(found))} if found else None
    windows = [significant(value) for value in found]
    # the windows over time as the NVML series are (at most 120 points), each window's share of the burn as its span
    line = timeline({"TFLOPS": windows}, burned_s / len(found)) if found else None
    return {"dtype": dtype, "n": n, "seconds": round(burned_s, 3), "tflops": tflops, "windows_TFLOPS": windows,
            "windows_timeline": line, **sampled, "fallback_reason": fallback_reason}
