"""A fake `cupy` for testing gpucheck's GPU programs (agent/gpucheck/gpuwork) on a machine without a GPU.

Put tests/fakecupy FIRST on the PYTHONPATH of the child process that runs a program; it shadows both `cupy`
and `cupy_backends`. numpy does the work; each simulated device's memory is a numpy arena of
FAKECUPY_FREE_BYTES, so `data.ptr` is a real address and memory runs out as on a GPU. Never import it into
the pytest process itself (it would shadow the real CuPy there).

Only the API the programs use is implemented: ndarray (get/set/fill/indexing/astype/view/==/!=/@, .data.ptr),
empty/zeros/full/arange/asarray, matmul/add/copyto/count_nonzero/flatnonzero, the memory pools;
cuda.runtime (getDeviceCount, getDeviceProperties, memGetInfo, deviceSynchronize, deviceCanAccessPeer,
deviceEnablePeerAccess, memcpy, memcpyPeer, versions), cuda.Device, cuda.Stream, cuda.alloc_pinned_memory,
cuda.device.get_cublas_handle, cuda.nvtx, cuda.nccl (initAll, groupStart/groupEnd, allReduce: sum float32),
and cupy_backends.cuda.libs.cublas.gemmEx/getVersion. Anything else is an AttributeError: add it here when a
program needs it, keeping it faithful to real CuPy.

Environment (scenarios):
  FAKECUPY_DEVICES=N        physical GPUs (default: the CUDA_VISIBLE_DEVICES entries, or 1); 0 = no driver:
                            getDeviceCount raises cudaErrorInsufficientDriver, as real CuPy does without one.
                            CUDA_VISIBLE_DEVICES limits what is seen ("" = cudaErrorNoDevice).
  FAKECUPY_DRIVER_CUDA=N    the CUDA version the driver runs (driverGetVersion: 12020; default 13000, 0 without
                            a driver); with FAKECUPY_CUDA_ERROR=init:cudaErrorInsufficientDriver, a driver too old.
  FAKECUPY_FREE_BYTES=N     each device's free memory (default 256 MiB); FAKECUPY_TOTAL_BYTES its total
                            (default free + 64 MiB). FAKECUPY_NAME, FAKECUPY_COMPUTE_CAPABILITY ("9.0").
  FAKECUPY_NO_PEER=i,j      devices without peer access to any other.
  FAKECUPY_NO_CUBLAS=1      cuBLAS cannot be loaded (importing cupy_backends.cuda.libs.cublas fails).
  FAKECUPY_NCCL=absent      cupy.cuda.nccl as where libnccl cannot be loaded (`available` False).
Faults (applied only in processes whose CUDA_VISIBLE_DEVICES names one of FAKECUPY_FAULT_GPUS, when set).
A "test" is an NVTX range the program pushed (each gpuwork test runs in one named after it), or "init"
(getDeviceCount):
  FAKECUPY_HANG=test        the first GPU operation inside it never returns (a wedged GPU).
  FAKECUPY_CUDA_ERROR=test:cudaErrorX[,...]  the first GPU operation inside it raises that CUDARuntimeError
                            (test@N: its N-th operation; test@Ss: the first one S seconds into it); a sticky
                            one (ECC, illegal address, launch failure...) fails every later call, as in CUDA.
  FAKECUPY_RAISE=test:OSError|ValueError|RuntimeError  the same, with an exception that is not CUDA's.
  FAKECUPY_CORRUPT=w,w,...  word indices (8-byte words from the start of device 0's memory) that come out of
                            every write with their lowest bit flipped: a bad HBM row. A buffer allocated
                            when nothing else is allocated starts at word 0.
  FAKECUPY_PERTURB_SDC=1    every GEMM's first result element has its lowest bit flipped (silent corruption).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cupy_backends.fakegpu import GPUS

from cupy import cuda  # noqa: F401 - cupy.cuda, as in CuPy
from cupy.cuda.memory import MemoryPool, PinnedMemoryPool
from cupy.fakearray import allocate, from_numpy, host_value, ndarray

__version__ = "14.2.0+fake"
__all__ = ["ndarray"]

bool_, uint8, uint16, uint32, uint64 = np.bool_, np.uint8, np.uint16, np.uint32, np.uint64
int32, int64, float16, float32, float64 = np.int32, np.int64, np.float16, np.float32, np.float64

MEMORY_POOL = MemoryPool()
PINNED_MEMORY_POOL = PinnedMemoryPool()


def empty(shape: Any, dtype: Any = np.float64) -> ndarray:
    return allocate(shape, dtype)


def full(shape: Any, fill_value: Any, dtype: Any = None) -> ndarray:
    out = allocate(shape, np.asarray(fill_value).dtype if dtype is None else dtype)
    out.fill(fill_value)
    return out


def zeros(shape: Any, dtype: Any = np.float64) -> ndarray:
    return full(shape, 0, dtype)


def ones(shape: Any, dtype: Any = np.float64) -> ndarray:
    return full(shape, 1, dtype)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> ndarray:
    GPUS.operation()
    return from_numpy(np.arange(start, stop, step, dtype=dtype))


def asarray(a: Any, dtype: Any = None) -> ndarray:
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    GPUS.operation()
    return from_numpy(np.asarray(a, dtype=dtype))


def perturb(result: np.ndarray) -> None:
    """FAKECUPY_PERTURB_SDC: the lowest bit of the first element flipped."""
    if GPUS.perturbed() and result.size:
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[result.itemsize]
        result.reshape(-1)[:1].view(bits)[0] ^= bits(1)


def matmul(a: ndarray, b: ndarray, out: ndarray | None = None) -> ndarray:
    """cuBLAS in numpy: fp16 multiplied and accumulated in fp32, then rounded to fp16 (as cuBLAS does)."""
    launched = GPUS.launch()
    if a.dtype == np.float16:
        result = (a.host.astype(np.float32) @ b.host.astype(np.float32)).astype(np.float16)
    else:
        result = np.matmul(a.host, b.host)
    result = np.ascontiguousarray(result)
    perturb(result)
    GPUS.queued(launched, 2 * a.shape[-2] * a.shape[-1] * b.shape[-1])
    if out is None:
        return from_numpy(result, a.device_id)
    out.host[...] = result
    out.wrote()
    return out


def add(a: Any, b: Any, out: ndarray | None = None) -> ndarray:
    GPUS.operation()
    result = np.add(host_value(a), host_value(b))
    if out is None:
        return from_numpy(result)
    out.host[...] = result
    out.wrote()
    return out


def copyto(dst: ndarray, src: Any) -> None:
    GPUS.operation()
    np.copyto(dst.host, host_value(src))
    dst.wrote()


def count_nonzero(a: ndarray) -> ndarray:
    GPUS.operation()
    return from_numpy(np.asarray(np.count_nonzero(a.host), dtype=np.int64), a.device_id)


def flatnonzero(a: ndarray) -> ndarray:
    GPUS.operation()
    return from_numpy(np.flatnonzero(a.host), a.device_id)


def get_default_memory_pool() -> MemoryPool:
    return MEMORY_POOL


def get_default_pinned_memory_pool() -> PinnedMemoryPool:
    return PINNED_MEMORY_POOL
