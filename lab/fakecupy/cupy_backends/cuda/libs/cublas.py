"""The fake cuBLAS: gemmEx on raw device pointers, computed with numpy (column-major, as cuBLAS).

Supported: no transposes; bf16 (CUDA_R_16BF) or fp16 (CUDA_R_16F) data with CUBLAS_COMPUTE_32F; fp32
(CUDA_R_32F) data with CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32 (inputs rounded to TF32's 10-bit
mantissa). bf16 on a compute capability below 8.0 (FAKECUPY_COMPUTE_CAPABILITY) answers
CUBLAS_STATUS_NOT_SUPPORTED, as cuBLAS does on GPUs without bf16. FAKECUPY_NO_CUBLAS=1: importing this module
fails as real CuPy's does where libcublas cannot be found."""

from __future__ import annotations

import os

import numpy as np

from cupy_backends.fakegpu import GPUS, host_bytes

if os.environ.get("FAKECUPY_NO_CUBLAS") == "1":
    raise ImportError('Failure finding "libcublasLt.so.13 or libcublasLt.so.12": No such file (fake CuPy)')

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
STATUS = {7: "CUBLAS_STATUS_INVALID_VALUE", 15: "CUBLAS_STATUS_NOT_SUPPORTED"}
ITEM = {CUDA_R_32F: (np.float32, 4), CUDA_R_16F: (np.float16, 2), CUDA_R_16BF: (np.uint16, 2)}
VERSION = 120804


class CUBLASError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(STATUS.get(status, f"CUBLAS_STATUS_{status}"))


def getVersion(handle: int) -> int:
    return VERSION


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_bf16(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def column_major(address: int, data_type: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """A rows x cols column-major matrix at a device address, as a (writable) numpy view."""
    dtype, item = ITEM[data_type]
    flat = host_bytes(address, ld * cols * item).view(dtype)
    return flat.reshape(cols, ld)[:, :rows].T


def as_float32(matrix: np.ndarray, data_type: int, compute_type: int) -> np.ndarray:
    if data_type == CUDA_R_16BF:
        return from_bf16(matrix)
    values = matrix.astype(np.float32)
    if compute_type == CUBLAS_COMPUTE_32F_FAST_TF32:
        values = (values.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return values


def gemmEx(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, A: int, Atype: int, lda: int,
           B: int, Btype: int, ldb: int, beta: int, C: int, Ctype: int, ldc: int, computeType: int,
           algo: int) -> None:
    launched = GPUS.launch()
    major = int(os.environ.get("FAKECUPY_COMPUTE_CAPABILITY", "9.0").partition(".")[0])
    if transa or transb or not (Atype == Btype == Ctype) or Atype not in ITEM:
        raise CUBLASError(15)
    if computeType not in (CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32) or (Atype == CUDA_R_16BF and major < 8):
        raise CUBLASError(15)
    if min(lda, ldb, ldc) < 1 or lda < m or ldb < k or ldc < m:
        raise CUBLASError(7)
    scale = host_bytes(alpha, 4).view(np.float32)[0]
    add = host_bytes(beta, 4).view(np.float32)[0]
    a = as_float32(column_major(A, Atype, m, k, lda), Atype, computeType)
    b = as_float32(column_major(B, Btype, k, n, ldb), Btype, computeType)
    c = column_major(C, Ctype, m, n, ldc)
    result = scale * (a @ b)
    if add != 0:  # cuBLAS does not read C when beta is 0
        result = result + add * as_float32(c, Ctype, CUBLAS_COMPUTE_32F)
    out = to_bf16(result) if Ctype == CUDA_R_16BF else result.astype(ITEM[Ctype][0])
    if GPUS.perturbed():
        out.reshape(-1)[:1].view(np.uint16 if out.itemsize == 2 else np.uint32)[0] ^= 1
    c[...] = out
    GPUS.written(C, ldc * n * ITEM[Ctype][1])
    GPUS.queued(launched, 2 * m * n * k)
