"""The fake CUDA runtime (cupy.cuda.runtime is this module, as in real CuPy)."""

from __future__ import annotations

import ctypes
import os

from cupy_backends.fakegpu import DRIVER_VERSION, GPUS, RUNTIME_VERSION, CUDARuntimeError, device_count, env_list

__all__ = ["CUDARuntimeError"]

memcpyHostToHost = 0
memcpyHostToDevice = 1
memcpyDeviceToHost = 2
memcpyDeviceToDevice = 3
memcpyDefault = 4


def getDeviceCount() -> int:
    GPUS.operation("init")
    count = device_count()
    if count == 0:
        raise CUDARuntimeError(100)
    return count


def check_device(device: int) -> int:
    if not 0 <= device < getDeviceCount():
        raise CUDARuntimeError(101)
    return device


def getDevice() -> int:
    return GPUS.current


def setDevice(device: int) -> None:
    GPUS.current = check_device(device)


def getDeviceProperties(device: int) -> dict:
    check_device(device)
    major, _, minor = os.environ.get("FAKECUPY_COMPUTE_CAPABILITY", "9.0").partition(".")
    return {"name": os.environ.get("FAKECUPY_NAME", "NVIDIA H100 80GB HBM3").encode(),
            "totalGlobalMem": GPUS.total_bytes(), "major": int(major), "minor": int(minor or 0),
            "multiProcessorCount": 132}


def runtimeGetVersion() -> int:
    return RUNTIME_VERSION


def driverGetVersion() -> int:
    """0 without a driver (FAKECUPY_DEVICES=0), as CUDA answers; FAKECUPY_DRIVER_CUDA=12020: an older one."""
    if os.environ.get("FAKECUPY_DEVICES") == "0":
        return 0
    return int(os.environ.get("FAKECUPY_DRIVER_CUDA") or DRIVER_VERSION)


def memGetInfo() -> tuple[int, int]:
    GPUS.operation()
    arena = GPUS.arena()
    return arena.size - arena.used(), GPUS.total_bytes()


def deviceSynchronize() -> None:
    GPUS.operation()


def peer_capable(device: int, peer: int) -> bool:
    isolated = {int(i) for i in env_list("FAKECUPY_NO_PEER")}
    return device != peer and device not in isolated and peer not in isolated


def deviceCanAccessPeer(device: int, peerDevice: int) -> int:
    check_device(device)
    check_device(peerDevice)
    return int(peer_capable(device, peerDevice))


def deviceEnablePeerAccess(peerDevice: int) -> None:
    pair = (GPUS.current, check_device(peerDevice))
    if not peer_capable(*pair):
        raise CUDARuntimeError(217)
    if pair in GPUS.peer_enabled:
        raise CUDARuntimeError(704)
    GPUS.peer_enabled.add(pair)


def memcpy(dst: int, src: int, size: int, kind: int) -> None:
    GPUS.operation()
    ctypes.memmove(dst, src, size)
    GPUS.written(dst, size)


def memcpyPeer(dst: int, dstDevice: int, src: int, srcDevice: int, size: int) -> None:
    check_device(dstDevice)
    check_device(srcDevice)
    memcpy(dst, src, size, memcpyDeviceToDevice)
