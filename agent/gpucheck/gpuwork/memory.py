"""Device memory bandwidth: a device-to-device copy counted as read + write bytes, and STREAM's "add"
(c = a + b: two reads and one write), each over arrays of `bytes` bytes."""

from __future__ import annotations

from typing import Any

from .device import free_bytes, seconds_per_call
from .protocol import TestCannotRun, significant

DEFAULT_BYTES = 2**30
DEFAULT_ITERATIONS = 20
FLOAT32_BYTES = 4
ALIGN_BYTES = 2**20


def array_bytes(cp: Any, wanted_bytes: int) -> int:
    """wanted_bytes, or less so that three arrays take at most half of the free memory (MiB-aligned when large)."""
    size = min(wanted_bytes, int(free_bytes(cp) * 0.5) // 3)
    if size >= 4 * ALIGN_BYTES:
        size -= size % ALIGN_BYTES
    size -= size % FLOAT32_BYTES
    if size < FLOAT32_BYTES:
        raise TestCannotRun("not enough free GPU memory for the bandwidth arrays")
    return size


def run(cp: Any, wanted_bytes: int = DEFAULT_BYTES, iterations: int = DEFAULT_ITERATIONS) -> dict[str, Any]:
    nbytes = array_bytes(cp, wanted_bytes)
    words = nbytes // FLOAT32_BYTES
    a = cp.full(words, 1.0, dtype=cp.float32)
    b = cp.full(words, 2.0, dtype=cp.float32)
    c = cp.empty(words, dtype=cp.float32)
    copy_s = seconds_per_call(cp, lambda: cp.copyto(c, a), iterations)
    add_s = seconds_per_call(cp, lambda: cp.add(a, b, out=c), iterations)
    return {"copy_GBps": significant(2 * nbytes / copy_s / 1e9),
            "stream_add_GBps": significant(3 * nbytes / add_s / 1e9), "bytes": nbytes}
