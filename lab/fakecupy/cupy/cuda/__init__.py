"""The fake cupy.cuda (see cupy/__init__.py)."""

from __future__ import annotations

from cupy_backends.cuda.api import runtime

from cupy.cuda import device, memory, nvtx  # noqa: F401 - submodules, as in CuPy
from cupy.cuda.device import Device
from cupy.cuda.memory import OutOfMemoryError, PinnedMemoryPointer, alloc_pinned_memory
from cupy.cuda.stream import Stream, get_current_stream

__all__ = ["Device", "OutOfMemoryError", "PinnedMemoryPointer", "Stream", "alloc_pinned_memory",
           "get_current_stream", "runtime"]
