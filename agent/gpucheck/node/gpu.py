"""GPU inventory checks: count, model, compute capability, driver, memory, persistence, MIG."""

from __future__ import annotations

import re
from typing import Any

from ..model import Result, Status
from ..profiles import Profile
from ..versions import version_tuple
from . import Check
from .per_gpu import live_gpus, per_gpu


def count(f: dict[str, Any], p: Profile) -> Result:
    gpus = f["nvml"]["gpus"]
    lost = [g for g in gpus if g.get("lost")]
    alive = len(gpus) - len(lost)
    expected = p.get("gpu", "count")
    lost_text = "; ".join(f"GPU{g['index']} is lost (NVML: GPU is lost)" for g in lost)
    if lost:
        return Result("gpu.count", Status.FAIL, alive, expected,
                      f"{alive} of {len(gpus)} GPUs respond; {lost_text}",
                      "the GPU has fallen off the bus: drain the node, reset or reseat the GPU, check Xid 79")
    if expected is None:
        status = Status.PASS if alive else Status.FAIL
        return Result("gpu.count", status, alive, ">= 1", f"{alive} GPU(s) visible to NVML",
                      "" if alive else "no GPU visible: check the PCI devices (lspci) and the driver")
    if alive != expected:
        return Result("gpu.count", Status.FAIL, alive, expected, f"{alive} GPUs visible, {expected} expected",
                      "compare `lspci -d 10de:` with the profile; a missing GPU needs a reseat or RMA")
    return Result("gpu.count", Status.PASS, alive, expected, f"{alive} GPUs visible")


def model(f: dict[str, Any], p: Profile) -> Result:
    regex = p.get("gpu", "name_regex")
    if not regex:
        names = sorted({g.get("name") for g in live_gpus(f["nvml"])} - {None})
        return Result("gpu.model", Status.SKIP, names, None, "profile does not pin a GPU model")
    return per_gpu(
        "gpu.model", f["nvml"],
        lambda g: None if re.search(regex, g.get("name") or "") else (Status.FAIL, f"{g.get('name')!r} does not match"),
        lambda g: g.get("name"), regex, "every GPU is the profile's model",
        "wrong hardware for this profile: pick the right profile (--profile) or fix the node")


def compute_capability(f: dict[str, Any], p: Profile) -> Result:
    minimum = p.get("gpu", "compute_capability_min")
    if minimum is None:
        return Result("gpu.compute_capability", Status.SKIP, reason="profile sets no minimum compute capability")
    need = version_tuple(minimum)

    def inspect(g: dict[str, Any]) -> tuple[Status, str] | None:
        cc = g.get("compute_capability")
        if cc is None:
            return Status.ERROR, "compute capability not reported"
        return None if version_tuple(cc) >= need else (Status.FAIL, f"compute capability {cc} < {minimum}")

    return per_gpu("gpu.compute_capability", f["nvml"], inspect, lambda g: g.get("compute_capability"),
                   f">= {minimum}", f"compute capability >= {minimum}",
                   "this GPU generation is too old for the profile's stack: use a profile for this hardware "
                   "(--profile) or a stack built for it")


def driver(f: dict[str, Any], p: Profile) -> Result:
    nvml = f["nvml"]
    version, cuda = nvml.get("driver_version"), nvml.get("cuda_driver_version")
    need_driver, need_cuda = p.get("gpu", "driver_version_min"), p.get("gpu", "cuda_driver_version_min")
    problems = []
    if need_driver and version_tuple(version) < version_tuple(need_driver):
        problems.append(f"driver {version} older than {need_driver}")
    if need_cuda and version_tuple(cuda) < version_tuple(need_cuda):
        problems.append(f"driver supports CUDA {cuda}, stack needs {need_cuda}")
    expected = {"driver_version_min": need_driver, "cuda_driver_version_min": need_cuda}
    measured = {"driver_version": version, "cuda_driver_version": cuda}
    if problems:
        return Result("gpu.driver", Status.FAIL, measured, expected, "; ".join(problems),
                      "upgrade the driver branch (site.yml --tags gpu with the stack's driver pin)")
    return Result("gpu.driver", Status.PASS, measured, expected, f"driver {version}, CUDA {cuda}")


def memory(f: dict[str, Any], p: Profile) -> Result:
    minimum = p.get("gpu", "memory_per_gpu_MiB_min")
    if minimum is None:
        return Result("gpu.memory", Status.SKIP, reason="profile sets no minimum GPU memory")
    return per_gpu(
        "gpu.memory", f["nvml"],
        lambda g: None if (g.get("memory_total_MiB") or 0) >= minimum
        else (Status.FAIL, f"{g.get('memory_total_MiB')} MiB < {minimum} MiB"),
        lambda g: g.get("memory_total_MiB"), f">= {minimum} MiB", f"every GPU has >= {minimum} MiB",
        "a GPU reporting less memory than its model has is faulty or in a wrong mode: reset, then RMA")


def persistence(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("gpu", "persistence_mode_required", False):
        return Result("gpu.persistence", Status.SKIP, reason="profile does not require persistence mode")
    return per_gpu(
        "gpu.persistence", f["nvml"],
        lambda g: None if g.get("persistence_mode") else (Status.FAIL, "persistence mode off"),
        lambda g: g.get("persistence_mode"), True, "persistence mode on",
        "start nvidia-persistenced (systemctl enable --now nvidia-persistenced); without it every job pays "
        "driver initialisation and GPU state can reset between jobs")


def mig(f: dict[str, Any], p: Profile) -> Result:
    expected = p.get("gpu", "mig_mode_expected", False)

    def inspect(g: dict[str, Any]) -> tuple[Status, str] | None:
        current = bool(g.get("mig_mode"))
        if current != expected:
            return Status.FAIL, f"MIG {'enabled' if current else 'disabled'}, expected {'on' if expected else 'off'}"
        if g.get("mig_mode_pending") is not None and bool(g["mig_mode_pending"]) != current:
            return Status.WARN, "a MIG mode change is pending a GPU reset"
        return None

    return per_gpu("gpu.mig", f["nvml"], inspect, lambda g: g.get("mig_mode"), expected,
                   f"MIG {'enabled' if expected else 'disabled'} as expected",
                   "nvidia-smi -i N -mig 0 (or 1) and reset the GPU; MIG slices cannot run NCCL across GPUs")


CHECKS = [
    Check("gpu.count", ("nvml",), count, "GPU count against the profile; lost GPUs named"),
    Check("gpu.model", ("nvml",), model, "GPU model against the profile"),
    Check("gpu.compute_capability", ("nvml",), compute_capability, "compute capability >= the profile's minimum"),
    Check("gpu.driver", ("nvml",), driver, "driver and CUDA driver versions against the stack's minimum"),
    Check("gpu.memory", ("nvml",), memory, "memory per GPU against the profile"),
    Check("gpu.persistence", ("nvml",), persistence, "persistence mode on"),
    Check("gpu.mig", ("nvml",), mig, "MIG mode as the profile expects"),
]
