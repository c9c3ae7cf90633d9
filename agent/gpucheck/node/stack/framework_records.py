"""What the probe's records of TensorFlow and PyTorch say about their CUDA build, one reading per
framework, so that one evaluation judges both (pure functions of a probe record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .stacks import TENSORFLOW, TORCH

Record = dict[str, Any]
INSTALL_HINT = "install or repair the stack (site.yml --tags frameworks) and check /etc/gpucheck/node.yaml"


@dataclass(frozen=True)
class GpuFramework:
    """How a framework that trains on the GPUs answers the same questions in its own words."""

    gpus_key: str  # the record's count of the GPUs it sees
    cuda_key: str  # the expected value's name for "a CUDA build"
    measured: Callable[[Record], dict[str, Any]]
    cuda_problem: Callable[[Record], str | None]  # why it cannot use CUDA (text after the stack's label)
    backend_problem: Callable[[Record], str | None]  # asked once it sees every GPU
    build: Callable[[Record], str]  # its CUDA build, after the label of a pass
    archs: Callable[[Record], list[str]]  # the GPU architectures a CUDA build has code for
    remediation: str


def _tensorflow_measured(record: Record) -> dict[str, Any]:
    info = record.get("build_info") or {}
    return {"version": record.get("version"), "gpus": record.get("gpus"),
            "built_with_cuda": record.get("built_with_cuda"),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version")}


def _tensorflow_cuda_problem(record: Record) -> str | None:
    errors = record.get("errors") or {}
    if record.get("built_with_cuda") is not True:
        why = errors.get("built_with_cuda") or "a CPU-only build (tensorflow-cpu?)"
        return f" was not built with CUDA: {why}"
    if "gpus" in errors:
        return f": list_physical_devices('GPU') failed: {errors['gpus']}"
    return None


def _tensorflow_build(record: Record) -> str:
    info = record.get("build_info") or {}
    return f", CUDA {info['cuda_version']}, cuDNN {info.get('cudnn_version')}" if info.get("cuda_version") else ""


def _tensorflow_archs(record: Record) -> list[str]:
    if not record.get("built_with_cuda"):
        return []
    archs = (record.get("build_info") or {}).get("cuda_compute_capabilities")
    if isinstance(archs, str):  # "sm_60,sm_70,compute_90" in some builds
        archs = [a for a in archs.replace(",", " ").split() if a]
    return list(archs) if archs else []


def _torch_measured(record: Record) -> dict[str, Any]:
    dist = record.get("distributed") or {}
    return {"version": record.get("version"), "cuda_version": record.get("cuda_version"),
            "cuda_available": record.get("cuda_available"), "device_count": record.get("device_count"),
            "distributed": {k: v for k, v in dist.items() if k != "errors"}}


def _torch_cuda_problem(record: Record) -> str | None:
    if not record.get("cuda_version"):
        return " is a CPU-only build (torch.version.cuda is None)"
    if not record.get("cuda_available"):
        why = (record.get("errors") or {}).get("cuda_available", "torch.cuda.is_available() is False")
        return f" cannot use CUDA: {why}"
    return None


def _torch_backend_problem(record: Record) -> str | None:
    dist = record.get("distributed") or {}
    if dist.get("available") and dist.get("nccl") is False:
        return ": torch.distributed has no NCCL backend"
    return None


def _torch_build(record: Record) -> str:
    return f", CUDA {record['cuda_version']}" if record.get("cuda_version") else " (CPU build)"


def _torch_archs(record: Record) -> list[str]:
    return list(record["arch_list"]) if record.get("cuda_version") and record.get("arch_list") else []


GPU_FRAMEWORKS: dict[str, GpuFramework] = {
    TENSORFLOW: GpuFramework(
        gpus_key="gpus", cuda_key="built_with_cuda", measured=_tensorflow_measured,
        cuda_problem=_tensorflow_cuda_problem, backend_problem=lambda record: None, build=_tensorflow_build,
        archs=_tensorflow_archs,
        remediation="install the CUDA build of TensorFlow (tensorflow[and-cuda]) matching the driver; check that "
                    "the CUDA libraries it needs load (libs.* checks) and that CUDA_VISIBLE_DEVICES is unset; "
                    + INSTALL_HINT),
    TORCH: GpuFramework(
        gpus_key="device_count", cuda_key="cuda", measured=_torch_measured,
        cuda_problem=_torch_cuda_problem, backend_problem=_torch_backend_problem, build=_torch_build,
        archs=_torch_archs,
        remediation="install the CUDA build of torch for the driver's CUDA version (the cuXXX index); check that "
                    "CUDA_VISIBLE_DEVICES is unset; " + INSTALL_HINT),
}


def gpu_problem(framework: GpuFramework, record: Record, nvml_gpus: int | None) -> str | None:
    """The first reason this build cannot train on every GPU NVML reports (text after the label)."""
    problem = framework.cuda_problem(record)
    if problem:
        return problem
    seen = record.get(framework.gpus_key) or 0
    if nvml_gpus is not None and seen < nvml_gpus:
        return f" sees {seen} of the {nvml_gpus} GPUs NVML reports"
    return framework.backend_problem(record)
