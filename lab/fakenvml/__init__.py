"""Build and use the fake NVML library (``libnvidia-ml.so.1``) that answers from a scenario file.

The C source is compiled against the real ``nvml.h`` from PyPI's ``nvidia-nvml-dev`` wheel, so
the compiler checks every signature and struct the fake implements.  Typical use::

    libdir = build_library()
    env = env_for(scenario_path("dgx-h100"), libdir, trace=tmp / "trace")
    subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], env=env, timeout=30)

Scenario format: ``lab/scenarios/README.md``. The PCI bus the agent compares NVML with: ``pci.py``
(``write_pci_tree``, ``write_pci_tree_for``), re-exported here.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from lab.c_build import CompileError, build_cached

from .pci import scenario_pci_gpus, write_pci_tree, write_pci_tree_for

__all__ = [
    "HEADER_SHA256",
    "NVML_DEV_VERSION",
    "SCENARIOS_DIR",
    "SOURCE",
    "FakeNvmlError",
    "build_library",
    "env_for",
    "find_header",
    "scenario_path",
    "scenario_pci_gpus",
    "write_pci_tree",
    "write_pci_tree_for",
]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fakenvml.c"
SCENARIOS_DIR = HERE.parent / "scenarios"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucheck" / "fakenvml"

NVML_DEV_VERSION = "13.4.92"
# sha256 of nvidia/cu13/include/nvml.h inside nvidia-nvml-dev 13.4.92 (checked after download).
HEADER_SHA256 = "c9b494b7c8015b6ae7aca62b2ce98e6b13f3277a2bec80de528371e725d54012"
HEADER_IN_WHEEL = "nvidia/cu13/include/nvml.h"

CFLAGS = [
    "-std=c11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra",
    # Every exported function must be one nvml.h declares (catches misspelt symbol names).
    "-Werror=missing-prototypes", "-Werror=incompatible-pointer-types",
    "-Wl,-soname,libnvidia-ml.so.1", "-Wl,--no-undefined",
]
LIBS = ["-lpthread"]
PIP_TIMEOUT_S = 300


class FakeNvmlError(RuntimeError):
    """The fake library cannot be built (no compiler, no header)."""


def scenario_path(name: str) -> Path:
    """Path of ``lab/scenarios/<name>.scn`` (``name`` may already end in ``.scn``)."""
    file = SCENARIOS_DIR / (name if name.endswith(".scn") else f"{name}.scn")
    if not file.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIOS_DIR.glob("*.scn")))
        raise FileNotFoundError(f"no scenario {name!r} in {SCENARIOS_DIR} (known: {known})")
    return file


def env_for(scenario: Path, libdir: Path, trace: Path | None = None) -> dict[str, str]:
    """A copy of ``os.environ`` that makes ``libnvidia-ml.so.1`` resolve to the fake in ``libdir``."""
    env = dict(os.environ)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{libdir}:{old}" if old else str(libdir)
    env["FAKENVML_SCENARIO"] = str(scenario)
    if trace is None:
        env.pop("FAKENVML_TRACE", None)
    else:
        env["FAKENVML_TRACE"] = str(trace)
    return env


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _header_from_wheel(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(HEADER_IN_WHEEL)
    if hashlib.sha256(data).hexdigest() != HEADER_SHA256:
        raise FakeNvmlError(f"{wheel.name}: {HEADER_IN_WHEEL} does not match the pinned sha256 {HEADER_SHA256}")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".nvml.h.{os.getpid()}"
    tmp.write_bytes(data)
    os.replace(tmp, dest / "nvml.h")
    return dest / "nvml.h"


def find_header(cache_dir: Path | None = None) -> Path:
    """``nvml.h`` of nvidia-nvml-dev 13.4.92: from ``$FAKENVML_NVML_H``, an installed
    nvidia-nvml-dev, the cache, or downloaded with pip into the cache (sha256-checked)."""
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    explicit = os.environ.get("FAKENVML_NVML_H")
    if explicit:
        if not Path(explicit).is_file():
            raise FakeNvmlError(f"FAKENVML_NVML_H={explicit} is not a file")
        return Path(explicit)
    for entry in sys.path:
        candidate = Path(entry or ".") / HEADER_IN_WHEEL
        if candidate.is_file() and _sha256(candidate) == HEADER_SHA256:
            return candidate
    include = cache / f"nvidia-nvml-dev-{NVML_DEV_VERSION}" / "include"
    cached = include / "nvml.h"
    if cached.is_file() and _sha256(cached) == HEADER_SHA256:
        return cached
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"nvidia_nvml_dev-{NVML_DEV_VERSION}-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", str(wheels), f"nvidia-nvml-dev=={NVML_DEV_VERSION}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FakeNvmlError(f"cannot download nvidia-nvml-dev=={NVML_DEV_VERSION} with pip: {exc}") from exc
        found = sorted(wheels.glob(f"nvidia_nvml_dev-{NVML_DEV_VERSION}-*.whl"))
        if proc.returncode != 0 or not found:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise FakeNvmlError(
                f"cannot download nvidia-nvml-dev=={NVML_DEV_VERSION} with pip (exit {proc.returncode}): "
                + " | ".join(tail)
                + "; set FAKENVML_NVML_H to an nvml.h of that version to build offline"
            )
    return _header_from_wheel(found[-1], include)


def build_library(cache_dir: Path | None = None) -> Path:
    """Compile ``fakenvml.c`` once into the cache; return the directory holding ``libnvidia-ml.so.1``.

    The build directory is named after a hash of the C source, the header and the flags, so
    any change rebuilds; concurrent builds are safe (atomic rename).
    """
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    header = find_header(cache)
    try:
        return build_cached(SOURCE, "libnvidia-ml.so.1", CFLAGS, cache, include=[header.parent],
                            inputs=header.read_bytes(), libs=LIBS).parent
    except CompileError as exc:
        raise FakeNvmlError(f"{exc}:\n{exc.stderr}" if exc.stderr else str(exc)) from exc
