"""The built-in NCCL all-reduce across every visible GPU in one process, used where nccl-tests is absent:
`python -m gpucheck.gpuwork.allreduce [--bytes N] [--iterations 20] [--warmup 5]` (docs/burnin.md).

Sum of float32 buffers, device i's filled with i + 1, so every element must come out n(n+1)/2 (exact in
float32 for any GPU count); busbw = algbw x 2(n-1)/n, nccl-tests' formula (0 for one GPU)."""

from __future__ import annotations

import sys
import time
from typing import Any

from .device import free_bytes
from .program import Parser, byte_count, finish, guarded, non_negative_int, open_cuda, positive_int, run_test
from .protocol import TestCannotRun, significant

DEFAULT_BYTES = 2**30
DEFAULT_ITERATIONS = 20
DEFAULT_WARMUP = 5
FLOAT32_BYTES = 4


def import_nccl() -> Any:
    try:
        from cupy.cuda import nccl
    except Exception as exc:
        raise TestCannotRun(f"CuPy's NCCL cannot be imported: {exc}") from None
    if not getattr(nccl, "available", False):
        raise TestCannotRun("NCCL is not available to CuPy (install the nvidia-nccl wheel for its CUDA major)")
    return nccl


def element_count(cp: Any, devices: int, wanted_bytes: int) -> int:
    """Elements per buffer: wanted_bytes, or less so that each GPU's two buffers take at most half its memory."""
    smallest_free = wanted_bytes * 4
    for index in range(devices):
        with cp.cuda.Device(index):
            smallest_free = min(smallest_free, free_bytes(cp))
    return max(1, min(wanted_bytes, smallest_free // 4) // FLOAT32_BYTES)


def bus_bandwidth(algbw: float, devices: int) -> float:
    return algbw * 2 * (devices - 1) / devices


def run(cp: Any, devices: int, wanted_bytes: int = DEFAULT_BYTES, iterations: int = DEFAULT_ITERATIONS,
        warmup: int = DEFAULT_WARMUP) -> dict[str, Any]:
    nccl = import_nccl()
    count = element_count(cp, devices, wanted_bytes)
    ids = list(range(devices))
    comms = nccl.NcclCommunicator.initAll(ids)
    sends, receives, streams = [], [], []
    for index in ids:
        with cp.cuda.Device(index):
            sends.append(cp.full(count, index + 1, dtype=cp.float32))
            receives.append(cp.zeros(count, dtype=cp.float32))
            streams.append(cp.cuda.Stream(non_blocking=True))

    def all_reduce() -> None:
        nccl.groupStart()
        for index in ids:
            with cp.cuda.Device(index):
                comms[index].allReduce(sends[index].data.ptr, receives[index].data.ptr, count, nccl.NCCL_FLOAT32,
                                       nccl.NCCL_SUM, streams[index].ptr)
        nccl.groupEnd()

    def wait() -> None:
        for index in ids:
            with cp.cuda.Device(index):
                streams[index].synchronize()

    for _ in range(warmup):
        all_reduce()
    wait()
    started = time.perf_counter()
    for _ in range(iterations):
        all_reduce()
    wait()
    per_iteration_s = max(time.perf_counter() - started, 1e-9) / iterations
    exact = devices * (devices + 1) / 2
    wrong = 0
    for index in ids:
        with cp.cuda.Device(index):
            wrong += int(cp.count_nonzero(receives[index] != exact))
    nbytes = count * FLOAT32_BYTES
    algbw = nbytes / per_iteration_s / 1e9
    return {"gpus": devices, "bytes": nbytes, "seconds_per_iteration": significant(per_iteration_s),
            "algbw_GBps": significant(algbw), "busbw_GBps": significant(bus_bandwidth(algbw, devices)), "wrong": wrong,
            "nccl_version": int(nccl.get_version())}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m gpucheck.gpuwork.allreduce",
               description="NCCL all-reduce (sum, float32) across every visible CUDA device in one process "
                           "(GPUCHECK_GPUWORK lines, docs/burnin.md).")
    p.add_argument("--bytes", type=byte_count, default=DEFAULT_BYTES,
                   help="bytes per GPU buffer, e.g. 1G (default: 1 GiB, less when memory is short)")
    p.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS,
                   help=f"timed all-reduces (default: {DEFAULT_ITERATIONS})")
    p.add_argument("--warmup", type=non_negative_int, default=DEFAULT_WARMUP,
                   help=f"untimed all-reduces first (default: {DEFAULT_WARMUP})")
    args = p.parse_args(argv)
    cp, devices = open_cuda()
    stopped = run_test(cp, "allreduce", lambda: run(cp, devices, args.bytes, args.iterations, args.warmup))
    return finish(stopped)


if __name__ == "__main__":
    sys.exit(guarded(main))
