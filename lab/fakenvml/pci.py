"""Fake PCI buses for the agent's sysfs reader (``GPUCHECK_SYSFS_ROOT``), by hand or from a scenario.

The agent counts the NVIDIA GPUs on the PCI bus (``bus/pci/devices/*/{vendor,class,device,driver}``)
and fails ``gpu.count`` when NVML shows fewer. Tests and lab hosts give it a tree that matches the
simulated GPUs instead of the build machine's own bus:

- ``write_pci_tree(root, bus_ids, ...)``: a tree with the given GPUs (and other devices);
- ``scenario_pci_gpus(scenario)``: the GPUs a scenario's machine has on its bus: slots
  ``0..pci_gpu_count-1`` (``pci_gpu_count`` defaults to ``gpu_count``), each with its ``pci_bus_id``
  and the device id from ``pci_device_id``, read the way the fake library reads the file (includes,
  ``gpu.*`` then ``gpu.N``, last assignment wins);
- ``write_pci_tree_for(scenario, root)``: both together.

Standard library only: the lab's host init and the tests import it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

NVIDIA_VENDOR = "0x10de"
GPU_CLASS_3D = "0x030200"  # a 3D controller, as data-centre GPUs (H100, A100, T4, P100) present themselves
MAX_GPUS = 64  # the fake library's slots
MAX_INCLUDE_DEPTH = 8


class ScenarioError(ValueError):
    """The scenario cannot be read for its PCI bus (missing file, no gpu_count, a bad value)."""


def sysfs_address(bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` (or sysfs's ``0000:18:00.0``) as sysfs names it: ``0000:18:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    if not rest:
        raise ScenarioError(f"not a PCI bus id: {bus_id!r}")
    return f"{int(domain, 16):04x}:{rest}"


def write_pci_tree(root: Path, gpus: Iterable[str], extra: Iterable[tuple[str, str, str]] = (),
                   device: str = "0x2330", gpu_class: str = GPU_CLASS_3D, driver: str | None = "nvidia") -> Path:
    """A fake sysfs tree for the agent (``GPUCHECK_SYSFS_ROOT=root``): ``bus/pci/devices/<address>/``
    with ``vendor``, ``device`` and ``class`` files and a ``driver`` link, one per GPU bus id (NVML's
    ``00000000:18:00.0`` or sysfs's ``0000:18:00.0``; default an H100 SXM5, a 3D controller bound to
    ``nvidia``), plus ``extra`` devices given as (address, vendor, class), e.g. an NVSwitch
    ``("0000:05:00.0", "0x10de", "0x068000")``. Returns ``root``."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    entries = [(bus, NVIDIA_VENDOR, gpu_class, device, driver) for bus in gpus]
    entries += [(bus, vendor, pci_class, "0x0000", None) for bus, vendor, pci_class in extra]
    for bus, vendor, pci_class, dev_id, drv in entries:
        node = devices / sysfs_address(bus)
        node.mkdir(exist_ok=True)
        for name, value in (("vendor", vendor), ("device", dev_id), ("class", pci_class)):
            (node / name).write_text(value + "\n")
        if drv:
            (root / "bus" / "pci" / "drivers" / drv).mkdir(parents=True, exist_ok=True)
            (node / "driver").symlink_to(f"../../drivers/{drv}")
    return root


def assignments(path: Path, depth: int = 0) -> Iterable[tuple[str, str]]:
    """(key, value) of a scenario file in file order, includes expanded in place (as the library does)."""
    if depth > MAX_INCLUDE_DEPTH:
        raise ScenarioError(f"{path}: includes nested deeper than {MAX_INCLUDE_DEPTH}")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc.strerror or exc}") from exc
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ScenarioError(f"{path}:{number}: expected 'key = value', got {line!r}")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if key == "include":
            yield from assignments(path.parent / value, depth + 1)
        elif key == "include_if_present":
            if (path.parent / value).exists():
                yield from assignments(path.parent / value, depth + 1)
        else:
            yield key, value


def _count(path: Path, key: str, value: str) -> int:
    try:
        number = int(value, 0)
    except ValueError:
        raise ScenarioError(f"{path}: {key} = {value!r} is not a number") from None
    if not 0 <= number <= MAX_GPUS:
        raise ScenarioError(f"{path}: {key} = {number} is out of range (0..{MAX_GPUS})")
    return number


def scenario_pci_gpus(scenario: Path) -> list[tuple[str, str]]:
    """(sysfs address, device id) of every GPU the scenario's machine has on its PCI bus, in slot order.

    A slot whose bus id is unset or ``unsupported`` has no place on the bus and is left out; the
    device id is ``pci_device_id >> 16`` (``0x233010DE`` -> ``0x2330``), ``0x0000`` when unset."""
    scenario = Path(scenario)
    fields: dict[str, list[str | None]] = {"pci_bus_id": [None] * MAX_GPUS, "pci_device_id": [None] * MAX_GPUS}
    system: dict[str, str] = {}
    for key, value in assignments(scenario):
        if key.startswith("gpu."):
            slot, _, field = key[4:].partition(".")
            if field not in fields:
                continue
            if slot == "*":
                fields[field] = [value] * MAX_GPUS
            elif slot.isdigit() and int(slot) < MAX_GPUS:
                fields[field][int(slot)] = value
        elif key in ("gpu_count", "pci_gpu_count"):
            system[key] = value
    if "gpu_count" not in system:
        raise ScenarioError(f"{scenario}: 'gpu_count' is required")
    gpu_count = _count(scenario, "gpu_count", system["gpu_count"])
    on_bus = system.get("pci_gpu_count", "unsupported")
    on_bus_count = gpu_count if on_bus.lower() == "unsupported" else _count(scenario, "pci_gpu_count", on_bus)
    if on_bus_count < gpu_count:
        raise ScenarioError(f"{scenario}: pci_gpu_count = {on_bus_count} is less than gpu_count = {gpu_count}")
    gpus = []
    for slot in range(on_bus_count):
        bus_id, device_id = fields["pci_bus_id"][slot], fields["pci_device_id"][slot]
        if not bus_id or bus_id.lower() == "unsupported":
            continue
        try:
            device = f"0x{int(device_id, 0) >> 16:04x}" if device_id and device_id.lower() != "unsupported" \
                else "0x0000"
        except ValueError:
            raise ScenarioError(f"{scenario}: gpu.{slot}.pci_device_id = {device_id!r} is not a number") from None
        gpus.append((sysfs_address(bus_id), device))
    return gpus


def write_pci_tree_for(scenario: Path, root: Path) -> Path:
    """Replace ``root`` with the PCI tree of the scenario's machine (its GPUs, bound to ``nvidia``).

    Built beside ``root`` and renamed into place, so a reader sees the old tree or the new one."""
    gpus = scenario_pci_gpus(scenario)
    root = Path(root)
    staging = root.with_name(f".{root.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "bus" / "pci" / "devices").mkdir(parents=True)
    for address, device in gpus:
        write_pci_tree(staging, [address], device=device)
    old = root.with_name(f".{root.name}.old{os.getpid()}")
    if root.exists():
        root.rename(old)
    staging.rename(root)
    shutil.rmtree(old, ignore_errors=True)
    return root
