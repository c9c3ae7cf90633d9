"""What an exception raised inside a test means: the GPU's own trouble (`fault`), or a test that could not run
(`error`); and whether the CUDA context is still usable afterwards.

CuPy raises CUDA runtime errors as `CUDARuntimeError("cudaErrorX: text")` and driver errors (its own
kernel launches) as `CUDADriverError("CUDA_ERROR_X: text")`: the name before the colon decides."""

from __future__ import annotations

from dataclasses import dataclass

# The GPU's own trouble: memory, NVLink or the SM failing while running code that is known to be correct
# (cuBLAS, CuPy's element-wise kernels on buffers this program allocated). Both spellings of each.
FAULT_ERRORS = frozenset({
    "cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE",
    "cudaErrorNvlinkUncorrectable", "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS",
    "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC",
    "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED",
})

# Errors after which CUDA refuses every further call in this process ("sticky" errors): the faults, and these.
CONTEXT_LOST_ERRORS = FAULT_ERRORS | frozenset({
    "cudaErrorAssert", "CUDA_ERROR_ASSERT",
    "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "cudaErrorContextIsDestroyed", "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    "cudaErrorCudartUnloading", "CUDA_ERROR_DEINITIALIZED",
})


@dataclass(frozen=True)
class Outcome:
    error: str | None
    fault: str | None
    context_lost: bool


def cuda_error_name(exc: BaseException) -> str | None:
    """`cudaErrorX` / `CUDA_ERROR_X` when the exception is a CUDA error, else None."""
    name = str(exc).split(":", 1)[0].strip()
    return name if name.startswith(("cudaError", "CUDA_ERROR_")) and " " not in name else None


def describe(exc: BaseException) -> str:
    """One line: a CUDA error as CUDA names it, anything else as `Type: text`."""
    text = " ".join(str(exc).split())
    if cuda_error_name(exc):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify(exc: BaseException) -> Outcome:
    name = cuda_error_name(exc)
    why = describe(exc)
    if name in FAULT_ERRORS:
        return Outcome(error=None, fault=why, context_lost=True)
    return Outcome(error=why, fault=None, context_lost=name in CONTEXT_LOST_ERRORS)
