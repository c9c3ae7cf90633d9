"""The fake cupy.cuda.device: Device and the cuBLAS handle."""

from __future__ import annotations

from typing import Any

from cupy_backends.cuda.api import runtime
from cupy_backends.fakegpu import GPUS


class Device:
    def __init__(self, device: Any = None) -> None:
        self.id = GPUS.current if device is None else int(getattr(device, "id", device))
        self.previous: list[int] = []

    def use(self) -> None:
        runtime.setDevice(self.id)

    def __enter__(self) -> Device:
        self.previous.append(GPUS.current)
        runtime.setDevice(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        GPUS.current = self.previous.pop()

    def synchronize(self) -> None:
        with self:
            GPUS.operation()

    @property
    def compute_capability(self) -> str:
        props = runtime.getDeviceProperties(self.id)
        return f"{props['major']}{props['minor']}"

    @property
    def mem_info(self) -> tuple[int, int]:
        with self:
            return runtime.memGetInfo()


def get_cublas_handle() -> int:
    return 1000 + GPUS.current
