"""A stand-in for NVIDIA's debian12 CUDA repository (issue 20, section 2): NVIDIA's package names, versions and
relations (packages.yaml, every entry cited), built into real .debs whose payloads answer the project's consumers
(the fake NVML at the driver's version, libcudart/libcudnn/libnccl version functions, nvcc --version,
nv-fabricmanager's driver-version check, dcgmi diag from recorded real outputs), in a flat apt repository signed
by a key the build makes. README.md says what each stand-in answers and what is missing.

    from lab.nvidia_repo import build
    repo = build(Path("/tmp/nvidia-repo"))     # repo.source_line() -> "deb [signed-by=...] file:... /"

Command line: ``python -m lab.nvidia_repo build DIR`` (prints the fingerprint and the sources line).
"""

from __future__ import annotations

from .apt_sim import IsolatedApt, Simulation, status_with
from .build import RepoBuild, build, resign
from .model import MODEL, Model, NvidiaRepoError, Package, load

__all__ = ["MODEL", "IsolatedApt", "Model", "NvidiaRepoError", "Package", "RepoBuild", "Simulation", "build", "load",
           "resign", "status_with"]
