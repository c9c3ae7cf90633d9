"""The fake cupy.cuda.nccl: a clique of communicators in one process (NcclCommunicator.initAll), all-reduce
(sum of float32) done with numpy when every rank has called it inside groupStart/groupEnd.

FAKECUPY_NCCL=absent: the module looks as real CuPy's does where libnccl cannot be loaded (`available` False,
nothing else)."""

from __future__ import annotations

import os

import numpy as np
from cupy_backends.fakegpu import GPUS, host_bytes

available = os.environ.get("FAKECUPY_NCCL") != "absent"
NCCL_FLOAT32 = 7
NCCL_SUM = 0
VERSION = 22803
GROUP: list[int] = []  # the groupStart depth, as a stack


class NcclError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        self.status = status
        super().__init__(f"NCCL_ERROR: {text}")


class Clique:
    def __init__(self, devices: list[int]) -> None:
        self.devices = devices
        self.pending: dict[int, tuple[int, int, int]] = {}  # rank -> (send, receive, count)

    def submit(self, rank: int, send: int, receive: int, count: int) -> None:
        self.pending[rank] = (send, receive, count)
        if not GROUP:
            self.complete()

    def complete(self) -> None:
        if not self.pending:
            return
        if len(self.pending) != len(self.devices):
            raise NcclError(5, "fake: not every rank called allReduce in the group (real NCCL would hang)")
        counts = {count for _, _, count in self.pending.values()}
        if len(counts) != 1:
            raise NcclError(4, "fake: ranks disagree on the element count")
        count = counts.pop()
        total = np.zeros(count, dtype=np.float32)
        for send, _, _ in self.pending.values():
            total += host_bytes(send, count * 4).view(np.float32)
        for _, receive, _ in self.pending.values():
            host_bytes(receive, count * 4).view(np.float32)[:] = total
            GPUS.written(receive, count * 4)
        self.pending.clear()


CLIQUES: list[Clique] = []


class NcclCommunicator:
    def __init__(self, clique: Clique, rank: int) -> None:
        self.clique = clique
        self.rank = rank

    @classmethod
    def initAll(cls, devices: list[int]) -> list[NcclCommunicator]:  # noqa: N802 - CuPy's name
        GPUS.operation()
        clique = Clique(list(devices))
        CLIQUES.append(clique)
        return [cls(clique, rank) for rank in range(len(devices))]

    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int,  # noqa: N802
                  stream: int) -> None:
        GPUS.operation()
        if datatype != NCCL_FLOAT32 or op != NCCL_SUM:
            raise NcclError(5, "fake: only sum of float32 is simulated")
        self.clique.submit(self.rank, sendbuf, recvbuf, count)

    def destroy(self) -> None:
        pass


def groupStart() -> None:  # noqa: N802
    GROUP.append(1)


def groupEnd() -> None:  # noqa: N802
    GROUP.pop()
    if not GROUP:
        for clique in CLIQUES:
            clique.complete()


def get_version() -> int:
    return VERSION


if not available:
    del NcclCommunicator, groupStart, groupEnd, get_version, NCCL_FLOAT32, NCCL_SUM
