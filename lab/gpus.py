"""Simulated GPUs: the fake NVML library (lab/fakenvml) and each host's scenario directory.

Each host sees, read-only, the library at the driver's path and its own scenario directory at
/etc/fakenvml (the library reads /etc/fakenvml/scenario). The directory lives outside the host's
root, under /run/gpucheck-lab/hosts/<host>/fakenvml, so the lab can change a host's GPUs (a fault)
without entering the host, and nothing of it leaks into a golden image.

Beside the scenario, /etc/fakenvml/sys is the PCI bus of the scenario's machine (its GPUs' bus ids,
lab.fakenvml.pci): the agent compares NVML with it (GPUCHECK_SYSFS_ROOT, set by the host's sshd), so
a GPU the scenario hides from NVML is still on the bus, and the build machine's own PCI devices
never are.

A GPU reset (`nvidia-smi -r -i ID`, the stand-in nvidia-smi of lab/nvidia_repo) writes what it cleared into the
host's reset layer, /var/lib/fakenvml/reset.scn, bound writable from reset_dir(host): the host's scenario includes
it last, so the cleared counters win over the scenario's, and installing a scenario for the host empties it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
from pathlib import Path

from lab import config
from lab.errors import LabError

NVIDIA_MAJOR = 195  # the NVIDIA driver's character devices, /dev/nvidia0 ... (nvidia-modprobe)
DEVICE_DIR = "dev"  # beside the scenario: /etc/fakenvml/dev/nvidiaN on the host
INCLUDE_RE = re.compile(r"^\s*include\s*=\s*(\S+)\s*$")
# Every agent run starts by counting the GPUs, so a hang here hangs every NVML probe of the host.
HANG_CALL = "nvmlDeviceGetCount_v2"
MAX_GPU_SLOTS = 64  # the library's GPU slots (lab/scenarios/README.md)
UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "gpucheck-lab:gpu")  # its hosts' GPU UUIDs derive from it
# Last in a host's scenario: the driver version is the installed driver package's, once there is one, and NVML
# fails with a version mismatch while that is not the loaded module's (hostinit.py writes it at each boot).
DRIVER_LINES = ("# added by the lab: the installed driver package's versions, and the loaded module's\n"
                f"include_if_present = {config.DRIVER_SCENARIO}\n"
                f"include_if_present = {config.KERNEL_DIR}/{config.MODULE_SCENARIO_FILE}\n")
# Inside a GPU host: what the stand-in `nvidia-smi -r` cleared since the scenario was installed (it writes the file).
RESET_DIR = "/var/lib/fakenvml"
RESET_FILE = "reset.scn"
RESET_LAYER = f"{RESET_DIR}/{RESET_FILE}"
# The very last line of a host's scenario: a reset outweighs every line before it (the last assignment wins).
RESET_LINES = ("# added by the lab: what GPU resets (nvidia-smi -r) cleared since this scenario was installed\n"
               f"include_if_present = {RESET_LAYER}\n")


def _fakenvml():  # imported late: the rest of the lab works without it
    try:
        from lab import fakenvml
    except ImportError as exc:
        raise LabError(f"lab/fakenvml is not available ({exc}); simulated GPUs need it") from exc
    return fakenvml


def scenarios_dir() -> Path:
    return config.REPO_ROOT / "lab" / "scenarios"


def available() -> list[str]:
    return sorted(p.stem for p in scenarios_dir().glob("*.scn"))


def scenario_file(name: str) -> Path:
    try:
        path = Path(_fakenvml().scenario_path(name))
    except (FileNotFoundError, ValueError):
        path = scenarios_dir() / f"{name}.scn"
    if not path.is_file():
        names = ", ".join(available()) or "none"
        raise LabError(f"unknown scenario {name!r} (available: {names})")
    return path


def library() -> Path:
    """The fake libnvidia-ml.so.1 (built on first use by lab/fakenvml)."""
    try:
        directory = Path(_fakenvml().build_library())
    except LabError:
        raise
    except Exception as exc:  # any build failure becomes one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LabError(f"building the fake NVML library failed: {first}") from exc
    lib = directory / "libnvidia-ml.so.1"
    if not lib.is_file():
        raise LabError(f"lab/fakenvml built no {lib}")
    return lib


def _copy_with_includes(source: Path, dest: Path, dest_dir: Path, seen: set[Path]) -> None:
    text = source.read_text()
    shutil.copyfile(source, dest)
    for line in text.splitlines():
        match = INCLUDE_RE.match(line)
        if not match:
            continue
        included = (source.parent / match.group(1)).resolve()
        if included in seen:
            continue
        if not included.is_file():
            raise LabError(f"scenario {source.name} includes {match.group(1)}, which does not exist")
        seen.add(included)
        target = dest_dir / match.group(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy_with_includes(included, target, dest_dir, seen)


def gpu_uuid(host: str, index: int) -> str:
    """GPU `index` of lab host `host`: the same at every `up`, never another host's (as a real GPU's is its own)."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{host}/gpu{index}')}"


def slot_count(scenario: Path) -> int:
    """How many GPU slots the scenario's machine has: its bus's GPUs (pci_gpu_count), at least gpu_count."""
    pci = _fakenvml().pci
    counts = {"gpu_count": 0, "pci_gpu_count": 0}
    try:
        for key, value in pci.assignments(scenario):
            if key in counts and value.lower() != "unsupported":
                counts[key] = int(value, 0)  # the last one wins, as in the library
    except (pci.ScenarioError, ValueError) as exc:
        raise LabError(f"cannot read the scenario's GPU count: {exc}") from exc
    return max(0, min(max(counts.values()), MAX_GPU_SLOTS))


def own_uuids(host: str, count: int) -> str:
    """Lines that give the host's GPUs UUIDs of their own, after the scenario's (the last assignment wins):
    every host would otherwise report the scenario's, and `gpucheck cluster` would take them for one machine."""
    if not count:
        return ""
    lines = [f"# added by the lab: {host}'s own GPUs", *(f"gpu.{i}.uuid = {gpu_uuid(host, i)}" for i in range(count))]
    return "\n".join(lines) + "\n"


def install(name: str, dest_dir: Path, host: str | None = None, resets: Path | None = None) -> None:
    """Make dest_dir hold scenario `name` as `scenario`, with the files it includes beside it; for `host` (a
    lab host's name), with that host's own GPU UUIDs. `resets`: the host's reset layer (reset_layer), emptied: a
    new fault is a new GPU state, which no reset has cleared."""
    source = scenario_file(name)
    dest_dir.mkdir(parents=True, exist_ok=True)
    bus = Path(config.FAKE_SYSFS_DIR).name  # replaced in one rename below: never missing for a reader
    # the scenario first: a running process keeps its scenario while the file is gone, and would reject it (on
    # stderr) were it there without an include (the library follows every file a scenario reads); and the resets
    # go while it is gone, so no reader meets the old GPUs without their resets, nor the new ones with them
    (dest_dir / "scenario").unlink(missing_ok=True)
    if resets:
        resets.unlink(missing_ok=True)
    for old in dest_dir.iterdir():
        if old.name == bus:
            continue
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    tmp = dest_dir / ".scenario.tmp"
    _copy_with_includes(source, tmp, dest_dir, {source.resolve()})
    if host:
        text = tmp.read_text()
        tmp.write_text(text + ("" if text.endswith("\n") or not text else "\n") + own_uuids(host, slot_count(tmp))
                       + DRIVER_LINES + RESET_LINES)
    tmp.replace(dest_dir / "scenario")
    write_device_nodes(dest_dir, len(gpu_functions(write_pci_bus(dest_dir))))


def reset_dir(host: str) -> Path:
    """Where lab host `host`'s RESET_DIR lives outside it (bound writable: the host's nvidia-smi writes there)."""
    return config.host_run_dir(host) / "fakenvml-reset"


def reset_layer(host: str) -> Path:
    """The host's reset layer as the lab sees it (absent until a reset cleared something)."""
    return reset_dir(host) / RESET_FILE


def prepare_reset_dir(host: str) -> Path:
    """The host's reset directory, before the host boots (a bind needs its source)."""
    directory = reset_dir(host)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def gpu_functions(sys_root: Path) -> list[Path]:
    """The simulated PCI bus's NVIDIA display/3D functions (class 0x03....)."""
    return sorted(d for d in (sys_root / "bus" / "pci" / "devices").iterdir()
                  if (d / "class").is_file() and (d / "class").read_text().strip().startswith("0x03"))


def write_device_nodes(dest_dir: Path, count: int) -> None:
    """dest_dir/dev/nvidia0..count-1: character devices 195:N, as the NVIDIA driver makes them, where Slurm's
    gres.conf points (inventory/lab: slurm_gpu_device_prefix); nothing opens them (the host's /dev is the
    machine's: they cannot go there)."""
    directory = dest_dir / DEVICE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.mknod(directory / f"nvidia{i}", stat.S_IFCHR | 0o666, os.makedev(NVIDIA_MAJOR, i))


def write_pci_bus(dest_dir: Path) -> Path:
    """dest_dir/sys: the PCI bus of the machine in dest_dir/scenario (what GPUCHECK_SYSFS_ROOT names)."""
    pci = _fakenvml().pci
    try:
        return pci.write_pci_tree_for(dest_dir / "scenario", dest_dir / Path(config.FAKE_SYSFS_DIR).name)
    except pci.ScenarioError as exc:
        raise LabError(f"cannot build the simulated PCI bus: {exc}") from exc


def add_hang(dest_dir: Path, call: str = HANG_CALL) -> None:
    """Make `call` hang on this host from now on (new processes and running ones re-reading it)."""
    scenario = dest_dir / "scenario"
    text = scenario.read_text()
    if not text.endswith("\n"):
        text += "\n"
    tmp = dest_dir / ".scenario.tmp"
    tmp.write_text(text + f"# added by `python3 -m lab fault HOST hang`\nhang = {call}\n")
    tmp.replace(scenario)
