"""The daemons' stand-ins, by payload kind: nvidia-persistenced, Fabric Manager (nvidia-fabricmanager-<branch>) and
DCGM's host engine and dcgmi (datacenter-gpu-manager-4-core), with the systemd units their packages ship.

nvidia-persistenced is a Python 3 script with Debian's unit and maintainer script (standins/nvidia-persistenced.*).
nv-fabricmanager is compiled from standins/nv-fabricmanager.c with the driver version of its package compiled
in; dcgmi and nv-hostengine are Python 3 scripts (lab hosts have python3) that answer `dcgmi diag` from the
recorded real outputs in standins/dcgm. README.md says what each does and where each behaviour comes from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .model import Package
from .standin_sources import STANDINS, Entry, compile_program, render

# Where NVIDIA's packages put them (README.md cites each).
PERSISTENCED = "usr/bin/nvidia-persistenced"
PERSISTENCED_UNIT = "lib/systemd/system/nvidia-persistenced.service"
POSTINST = "DEBIAN/postinst"  # a maintainer script: dpkg-deb takes DEBIAN/ as the control area
FABRIC_MANAGER = "usr/bin/nv-fabricmanager"
FABRIC_MANAGER_CONFIG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
FABRIC_MANAGER_UNIT = "lib/systemd/system/nvidia-fabricmanager.service"
DCGMI = "usr/bin/dcgmi"
HOST_ENGINE = "usr/bin/nv-hostengine"
DCGM_UNIT = "usr/lib/systemd/system/nvidia-dcgm.service"
# Ours, not NVIDIA's: the recorded real `dcgmi diag` outputs the stand-in dcgmi prints.
DCGM_RECORDINGS = "usr/share/gpucheck-standin/dcgm"
RECORDINGS_SOURCE = STANDINS / "dcgm"


def persistenced(pkg: Package, cache: Path) -> list[Entry]:
    return [Entry(PERSISTENCED, render("nvidia-persistenced.py.in", {"VERSION": pkg.params["v"]}).encode(), mode=0o755),
            Entry(PERSISTENCED_UNIT, (STANDINS / "nvidia-persistenced.service").read_bytes()),
            Entry(POSTINST, (STANDINS / "nvidia-persistenced.postinst").read_bytes(), mode=0o755)]


def fabric_manager(pkg: Package, cache: Path) -> list[Entry]:
    version = pkg.params["v"]
    built = compile_program("nv-fabricmanager.c", "nv-fabricmanager", {"STANDIN_FM_VERSION": f'"{version}"'},
                            cache, libs=("-ldl",))
    return [Entry(FABRIC_MANAGER, built.read_bytes(), mode=0o755),
            Entry(FABRIC_MANAGER_CONFIG, (STANDINS / "fabricmanager.cfg").read_bytes()),
            Entry(FABRIC_MANAGER_UNIT, (STANDINS / "nvidia-fabricmanager.service").read_bytes())]


def upstream_version(pkg: Package) -> str:
    """'1:4.5.2-1' -> '4.5.2': the version DCGM's programs report (no epoch, no Debian revision)."""
    return pkg.version.split(":", 1)[-1].rsplit("-", 1)[0]


def dcgm_core(pkg: Package, cache: Path) -> list[Entry]:
    # dcgmi finds the recordings from its own path, so that an unpacked package (the tests) works as well
    values = {"VERSION": upstream_version(pkg), "RECORDINGS": os.path.relpath(DCGM_RECORDINGS, Path(DCGMI).parent)}
    recordings = [Entry(f"{DCGM_RECORDINGS}/{path.name}", path.read_bytes())
                  for path in sorted(RECORDINGS_SOURCE.iterdir()) if path.is_file()]
    return [Entry(DCGMI, render("dcgmi.py.in", values).encode(), mode=0o755),
            Entry(HOST_ENGINE, render("nv-hostengine.py.in", values).encode(), mode=0o755),
            Entry(DCGM_UNIT, render("nvidia-dcgm.service.in", {"CMAKE_INSTALL_BINDIR": "bin"}).encode()),
            *recordings]


DAEMON_KINDS: dict[str, Callable[[Package, Path], list[Entry]]] = {
    "persistenced": persistenced, "fabric-manager": fabric_manager, "dcgm-core": dcgm_core,
}
