"""The fake cupy.cuda.nvtx: the ranges are where the fake's faults are aimed (FAKECUPY_HANG and friends)."""

from __future__ import annotations

from cupy_backends.fakegpu import GPUS

available = True


def RangePush(message: str, id_color: int = -1) -> None:  # noqa: N802 - CuPy's name
    GPUS.ranges.append(message)


def RangePop() -> None:  # noqa: N802
    if GPUS.ranges:
        GPUS.ranges.pop()


def Mark(message: str, id_color: int = -1) -> None:  # noqa: N802
    pass
