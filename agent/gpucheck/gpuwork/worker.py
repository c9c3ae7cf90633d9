"""The per-GPU worker: `python -m gpucheck.gpuwork.worker --tests sdc,gemm,...` (docs/burnin.md).

Run with CUDA_VISIBLE_DEVICES naming one GPU (its CUDA device 0). Tests run in the order given, each result
printed as soon as it is known; a CUDA error that leaves the context unusable ends the run (the tests not run
get no line). The size options exist so that tests and small GPUs can run it quickly; the node side leaves
them at their defaults."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

from . import burn, gemm, host, memory, memtest, program, sdc

TESTS = ("sdc", "gemm", "memory_bandwidth", "host_bandwidth", "memtest", "burn")
BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


def bus_id(text: str) -> str:
    if not BUS_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a PCI bus id (e.g. 00000000:18:00.0): {text!r}")
    return text


def cpu_list(text: str) -> set[int]:
    try:
        return host.parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> program.Parser:
    p = program.Parser(prog="python -m gpucheck.gpuwork.worker",
                       description="Make CUDA device 0 compute, move memory and talk to the host; print "
                                   "GPUCHECK_GPUWORK {json} lines (docs/burnin.md).")
    p.add_argument("--tests", type=program.name_list(TESTS), default=list(TESTS),
                   help=f"comma-separated, run in this order (default: {','.join(TESTS)})")
    p.add_argument("--gemm-dtypes", type=program.name_list(gemm.DTYPES), default=list(gemm.DTYPES),
                   help=f"dtypes the gemm test measures (default: {','.join(gemm.DTYPES)})")
    p.add_argument("--burn-seconds", type=program.positive_seconds, default=burn.DEFAULT_SECONDS,
                   help=f"how long the burn runs (default: {burn.DEFAULT_SECONDS:g})")
    p.add_argument("--burn-dtype", choices=gemm.DTYPES, default=burn.DEFAULT_DTYPE,
                   help=f"the burn's GEMM dtype (default: {burn.DEFAULT_DTYPE}; bf16 falls back to fp16 where it "
                        "cannot run)")
    p.add_argument("--memtest-fraction", type=program.fraction, default=memtest.DEFAULT_FRACTION,
                   help=f"share of the free GPU memory the memory test covers (default: {memtest.DEFAULT_FRACTION})")
    p.add_argument("--bus-id", type=bus_id, help="the GPU's NVML PCI bus id: NVML is sampled during the burn")
    p.add_argument("--cpus", type=cpu_list,
                   help="CPU list (e.g. 0-55,112-167) to bind to before any host memory is allocated")
    sizes = p.add_argument_group("sizes (defaults are the real test; smaller values for quick runs)")
    sizes.add_argument("--gemm-n", type=program.positive_int, default=gemm.DEFAULT_N,
                       help=f"GEMM matrix size, halved while it does not fit (default: {gemm.DEFAULT_N})")
    sizes.add_argument("--gemm-iterations", type=program.positive_int, default=gemm.DEFAULT_ITERATIONS,
                       help=f"timed GEMMs per dtype (default: {gemm.DEFAULT_ITERATIONS})")
    sizes.add_argument("--sdc-n", type=program.positive_int, default=sdc.DEFAULT_N,
                       help=f"the sdc GEMM's size (default: {sdc.DEFAULT_N}; GPUs compared must use the same)")
    sizes.add_argument("--sdc-seed", type=int, default=sdc.DEFAULT_SEED,
                       help=f"the sdc inputs' seed (default: {sdc.DEFAULT_SEED})")
    sizes.add_argument("--copy-bytes", type=program.byte_count, default=memory.DEFAULT_BYTES,
                       help="each memory_bandwidth array's size, e.g. 1G (default: 1 GiB, less when memory is short)")
    sizes.add_argument("--host-bytes", type=program.byte_count, default=host.DEFAULT_BYTES,
                       help="the host_bandwidth transfer size, e.g. 256M (default: 256 MiB)")
    sizes.add_argument("--memtest-chunk-bytes", type=program.byte_count, default=memtest.MAX_CHUNK_BYTES,
                       help="largest verify chunk (default: 1 GiB, less when the memory beside the buffer is short)")
    sizes.add_argument("--burn-n", type=program.positive_int, default=burn.DEFAULT_N,
                       help=f"the burn's GEMM size (default: {burn.DEFAULT_N})")
    return p


def bind_cpus(cpus: set[int] | None) -> tuple[str | None, str | None]:
    """(the affinity set as a CPU list, why binding failed): done first, before CuPy allocates host memory."""
    if cpus is None:
        return None, None
    try:
        return host.bind(cpus), None
    except OSError as exc:
        return None, f"cannot bind to CPUs {host.format_cpus(cpus)}: {exc.strerror or exc}"


def bodies(cp: Any, args: argparse.Namespace, cpus: str | None, binding_error: str | None
           ) -> dict[str, Callable[[], dict[str, Any]]]:
    return {
        "sdc": lambda: sdc.run(cp, args.sdc_seed, args.sdc_n),
        "gemm": lambda: gemm.run(cp, args.gemm_dtypes, args.gemm_n, args.gemm_iterations),
        "memory_bandwidth": lambda: memory.run(cp, args.copy_bytes),
        "host_bandwidth": lambda: host.run(cp, cpus, binding_error, args.host_bytes),
        "memtest": lambda: memtest.run(cp, args.memtest_fraction, args.memtest_chunk_bytes),
        "burn": lambda: burn.run(cp, args.burn_seconds, args.burn_dtype, args.burn_n, args.bus_id),
    }


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cpus, binding_error = bind_cpus(args.cpus)
    cp, _devices = program.open_cuda()
    tests = bodies(cp, args, cpus, binding_error)
    stopped = None
    for name in args.tests:
        stopped = program.run_test(cp, name, tests[name])
        if stopped:
            break
    return program.finish(stopped)


if __name__ == "__main__":
    sys.exit(program.guarded(main))
