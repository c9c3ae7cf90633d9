"""The fake cupy.ndarray: a numpy view into a simulated device's memory arena (cupy_backends/fakegpu.py).

Every write goes through `wrote()`, where the arena flips its bad words (FAKECUPY_CORRUPT); every method
that would run on the GPU first calls GPUS.operation(), where the other faults act. As in real CuPy, an
implicit conversion to numpy (np.asarray(device_array)) is refused: use .get()."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from cupy_backends.fakegpu import GPUS


class Block:
    """One allocation; released (a weakref finalizer in the arena) when the last array viewing it is gone."""

    def __init__(self, device: int, nbytes: int) -> None:
        self.arena = GPUS.arena(device)
        self.offset = self.arena.allocate(nbytes)


class MemoryPointer:
    def __init__(self, ptr: int, device_id: int) -> None:
        self.ptr = ptr
        self.device_id = device_id


def allocate(shape: Any, dtype: Any = np.float64, device: int | None = None) -> ndarray:
    GPUS.operation()
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    device = GPUS.current if device is None else device
    block = Block(device, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return ndarray(block.arena.view(block.offset, shape, dtype, block), block, device)


def host_value(value: Any) -> Any:
    return value.host if isinstance(value, ndarray) else value


def from_numpy(result: Any, device: int | None = None) -> ndarray:
    result = np.asarray(result)
    out = allocate(result.shape, result.dtype, device)
    out.host[...] = result
    out.wrote()
    return out


def one_element(key: Any, ndim: int) -> Any:
    """An integer index on a 1-D array as a 1-element slice (so the result stays a view, as in CuPy)."""
    if ndim == 1 and isinstance(key, (int, np.integer)):
        return slice(int(key), int(key) + 1) if key != -1 else slice(-1, None)
    return key


class ndarray:  # noqa: N801 - CuPy's name
    def __init__(self, host: np.ndarray, block: Block, device: int) -> None:
        self.host = host  # the numpy view of the device memory
        self.block = block
        self.device_id = device

    shape = property(lambda self: self.host.shape)
    dtype = property(lambda self: self.host.dtype)
    size = property(lambda self: self.host.size)
    nbytes = property(lambda self: self.host.nbytes)
    ndim = property(lambda self: self.host.ndim)
    itemsize = property(lambda self: self.host.itemsize)

    @property
    def data(self) -> MemoryPointer:
        return MemoryPointer(self.host.__array_interface__["data"][0], self.device_id)

    def wrote(self, view: np.ndarray | None = None) -> None:
        view = self.host if view is None else view
        if view.size and not (view.flags.c_contiguous or view.flags.f_contiguous):
            raise NotImplementedError("fake CuPy: writes to non-contiguous views are not simulated")
        GPUS.written(view.__array_interface__["data"][0], view.nbytes)

    def __getitem__(self, key: Any) -> ndarray:
        GPUS.operation()
        integer = self.ndim == 1 and isinstance(key, (int, np.integer))
        view = self.host[one_element(key, self.ndim)]
        if isinstance(view, np.ndarray) and np.shares_memory(view, self.host):
            return ndarray(view.reshape(()) if integer else view, self.block, self.device_id)
        return from_numpy(view, self.device_id)

    def __setitem__(self, key: Any, value: Any) -> None:
        GPUS.operation()
        view = self.host[one_element(key, self.ndim)]
        view[...] = host_value(value)
        self.wrote(view)

    def fill(self, value: Any) -> None:
        GPUS.operation()
        self.host.fill(value)
        self.wrote()

    def get(self, stream: Any = None, order: str = "C", out: np.ndarray | None = None,
            blocking: bool = True) -> np.ndarray:
        GPUS.operation()
        if out is not None:
            np.copyto(out, self.host)
            return out
        return np.array(self.host, order=order, copy=True)

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        GPUS.operation()
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError("Shape or dtype mismatch")
        np.copyto(self.host, arr)
        self.wrote()

    def astype(self, dtype: Any, copy: bool = True) -> ndarray:
        GPUS.operation()
        return from_numpy(self.host.astype(dtype), self.device_id)

    def copy(self) -> ndarray:
        GPUS.operation()
        return from_numpy(self.host.copy(), self.device_id)

    def view(self, dtype: Any) -> ndarray:
        return ndarray(self.host.view(dtype), self.block, self.device_id)

    def reshape(self, *shape: Any) -> ndarray:
        return ndarray(self.host.reshape(*shape), self.block, self.device_id)

    def elementwise(self, op: Any, other: Any) -> ndarray:
        GPUS.operation()
        return from_numpy(op(self.host, host_value(other)), self.device_id)

    def __eq__(self, other: Any) -> ndarray:  # type: ignore[override]
        return self.elementwise(operator.eq, other)

    def __ne__(self, other: Any) -> ndarray:  # type: ignore[override]
        return self.elementwise(operator.ne, other)

    def __add__(self, other: Any) -> ndarray:
        return self.elementwise(operator.add, other)

    def __invert__(self) -> ndarray:
        GPUS.operation()
        return from_numpy(~self.host, self.device_id)

    def __matmul__(self, other: ndarray) -> ndarray:
        from cupy import matmul

        return matmul(self, other)

    def item(self) -> Any:
        GPUS.operation()
        return self.host.item()

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __index__(self) -> int:
        return int(self.item())

    def __len__(self) -> int:
        return len(self.host)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct "
                        "a NumPy array explicitly.")

    def __repr__(self) -> str:
        return f"fakecupy.ndarray({self.host!r}, device={self.device_id})"

    __hash__ = None  # type: ignore[assignment]
