"""Link checks: PCIe generation/width, NVLink, Fabric Manager, GPU-NIC NUMA affinity."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

from ..model import Result, Status
from ..process import CallTimeout, call_with_timeout
from ..profiles import SOURCES, Profile
from . import Check, CollectError, Context
from .per_gpu import (
    EVIDENCE,
    Finding,
    field_error,
    live_gpus,
    per_gpu,
    read_finding,
    requires,
    skip_unless_unread,
    stated,
    thresholds,
)

PCIE_FIELDS = ("pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max")
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # PCI class: display controller, VGA-compatible / 3D controller
NVSWITCH_CLASS = "0x0680"  # PCI class "bridge, other": how an NVSwitch shows on the bus (lspci "Bridge: ... NVSwitch")
STUCK_HINT = ("a sysfs file that does not answer is held by a wedged driver: check dmesg, `ps -eo state,pid,cmd` "
              "for processes in D state; a reboot clears it")
T = TypeVar("T")


def pcie(f: dict[str, Any], p: Profile) -> Result:
    def inspect(g: dict[str, Any]) -> Finding:
        gen_min, width_min = p.for_gpu(g, "pcie_gen_min"), p.for_gpu(g, "pcie_width_min")
        link = g.get("pcie") or {}
        width, width_max, gen, gen_max = link.get("width"), link.get("width_max"), link.get("gen"), link.get("gen_max")
        if (width is None or gen is None) and not any(field_error(g, key) for key in PCIE_FIELDS):
            return Status.ERROR, "PCIe link not reported"
        # what was not read is per_gpu's to report; each comparison below needs both of its sides read
        if width is not None and width_max and width < width_max:
            return Status.FAIL, f"link trained to x{width} of x{width_max} (Gen{gen} of Gen{gen_max})"
        if width is not None and width_min and width < width_min:
            return Status.FAIL, f"x{width} < x{width_min}"
        if gen is not None and gen_max and gen < gen_max:
            # GPUs drop the link generation when idle to save power: only a hint without load.
            return Status.WARN, f"link at Gen{gen} of Gen{gen_max} (normal when idle; re-check under load)"
        if gen is not None and gen_min and gen < gen_min:
            return Status.FAIL, f"Gen{gen} < Gen{gen_min}"
        return None

    nvml = f["nvml"]
    return per_gpu("gpu.pcie", nvml, inspect,
                   lambda g: "Gen{gen} x{width} (max Gen{gen_max} x{width_max})".format(**(g.get("pcie") or {}))
                   if (g.get("pcie") or {}).get("width") is not None else None,
                   {"gen_min": stated(thresholds(p, nvml, "pcie_gen_min")),
                    "width_min": stated(thresholds(p, nvml, "pcie_width_min")), "at_max": True},
                   "links at full width",
                   "reseat the GPU or riser, check the slot's BIOS settings; a downtrained link cuts "
                   "host-device and GPUDirect bandwidth", fields=PCIE_FIELDS)


def nvlink(f: dict[str, Any], p: Profile) -> Result:
    nvml = f["nvml"]
    if not requires(p, nvml, "nvlink_links_per_gpu"):
        why = (p.data.get(SOURCES) or {}).get("gpu.nvlink_links_per_gpu")  # a derived profile says why not
        return skip_unless_unread("gpu.nvlink", nvml, ("nvlink",), why or "profile expects no NVLink")
    optional = requires(p, nvml, "nvlink_optional")

    def inspect(g: dict[str, Any]) -> Finding:
        expected, links = p.for_gpu(g, "nvlink_links_per_gpu"), g.get("nvlink")
        bridged = not p.for_gpu(g, "nvlink_optional", False)
        if not expected:
            return None
        if links is None:
            if field_error(g, "nvlink") or not bridged:
                return None  # an optional bridge not fitted: NVML reports no link
            return Status.FAIL, "no NVLink reported"
        if links["up"] < expected and (bridged or links["up"] > 0):
            down = ", ".join(map(str, links["down"])) or "missing"
            fitted = "" if bridged else " (a bridge is fitted: every link must be up)"
            return Status.FAIL, f"{links['up']} of {expected} NVLinks up (down: {down}){fitted}"
        return None

    wanted = stated(thresholds(p, nvml, "nvlink_links_per_gpu"))
    uniform = not isinstance(wanted, dict)
    expected = f"{wanted} links up per GPU" if uniform else {label: f"{n} links up" for label, n in wanted.items()}
    return per_gpu("gpu.nvlink", nvml, inspect, lambda g: (g.get("nvlink") or {}).get("up"),
                   {"links": expected, "bridges_optional": True} if optional else expected,
                   "every GPU's NVLinks up, or none where a bridge is optional and not fitted" if optional
                   else f"{wanted} NVLinks up on every GPU" if uniform else "every GPU's NVLinks up",
                   f"check nvidia-smi nvlink -s and Xid 74; {EVIDENCE}; reseat the bridge, the GPU or the NVSwitch "
                   "baseboard, or RMA", fields=("nvlink",))


FABRIC_MANAGER_NAMES = {"nv-fabricmanager", "nvidia-fabricmanager"}  # the daemon's process name, as /proc has it


def find_fabric_manager() -> dict[str, Any]:
    """The daemon by its process name; one that died and was not reaped yet (a zombie) is not running."""
    for proc in psutil.process_iter(["name", "pid", "status"]):
        if proc.info.get("name") in FABRIC_MANAGER_NAMES and proc.info.get("status") != psutil.STATUS_ZOMBIE:
            return {"running": True, "pid": proc.info["pid"]}
    return {"running": False, "pid": None}


def collect_fabric_manager(ctx: Context) -> dict[str, Any]:
    """The process list from /proc, under ctx.call_limit (a process stuck in the kernel can hold /proc/PID)."""
    try:
        return call_with_timeout(find_fabric_manager, ctx.call_limit)
    except CallTimeout as exc:
        raise CollectError(f"listing the processes (psutil.process_iter) {exc}", STUCK_HINT, harness=True) from None


class Sysfs:
    """One collector's reads under sysfs_root(), run in a thread under one limit. Each path is noted before it is
    touched, so that a read stuck in the kernel (an attribute of a wedged driver; a FIFO in a test tree) is
    named: `scan` raises CollectError "reading PATH did not return within N s"."""

    def __init__(self) -> None:
        self.at = ""

    def read(self, path: Path) -> str | None:
        self.at = str(path)
        try:
            return path.read_text().strip().lower()
        except OSError:
            return None

    def numa_node(self, device_dir: Path) -> int | None:
        try:
            return int(self.read(device_dir / "numa_node") or "")
        except ValueError:
            return None

    def listing(self, directory: Path) -> list[Path] | None:
        """The entries of a directory, sorted; None when it is not one."""
        self.at = str(directory)
        return sorted(directory.iterdir()) if directory.is_dir() else None

    def link(self, path: Path) -> str | None:
        """Where a symbolic link points (its last part), None when it is not a link."""
        self.at = str(path)
        return os.path.basename(os.readlink(path)) if path.is_symlink() else None

    def scan(self, ctx: Context, fn: Callable[[Sysfs], T]) -> T:
        try:
            return call_with_timeout(fn, ctx.call_limit, self)
        except CallTimeout as exc:
            raise CollectError(f"reading {self.at} {exc}", STUCK_HINT, harness=True) from None


def fabric_manager(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("gpu", "nvswitch", False):
        return Result("gpu.fabric_manager", Status.SKIP, reason="no NVSwitch in this profile")
    if f["fabric_manager"]["running"]:
        return Result("gpu.fabric_manager", Status.PASS, "running", "running",
                      f"nv-fabricmanager running (pid {f['fabric_manager']['pid']})")
    return Result("gpu.fabric_manager", Status.FAIL, "not running", "running",
                  "nv-fabricmanager is not running: on NVSwitch systems CUDA cannot use the GPUs without it",
                  "systemctl enable --now nvidia-fabricmanager; its version must equal the driver's")


def sysfs_pci_address(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' (8-digit domain) -> sysfs '0000:18:00.0'."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.lower()


def sysfs_root() -> Path:
    """/sys, or a fake tree named by GPUCHECK_SYSFS_ROOT (only tests and the lab set it)."""
    return Path(os.environ.get("GPUCHECK_SYSFS_ROOT") or "/sys")


def collect_nic_numa(ctx: Context) -> dict[str, Any]:
    """NUMA node of every RDMA device and GPU, from sysfs: NVML reports none on x86 hosts."""
    bus_ids = {g["index"]: g["pci_bus_id"] for g in live_gpus(ctx.facts.get("nvml") or {}) if g.get("pci_bus_id")}

    def scan(sysfs: Sysfs) -> dict[str, Any]:
        nics = {dev.name: sysfs.numa_node(dev / "device")
                for dev in sysfs.listing(sysfs_root() / "class" / "infiniband") or []}
        devices = sysfs_root() / "bus" / "pci" / "devices"
        gpus = {index: sysfs.numa_node(devices / sysfs_pci_address(bus)) for index, bus in bus_ids.items()}
        return {"nics": nics, "gpus": gpus}

    return Sysfs().scan(ctx, scan)


def collect_pci_gpus(ctx: Context) -> dict[str, Any]:
    """NVIDIA GPUs on the PCI bus, whatever the driver makes of them: vendor 0x10de, class VGA (0x0300xx)
    or 3D controller (0x0302xx); and the NVSwitches (bridges, 0x0680xx), which say the GPUs' NVLinks go
    through a switch. HDMI audio (0x0403xx) is neither."""
    devices = sysfs_root() / "bus" / "pci" / "devices"

    def scan(sysfs: Sysfs) -> dict[str, Any]:
        found = sysfs.listing(devices)
        if found is None:
            raise CollectError(f"{devices} not readable: the PCI bus cannot be listed", harness=True)
        gpus, nvswitches = [], []
        for dev in found:
            if sysfs.read(dev / "vendor") != NVIDIA_VENDOR:
                continue
            pci_class = sysfs.read(dev / "class") or ""
            if pci_class.startswith(GPU_CLASSES):
                # driver: a link to .../drivers/nvidia (or vfio-pci, nouveau), none when unbound
                gpus.append({"address": dev.name.lower(), "device": sysfs.read(dev / "device"), "class": pci_class,
                             "driver": sysfs.link(dev / "driver")})
            elif pci_class.startswith(NVSWITCH_CLASS):
                nvswitches.append({"address": dev.name.lower(), "device": sysfs.read(dev / "device")})
        return {"gpus": gpus, "nvswitches": nvswitches}

    return Sysfs().scan(ctx, scan)


def nic_affinity(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("infiniband", "nic_affinity_required", False):
        return skip_unless_unread("gpu.nic_affinity", f["nvml"], ("numa_node",),
                                  "profile does not require GPU-NIC affinity")
    nics = {name: numa for name, numa in f["nic_numa"]["nics"].items() if numa is not None and numa >= 0}
    if not nics:
        return Result("gpu.nic_affinity", Status.FAIL, None, "an RDMA NIC on each GPU's NUMA node",
                      "no RDMA device with a NUMA node in /sys/class/infiniband",
                      "install the IB stack (site.yml --tags network) and check the HCAs are seen (ibstat)")
    numas = set(nics.values())

    sysfs_gpus = f["nic_numa"].get("gpus", {})

    def numa(g: dict[str, Any]) -> int | None:
        node = g.get("numa_node")
        return node if node is not None else sysfs_gpus.get(g["index"])

    def inspect(g: dict[str, Any]) -> Finding:
        node = numa(g)
        if node is None and field_error(g, "numa_node"):
            return read_finding("numa_node", field_error(g, "numa_node"))  # and sysfs has none either
        if node is None or node < 0:
            return None  # single-socket or not reported: nothing to mismatch
        if node not in numas:
            return Status.WARN, f"on NUMA node {node}, no RDMA NIC there (NICs on {sorted(numas)})"
        return None

    if not live_gpus(f["nvml"]):
        return Result("gpu.nic_affinity", Status.SKIP, reason="no responsive GPU")
    return per_gpu("gpu.nic_affinity", f["nvml"], inspect, numa,
                   {"nic_numa_nodes": nics}, "every GPU has an RDMA NIC on its NUMA node",
                   "traffic will cross the CPU interconnect: check the NIC placement and NCCL_IB_HCA mapping")


CHECKS = [
    Check("gpu.pcie", ("nvml",), pcie, "PCIe link at full width (and generation)"),
    Check("gpu.nvlink", ("nvml",), nvlink, "every NVLink up"),
    Check("gpu.fabric_manager", ("fabric_manager",), fabric_manager, "Fabric Manager running on NVSwitch systems"),
    Check("gpu.nic_affinity", ("nvml", "nic_numa"), nic_affinity, "an RDMA NIC on every GPU's NUMA node"),
]
COLLECTORS = {"fabric_manager": collect_fabric_manager, "nic_numa": collect_nic_numa, "pci_gpus": collect_pci_gpus}
