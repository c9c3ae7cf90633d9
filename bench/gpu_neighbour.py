"""Another program on the GPU, for the busy-GPU step of bench/gpu_session.sh: it holds a share of the GPU's memory
and runs fp16 GEMMs in a loop, as a user's job would, until --seconds pass or it is killed.

    python3 bench/gpu_neighbour.py --memory-fraction 0.6 --seconds 120

Prints `GPU_NEIGHBOUR ready pid=N held_GiB=X` once it holds the memory and its first GEMM is done."""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-fraction", type=float, default=0.6, help="of the GPU's total memory to hold")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to keep the GPU busy")
    args = parser.parse_args()
    import cupy as cp

    _, total = cp.cuda.runtime.memGetInfo()
    held = cp.empty(int(total * args.memory_fraction), dtype=cp.uint8)
    held.fill(1)  # touched, as a job's tensors are
    a = cp.random.random((8192, 8192), dtype=cp.float32).astype(cp.float16)
    b = a.copy()
    (a @ b).sum()
    cp.cuda.Device().synchronize()
    print(f"GPU_NEIGHBOUR ready pid={os.getpid()} held_GiB={held.nbytes / 2**30:.1f}", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in range(20):
            a @ b
        cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
