"""Silent data corruption: the same seeded fp16 GEMM on every GPU, and the SHA-256 of the result's bits.

The inputs are made on the host (numpy's PCG64 from the seed), never by the GPU's random generator, so they
are the same bits everywhere; GPUs of one model with the same CuPy, cuBLAS and driver compute the same bits
(measured: an H100 gives bitwise identical results run after run). A GPU whose checksum differs from its
peers' computed something else."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .device import free_bytes, square_size

DEFAULT_SEED = 20260601
DEFAULT_N = 4096
DTYPE = "fp16"
FP16_BYTES = 2


def inputs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two n x n fp16 input matrices, the same bits on every machine for a seed."""
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    return a, b


def checksum(cp: Any, a: np.ndarray, b: np.ndarray) -> str:
    """SHA-256 (hex) of the bits of a @ b computed on the current GPU."""
    product = cp.matmul(cp.asarray(a), cp.asarray(b))
    return hashlib.sha256(np.ascontiguousarray(product.get()).tobytes()).hexdigest()


def run(cp: Any, seed: int = DEFAULT_SEED, wanted_n: int = DEFAULT_N) -> dict[str, Any]:
    n = square_size(wanted_n, FP16_BYTES, 3, free_bytes(cp) * 0.5)
    a, b = inputs(seed, n)
    return {"checksum": checksum(cp, a, b), "dtype": DTYPE, "n": n, "seed": seed}
