"""The simulated GPUs behind the fake CuPy (see cupy/__init__.py for what the fake is and its variables).

Each device's memory is one numpy byte arena of FAKECUPY_FREE_BYTES; allocations are first-fit blocks in it,
so `data.ptr` is a real address (raw-pointer writes with runtime.memcpy work) and running out of memory
raises as CuPy does. Every simulated GPU operation calls `operation()`, where the injected faults act.

With FAKECUPY_TFLOPS the GPUs' GEMMs run on a modelled clock instead of the CPU's: each device has a timeline
that a GEMM occupies for its flops at that rate (times the device's FAKECUPY_SPEED), and every other operation
waits for it, as a synchronize or a copy back does on a real stream. A figure timed around a synchronize is then
the model's, to within one sleep's overshoot, however busy the CPU is (as long as numpy computes each GEMM in
less than its modelled time): what a test needs to plant a GPU a known few percent slower.

The first GEMM a process launches sets FAKENVML_UNDER_LOAD=1 in it for good: from then on the fake NVML
(lab/fakenvml) answers that process's calls with the scenario's gpu.N.under_load.* values, so a fault planted
there (cooling that fails only under a burn) is seen by the burn's own samples and never by an idle check."""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref

import numpy as np

ALIGN_BYTES = 512  # CuPy's pool rounds every allocation up to this
FLIP_MASK = 0x1  # a bad word comes out of every write with its lowest bit flipped
RUNTIME_VERSION = 12090
DRIVER_VERSION = 13000

# cudaError_t: code -> (name, text), as the real CUDA runtime spells them (checked against cupy-cuda12x 14.2).
ERRORS = {
    1: ("cudaErrorInvalidValue", "invalid argument"),
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    3: ("cudaErrorInitializationError", "initialization error"),
    35: ("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"),
    46: ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    214: ("cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"),
    217: ("cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices"),
    220: ("cudaErrorNvlinkUncorrectable", "uncorrectable NVLink error detected during the execution"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    702: ("cudaErrorLaunchTimeout", "the launch timed out and was terminated"),
    704: ("cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"),
    710: ("cudaErrorAssert", "device-side assert triggered"),
    714: ("cudaErrorHardwareStackError", "hardware stack error"),
    715: ("cudaErrorIllegalInstruction", "an illegal instruction was encountered"),
    716: ("cudaErrorMisalignedAddress", "misaligned address"),
    718: ("cudaErrorInvalidPc", "invalid program counter"),
    719: ("cudaErrorLaunchFailure", "unspecified launch failure"),
    999: ("cudaErrorUnknown", "unknown error"),
}
CODES = {name: code for code, (name, _) in ERRORS.items()}
STICKY = {214, 220, 700, 702, 710, 714, 715, 716, 718, 719}  # after these CUDA refuses every call


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        name, text = ERRORS.get(status, (f"cudaError{status}", "unknown error"))
        super().__init__(f"{name}: {text}")


class OutOfMemoryError(MemoryError):
    def __init__(self, size: int, total: int) -> None:
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")


def env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def rules(name: str) -> dict[str, str]:
    """`TEST:VALUE,TEST:VALUE` -> {test: value}."""
    found = {}
    for item in env_list(name):
        test, _, value = item.partition(":")
        found[test.strip()] = value.strip()
    return found


def faults_apply() -> bool:
    """FAKECUPY_FAULT_GPUS (entries of CUDA_VISIBLE_DEVICES) limits the faults to the processes of those GPUs."""
    only = set(env_list("FAKECUPY_FAULT_GPUS"))
    return not only or bool(only & set(env_list("CUDA_VISIBLE_DEVICES")))


def device_count() -> int:
    physical = os.environ.get("FAKECUPY_DEVICES")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e for e in (visible or "").split(",") if e.strip()]
    count = int(physical) if physical else max(1, len(entries))
    if count == 0:
        raise CUDARuntimeError(35)  # no driver at all: what real CuPy raises on a machine without one
    return min(count, len(entries)) if visible is not None else count


class Arena:
    """One device's memory."""

    def __init__(self, device: int, size: int) -> None:
        self.device = device
        self.size = size
        self.bytes = np.empty(size, dtype=np.uint8)  # untouched pages cost nothing
        self.base = self.bytes.ctypes.data
        self.blocks: dict[int, int] = {}  # offset -> size
        self.lock = threading.Lock()
        corrupt = env_list("FAKECUPY_CORRUPT") if device == 0 and faults_apply() else []
        self.bad_words = sorted(int(w, 0) for w in corrupt)

    def used(self) -> int:
        return sum(self.blocks.values())

    def allocate(self, nbytes: int) -> int:
        size = max(ALIGN_BYTES, -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES)
        with self.lock:
            cursor = 0
            for offset in sorted(self.blocks):
                if offset - cursor >= size:
                    break
                cursor = offset + self.blocks[offset]
            if cursor + size > self.size:
                raise OutOfMemoryError(nbytes, self.used())
            self.blocks[cursor] = size
        return cursor

    def release(self, offset: int) -> None:
        with self.lock:
            self.blocks.pop(offset, None)

    def view(self, offset: int, shape: tuple[int, ...], dtype: np.dtype, owner: object) -> np.ndarray:
        weakref.finalize(owner, self.release, offset)
        return np.ndarray(shape, dtype=dtype, buffer=self.bytes, offset=offset)

    def written(self, address: int, nbytes: int) -> None:
        """After a write of [address, address + nbytes): the bad words in it come out flipped."""
        for word in self.bad_words:
            start = self.base + word * 8
            if start < address + nbytes and address < start + 8:
                self.bytes[word * 8:word * 8 + 8].view(np.uint64)[0] ^= np.uint64(FLIP_MASK)


class Gpus:
    """Process-wide state: the arenas, the current device, the NVTX ranges and the faults."""

    def __init__(self) -> None:
        self.arenas: dict[int, Arena] = {}
        self.current = 0
        self.ranges: list[str] = []
        self.sticky: int | None = None
        self.fired: set[str] = set()
        self.counts: dict[str, int] = {}  # GPU operations seen inside each range
        self.entered: dict[str, float] = {}  # when each range saw its first operation
        self.peer_enabled: set[tuple[int, int]] = set()
        self.busy_until: dict[int, float] = {}  # FAKECUPY_TFLOPS: when each device's queued GEMMs end

    def free_bytes(self) -> int:
        return int(os.environ.get("FAKECUPY_FREE_BYTES", str(256 * 2**20)), 0)

    def total_bytes(self) -> int:
        return int(os.environ.get("FAKECUPY_TOTAL_BYTES", str(self.free_bytes() + 64 * 2**20)), 0)

    def arena(self, device: int | None = None) -> Arena:
        device = self.current if device is None else device
        if device not in self.arenas:
            self.arenas[device] = Arena(device, self.free_bytes())
        return self.arenas[device]

    def arena_at(self, address: int) -> Arena | None:
        for arena in self.arenas.values():
            if arena.base <= address < arena.base + arena.size:
                return arena
        return None

    def written(self, address: int, nbytes: int) -> None:
        arena = self.arena_at(address)
        if arena is not None:
            arena.written(address, nbytes)

    def operation(self, phase: str | None = None, launch: bool = False) -> None:
        """A simulated GPU operation: a sticky error, FAKECUPY_HANG, FAKECUPY_CUDA_ERROR, FAKECUPY_RAISE; then,
        unless it is a GEMM's launch, the wait for the GEMMs queued before it on the current device."""
        if self.sticky is not None:
            raise CUDARuntimeError(self.sticky)
        if faults_apply():
            self.inject(phase)
        if not launch:
            self.wait()

    def launch(self) -> float:
        """A GEMM begins: its faults, and the time it was launched (for `queued`). From then on the process is
        under load, for good (the burn keeps loading)."""
        self.operation(launch=True)
        if not os.environ.get("FAKENVML_UNDER_LOAD"):  # set once: a putenv races the NVML sampler thread's getenv
            # A fault that shows only under load: the fake NVML answers this process its gpu.N.under_load.* values.
            os.environ["FAKENVML_UNDER_LOAD"] = "1"
        return time.perf_counter()

    def queued(self, launched: float, flops: int) -> None:
        """FAKECUPY_TFLOPS: the GEMM launched then occupies the current device from when the device is free."""
        rate = os.environ.get("FAKECUPY_TFLOPS")
        if rate:
            start = max(launched, self.busy_until.get(self.current, 0.0))
            self.busy_until[self.current] = start + flops / (float(rate) * 1e12 * self.speed(self.current))

    def wait(self) -> None:
        left = self.busy_until.get(self.current, 0.0) - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def speed(self, device: int) -> float:
        """FAKECUPY_SPEED=GPU:FACTOR,...: that GPU (its CUDA_VISIBLE_DEVICES entry, a UUID or an index) computes at
        FACTOR x FAKECUPY_TFLOPS (0.9: 10 % slower)."""
        visible = env_list("CUDA_VISIBLE_DEVICES")
        entry = visible[device] if device < len(visible) else str(device)
        return float(rules("FAKECUPY_SPEED").get(entry, 1.0))

    def inject(self, phase: str | None) -> None:
        """The faults the environment planted, inside the ranges active now (or `phase`)."""
        active = [phase] if phase else self.ranges
        for name in active:
            self.counts[name] = self.counts.get(name, 0) + 1
            self.entered.setdefault(name, time.monotonic())
        if set(env_list("FAKECUPY_HANG")) & set(active):
            while True:  # a wedged GPU: only a kill ends this process
                time.sleep(3600)
        for where, name in rules("FAKECUPY_CUDA_ERROR").items():
            if self.due(where, active, "cuda"):
                code = CODES[name] if name in CODES else int(name)
                if code in STICKY:
                    self.sticky = code
                raise CUDARuntimeError(code)
        for where, kind in rules("FAKECUPY_RAISE").items():
            if self.due(where, active, "raise"):
                raise {"OSError": OSError, "ValueError": ValueError}.get(kind, RuntimeError)(
                    f"fake failure injected in {where.partition('@')[0]}")

    def due(self, where: str, active: list[str], kind: str) -> bool:
        """`test`, `test@N` or `test@Ss`: inside that range, at its first (N-th) operation, or the first one S
        seconds after the range began; once."""
        test, _, when = where.partition("@")
        key = f"{kind}:{where}"
        if test not in active or key in self.fired:
            return False
        if when.endswith("s"):
            if time.monotonic() - self.entered[test] < float(when[:-1]):
                return False
        elif self.counts[test] < int(when or 1):
            return False
        self.fired.add(key)
        return True

    def perturbed(self) -> bool:
        return bool(os.environ.get("FAKECUPY_PERTURB_SDC")) and faults_apply()


GPUS = Gpus()


def host_bytes(address: int, nbytes: int) -> np.ndarray:
    """The nbytes at an address (device arena or host memory) as a writable numpy byte array."""
    return np.frombuffer((ctypes.c_ubyte * nbytes).from_address(address), dtype=np.uint8)
