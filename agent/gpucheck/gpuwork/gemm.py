"""Dense GEMM throughput per dtype, 2 n^3 flops per GEMM.

fp16, fp32 and fp64 go through `cupy.matmul` (cuBLAS). CuPy has no bfloat16 dtype and its fp32 matmul does
not use TF32, so bf16 and tf32 call cuBLAS gemmEx directly on raw device buffers: bf16 stored as uint16,
accumulated in fp32; tf32 as fp32 data with the FAST_TF32 compute type. The numbers are cudaDataType and
cublasComputeType_t values from library_types.h and cublas_api.h (CUDA 12 and 13)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .device import free_bytes, seconds_per_call, square_size
from .errors import CONTEXT_LOST_ERRORS, cuda_error_name, describe
from .protocol import Interrupted, significant

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64")
ITEM_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp64": 8}
DEFAULT_N = 8192
DEFAULT_ITERATIONS = 20
INPUT_SEED = 7

CUDA_R_32F = 0
CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0


def flops(n: int) -> int:
    return 2 * n**3


@functools.lru_cache(maxsize=2)
def host_matrix(n: int, seed: int) -> np.ndarray:
    """Random fp32 values, made on the host once per size for every dtype and the burn (any data will do;
    not zeros, which would spare the GPU's power)."""
    return np.random.Generator(np.random.PCG64(seed)).standard_normal((n, n), dtype=np.float32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values as bfloat16 bit patterns (the top 16 bits: truncation is fine for inputs)."""
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def gemm_ex(cp: Any, a: Any, b: Any, c: Any, n: int, data_type: int, compute_type: int) -> Callable[[], None]:
    """One C = A B through cublasGemmEx on the current device (column-major; square, so no transposes)."""
    from cupy_backends.cuda.libs import cublas

    handle = cp.cuda.device.get_cublas_handle()
    alpha = np.ones(1, dtype=np.float32)  # host scalars: cuBLAS's default pointer mode
    beta = np.zeros(1, dtype=np.float32)

    def launch() -> None:  # the closure keeps a, b, c, alpha and beta alive
        cublas.gemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, alpha.ctypes.data, a.data.ptr, data_type, n,
                      b.data.ptr, data_type, n, beta.ctypes.data, c.data.ptr, data_type, n, compute_type,
                      CUBLAS_GEMM_DEFAULT)

    return launch


def gemm_call(cp: Any, dtype: str, n: int) -> Callable[[], None]:
    """A function that launches one n x n GEMM in `dtype` on the current device (inputs made once)."""
    a_host, b_host = host_matrix(n, INPUT_SEED), host_matrix(n, INPUT_SEED + 1)
    if dtype == "bf16":
        a, b = cp.asarray(bf16_bits(a_host)), cp.asarray(bf16_bits(b_host))
        return gemm_ex(cp, a, b, cp.empty((n, n), dtype=cp.uint16), n, CUDA_R_16BF, CUBLAS_COMPUTE_32F)
    if dtype == "tf32":
        a, b = cp.asarray(a_host), cp.asarray(b_host)
        return gemm_ex(cp, a, b, cp.empty((n, n), dtype=cp.float32), n, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32)
    numpy_dtype = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[dtype]
    a, b = cp.asarray(a_host.astype(numpy_dtype)), cp.asarray(b_host.astype(numpy_dtype))
    c = cp.empty((n, n), dtype=numpy_dtype)
    return lambda: cp.matmul(a, b, out=c)


def fitting_n(cp: Any, dtype: str, wanted_n: int) -> int:
    """wanted_n, halved until A, B and C take at most half of the free memory."""
    return square_size(wanted_n, ITEM_BYTES[dtype], 3, free_bytes(cp) * 0.5)


def measure(cp: Any, dtype: str, n: int, iterations: int) -> float:
    """TFLOP/s of `dtype` GEMMs of size n."""
    call = gemm_call(cp, dtype, n)
    return flops(n) / seconds_per_call(cp, call, iterations) / 1e12


def run(cp: Any, dtypes: list[str], wanted_n: int = DEFAULT_N, iterations: int = DEFAULT_ITERATIONS) -> dict[str, Any]:
    """Each dtype measured on its own: one that cannot run goes in `errors`, the others still run. A CUDA
    error that leaves the context unusable ends the test (the worker then stops)."""
    tflops: dict[str, float] = {}
    sizes: dict[str, int] = {}
    errors: dict[str, str] = {}
    for dtype in dtypes:
        try:
            n = fitting_n(cp, dtype, wanted_n)
            tflops[dtype] = significant(measure(cp, dtype, n, iterations))
            sizes[dtype] = n
        except Exception as exc:
            if cuda_error_name(exc) in CONTEXT_LOST_ERRORS:
                raise Interrupted(exc, {"tflops": tflops, "n": sizes, "errors": errors}) from exc
            errors[dtype] = describe(exc)
    return {"tflops": tflops, "n": sizes, "errors": errors}
