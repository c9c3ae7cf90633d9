"""CuPy and the CUDA devices: importing CuPy lazily, opening the devices, describing them, and the few
helpers every test shares (synchronize, timing, free memory, NVTX ranges).

Timing is the device's synchronize around several calls after a warm-up, timed with time.perf_counter:
simple, and the same on every CuPy version."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from .errors import cuda_error_name, describe
from .protocol import TestCannotRun

CUPY_MISSING = ("CuPy is not installed: install gpucheck's gpu extra (pip install 'gpucheck[gpu]'; "
                "the gpucheck_agent role picks cupy-cuda12x or cupy-cuda13x)")


class Unavailable(Exception):
    """CuPy or a usable CUDA device is missing: the program prints `unavailable` with this reason, exit 3."""


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == "cupy"
        raise Unavailable(CUPY_MISSING if missing else f"{CUPY_MISSING} (import cupy: {describe(exc)})") from None
    except Exception as exc:  # a broken installation raises what it likes
        raise Unavailable(f"CuPy cannot be imported: {describe(exc)}") from None
    return cupy


def open_devices(cp: Any) -> int:
    """How many CUDA devices there are, each with its context created (a tiny allocation on it)."""
    try:
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise Unavailable(f"no usable CUDA device: CUDA sees none (CUDA_VISIBLE_DEVICES={visible!r})")
        for index in range(count):
            with cp.cuda.Device(index):
                cp.zeros(1, dtype=cp.uint8)
                cp.cuda.runtime.deviceSynchronize()
        cp.cuda.Device(0).use()
    except Unavailable:
        raise
    except Exception as exc:
        if cuda_error_name(exc) == "cudaErrorInsufficientDriver":
            raise Unavailable(driver_cannot_run_cuda(cp)) from None
        raise Unavailable(f"no usable CUDA device: {describe(exc)}") from None
    return count


def _cuda_version(read: Callable[[], int]) -> str | None:
    """CUDA's version code (12040) as CUDA writes it (12.4); None where there is none (0) or it cannot be read."""
    try:
        code = int(read())
    except Exception:
        return None
    return f"{code // 1000}.{code % 1000 // 10}" if code > 0 else None


def driver_cannot_run_cuda(cp: Any) -> str:
    """cudaErrorInsufficientDriver in one plain line: the CUDA this CuPy was built for, and what the driver runs
    (none where libcuda does not answer: NVML alone, as on the lab's simulated GPUs, runs no CUDA)."""
    needs = _cuda_version(cp.cuda.runtime.runtimeGetVersion) or "its runtime's version"
    runs = _cuda_version(cp.cuda.runtime.driverGetVersion)
    if runs is None:
        return (f"no usable CUDA device: no CUDA driver answers (cudaErrorInsufficientDriver): this CuPy needs one "
                f"for CUDA {needs}; NVML answering is not enough (libcuda.so.1 must load)")
    return (f"no usable CUDA device: the driver runs CUDA {runs}, this CuPy needs CUDA {needs} "
            f"(cudaErrorInsufficientDriver): install a newer driver, or the CuPy built for CUDA {runs}")


def describe_device(cp: Any, index: int) -> dict[str, Any]:
    props = cp.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    return {"name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
            "total_bytes": int(props["totalGlobalMem"]),
            "compute_capability": f"{props['major']}.{props['minor']}"}


def cublas_version(cp: Any) -> int | None:
    """cuBLAS's version (e.g. 120804), or None where cuBLAS cannot be loaded."""
    try:
        from cupy_backends.cuda.libs import cublas

        return int(cublas.getVersion(cp.cuda.device.get_cublas_handle()))
    except Exception:
        return None


def begin_event(cp: Any, devices: int) -> dict[str, Any]:
    runtime = cp.cuda.runtime
    event = {"event": "begin", "cupy": cp.__version__, "cuda_runtime": runtime.runtimeGetVersion(),
             "cuda_driver": runtime.driverGetVersion(), "cublas": cublas_version(cp),
             "device": describe_device(cp, 0)}
    if devices > 1:
        event["devices"] = [describe_device(cp, index) for index in range(devices)]
    return event


def synchronize(cp: Any) -> None:
    cp.cuda.runtime.deviceSynchronize()


def seconds_per_call(cp: Any, call: Callable[[], object], iterations: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        call()
    synchronize(cp)
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    synchronize(cp)
    return max(time.perf_counter() - start, 1e-9) / iterations


def release_cached(cp: Any) -> None:
    """CuPy's pools keep freed blocks; give them back so that free memory is really free."""
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def free_bytes(cp: Any) -> int:
    return memory_bytes(cp)[0]


def memory_bytes(cp: Any) -> tuple[int, int]:
    """(free, total) bytes of the device, after what this process's pools held is given back."""
    release_cached(cp)
    free, total = cp.cuda.runtime.memGetInfo()
    return int(free), int(total)


def healthy(cp: Any) -> bool:
    """Whether the context still works after an error (a sticky error makes every call fail)."""
    try:
        synchronize(cp)
        cp.zeros(1, dtype=cp.uint8).fill(1)
        synchronize(cp)
        return True
    except Exception:
        return False


@contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """Each test and phase runs in an NVTX range named after it, so a profile (Nsight Systems) shows them;
    NVTX missing is no reason to stop."""
    try:
        from cupy.cuda import nvtx

        nvtx.RangePush(name)
        pushed = True
    except Exception:
        pushed = False
    try:
        yield
    finally:
        if pushed:
            with suppress(Exception):
                nvtx.RangePop()


def square_size(wanted_n: int, item_bytes: int, matrices: int, budget_bytes: float, smallest_n: int = 64) -> int:
    """The largest n, wanted_n halved as often as needed, whose matrices fit in budget_bytes."""
    n = wanted_n
    while n > smallest_n and matrices * n * n * item_bytes > budget_bytes:
        n //= 2
    if matrices * n * n * item_bytes > budget_bytes:
        raise TestCannotRun(f"not enough free GPU memory for {matrices} {n}x{n} matrices "
                          f"({budget_bytes / 2**20:.0f} MiB usable)")
    return n
