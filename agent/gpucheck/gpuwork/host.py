"""Host <-> device bandwidth over pinned host memory, and binding the worker to the GPU's CPUs.

The worker binds itself (sched_setaffinity) before CuPy allocates any host memory, so pinned buffers are
first touched on the CPUs the node side chose (the GPU's NUMA node)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from .device import free_bytes, seconds_per_call
from .protocol import TestCannotRun, significant

DEFAULT_BYTES = 256 * 2**20
DEFAULT_ITERATIONS = 10


def parse_cpus(text: str) -> set[int]:
    """A Linux CPU list ("0-55,112-167") as a set; ValueError names what is wrong."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"not a CPU list (e.g. 0-55,112-167): {text!r}")
        low, high = int(first), int(last or first)
        if high < low:
            raise ValueError(f"not a CPU list (a range runs backwards): {text!r}")
        cpus.update(range(low, high + 1))
    return cpus


def format_cpus(cpus: set[int]) -> str:
    """The set as a Linux CPU list, ranges merged."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    start = previous = ordered[0] if ordered else 0
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ",".join(ranges) if ordered else ""


def bind(cpus: set[int]) -> str:
    """Bind this process to `cpus`; returns the affinity set as a CPU list. OSError when the kernel refuses."""
    os.sched_setaffinity(0, cpus)
    return format_cpus(os.sched_getaffinity(0))


def pinned_host_array(cp: Any, nbytes: int) -> tuple[Any, np.ndarray]:
    """Pinned (page-locked) host memory seen as a numpy array; keep the first item alive while using it."""
    memory = cp.cuda.alloc_pinned_memory(nbytes)
    array = np.frombuffer((ctypes.c_ubyte * nbytes).from_address(memory.ptr), dtype=np.uint8)
    array.fill(1)
    return memory, array


def run(cp: Any, cpus: str | None, binding_error: str | None, nbytes: int = DEFAULT_BYTES,
        iterations: int = DEFAULT_ITERATIONS) -> dict[str, Any]:
    """`cpus`: the affinity set the worker bound itself to (None: not asked); `binding_error`: why it could not."""
    if binding_error:
        raise TestCannotRun(binding_error)
    nbytes = min(nbytes, free_bytes(cp) // 2)  # a GPU short of memory copies less, as the other tests do
    if nbytes < 1:
        raise TestCannotRun("no free GPU memory for the host copy buffer")
    keep, host = pinned_host_array(cp, nbytes)
    dev = cp.empty(nbytes, dtype=cp.uint8)
    h2d_s = seconds_per_call(cp, lambda: dev.set(host), iterations)
    d2h_s = seconds_per_call(cp, lambda: dev.get(out=host), iterations)
    del keep
    return {"h2d_GBps": significant(nbytes / h2d_s / 1e9), "d2h_GBps": significant(nbytes / d2h_s / 1e9),
            "bytes": nbytes, "pinned": True, "cpus": cpus}
