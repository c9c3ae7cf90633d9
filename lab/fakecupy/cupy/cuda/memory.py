"""The fake cupy.cuda.memory: pinned host memory and the pools (the fake frees at once: nothing cached)."""

from __future__ import annotations

import numpy as np
from cupy_backends.fakegpu import OutOfMemoryError

__all__ = ["MemoryPool", "OutOfMemoryError", "PinnedMemoryPointer", "PinnedMemoryPool", "alloc_pinned_memory"]


class PinnedMemoryPointer:
    def __init__(self, size: int) -> None:
        self.buffer = np.empty(max(1, size), dtype=np.uint8)
        self.ptr = self.buffer.ctypes.data
        self.size = size


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    return PinnedMemoryPointer(size)


class MemoryPool:
    def free_all_blocks(self, stream: object = None) -> None:
        pass

    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0


class PinnedMemoryPool:
    def free_all_blocks(self) -> None:
        pass

    def n_free_blocks(self) -> int:
        return 0
