"""Peer-to-peer copy bandwidth between every ordered pair of visible GPUs:
`python -m gpucheck.gpuwork.p2p [--bytes N] [--iterations 10]` (docs/burnin.md).

Peer access is enabled wherever CUDA allows it; a pair without it is still copied (cudaMemcpyPeer then
stages through the host, as CUDA does) and marked `peer_access: false`."""

from __future__ import annotations

import sys
import time
from typing import Any

from .device import free_bytes
from .errors import CONTEXT_LOST_ERRORS, cuda_error_name, describe
from .program import Parser, byte_count, finish, guarded, open_cuda, positive_int, run_test
from .protocol import significant

DEFAULT_BYTES = 256 * 2**20
DEFAULT_ITERATIONS = 10
ALREADY_ENABLED = "cudaErrorPeerAccessAlreadyEnabled"


def enable_peer_access(cp: Any, device: int, peer: int) -> bool:
    """Let `device` reach `peer`'s memory; False where CUDA says it cannot."""
    if not cp.cuda.runtime.deviceCanAccessPeer(device, peer):
        return False
    with cp.cuda.Device(device):
        try:
            cp.cuda.runtime.deviceEnablePeerAccess(peer)
        except Exception as exc:
            if cuda_error_name(exc) != ALREADY_ENABLED:
                raise
    return True


def synchronize_all(cp: Any, devices: list[int]) -> None:
    for index in devices:
        with cp.cuda.Device(index):
            cp.cuda.runtime.deviceSynchronize()


def copy_GBps(cp: Any, source: Any, src: int, target: Any, dst: int, nbytes: int, iterations: int) -> float:
    def copy() -> None:
        cp.cuda.runtime.memcpyPeer(target.data.ptr, dst, source.data.ptr, src, nbytes)

    copy()
    synchronize_all(cp, [src, dst])
    started = time.perf_counter()
    for _ in range(iterations):
        copy()
    synchronize_all(cp, [src, dst])
    return nbytes * iterations / max(time.perf_counter() - started, 1e-9) / 1e9


def buffer_bytes(cp: Any, devices: int, wanted_bytes: int) -> int:
    """wanted_bytes, or less so that each GPU's two buffers take at most half of its free memory."""
    smallest_free = min(free_on(cp, index) for index in range(devices))
    return max(1, min(wanted_bytes, smallest_free // 4))


def free_on(cp: Any, index: int) -> int:
    with cp.cuda.Device(index):
        return free_bytes(cp)


def run(cp: Any, devices: int, wanted_bytes: int = DEFAULT_BYTES, iterations: int = DEFAULT_ITERATIONS
        ) -> dict[str, Any]:
    nbytes = buffer_bytes(cp, devices, wanted_bytes)
    sources, targets = [], []
    for index in range(devices):
        with cp.cuda.Device(index):
            sources.append(cp.full(nbytes, index + 1, dtype=cp.uint8))
            targets.append(cp.empty(nbytes, dtype=cp.uint8))
    pairs = []
    for src in range(devices):
        for dst in range(devices):
            if src == dst:
                continue
            pair: dict[str, Any] = {"src": src, "dst": dst, "GBps": None, "peer_access": False}
            try:
                both_ways = [enable_peer_access(cp, src, dst), enable_peer_access(cp, dst, src)]
                pair["peer_access"] = all(both_ways)
                pair["GBps"] = significant(copy_GBps(cp, sources[src], src, targets[dst], dst, nbytes, iterations))
            except Exception as exc:
                if cuda_error_name(exc) in CONTEXT_LOST_ERRORS:
                    raise
                pair["error"] = describe(exc)
            pairs.append(pair)
    return {"pairs": pairs, "bytes": nbytes}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m gpucheck.gpuwork.p2p",
               description="Copy bandwidth between every ordered pair of visible CUDA devices (GPUCHECK_GPUWORK "
                           "lines, docs/burnin.md).")
    p.add_argument("--bytes", type=byte_count, default=DEFAULT_BYTES,
                   help="bytes per copy, e.g. 256M (default: 256 MiB, less when memory is short)")
    p.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS,
                   help=f"timed copies per pair (default: {DEFAULT_ITERATIONS})")
    args = p.parse_args(argv)
    cp, devices = open_cuda()
    stopped = run_test(cp, "p2p", lambda: run(cp, devices, args.bytes, args.iterations))
    return finish(stopped)


if __name__ == "__main__":
    sys.exit(guarded(main))
