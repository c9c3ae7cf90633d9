"""Link checks: PCIe generation/width, NVLink, Fabric Manager, GPU-NIC NUMA affinity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from ..model import Result, Status
from ..profiles import Profile
from . import Check, Context
from .per_gpu import Finding, live_gpus, per_gpu


def pcie(f: dict[str, Any], p: Profile) -> Result:
    gen_min, width_min = p.get("gpu", "pcie_gen_min"), p.get("gpu", "pcie_width_min")

    def inspect(g: dict[str, Any]) -> Finding:
        link = g.get("pcie") or {}
        width, width_max, gen, gen_max = link.get("width"), link.get("width_max"), link.get("gen"), link.get("gen_max")
        if width is None or gen is None:
            return Status.ERROR, "PCIe link not reported"
        if width_max and width < width_max:
            return Status.FAIL, f"link trained to x{width} of x{width_max} (Gen{gen} of Gen{gen_max})"
        if width_min and width < width_min:
            return Status.FAIL, f"x{width} < x{width_min}"
        if gen_max and gen < gen_max:
            # GPUs drop the link generation when idle to save power: only a hint without load.
            return Status.WARN, f"link at Gen{gen} of Gen{gen_max} (normal when idle; re-check under load)"
        if gen_min and gen < gen_min:
            return Status.FAIL, f"Gen{gen} < Gen{gen_min}"
        return None

    return per_gpu("gpu.pcie", f["nvml"], inspect,
                   lambda g: "Gen{gen} x{width} (max Gen{gen_max} x{width_max})".format(**(g.get("pcie") or {}))
                   if (g.get("pcie") or {}).get("width") is not None else None,
                   {"gen_min": gen_min, "width_min": width_min, "at_max": True}, "links at full width",
                   "reseat the GPU or riser, check the slot's BIOS settings; a downtrained link cuts "
                   "host-device and GPUDirect bandwidth")


def nvlink(f: dict[str, Any], p: Profile) -> Result:
    expected = p.get("gpu", "nvlink_links_per_gpu")
    if not expected:
        return Result("gpu.nvlink", Status.SKIP, reason="profile expects no NVLink")

    def inspect(g: dict[str, Any]) -> Finding:
        links = g.get("nvlink")
        if links is None:
            return Status.FAIL, "no NVLink reported"
        if links["up"] < expected:
            down = ", ".join(map(str, links["down"])) or "missing"
            return Status.FAIL, f"{links['up']} of {expected} NVLinks up (down: {down})"
        return None

    return per_gpu("gpu.nvlink", f["nvml"], inspect, lambda g: (g.get("nvlink") or {}).get("up"),
                   f"{expected} links up per GPU", f"{expected} NVLinks up on every GPU",
                   "check nvidia-smi nvlink -s and Xid 74; reseat the GPU/NVSwitch baseboard or RMA")


def collect_fabric_manager(ctx: Context) -> dict[str, Any]:
    names = {"nv-fabricmanager", "nvidia-fabricmanager"}
    for proc in psutil.process_iter(["name", "pid"]):
        if proc.info.get("name") in names:
            return {"running": True, "pid": proc.info["pid"]}
    return {"running": False, "pid": None}


def fabric_manager(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("gpu", "nvswitch", False):
        return Result("gpu.fabric_manager", Status.SKIP, reason="no NVSwitch in this profile")
    if f["fabric_manager"]["running"]:
        return Result("gpu.fabric_manager", Status.PASS, "running", "running",
                      f"nv-fabricmanager running (pid {f['fabric_manager']['pid']})")
    return Result("gpu.fabric_manager", Status.FAIL, "not running", "running",
                  "nv-fabricmanager is not running: on NVSwitch systems CUDA cannot use the GPUs without it",
                  "systemctl enable --now nvidia-fabricmanager; its version must equal the driver's")


def _numa_node(device_dir: Path) -> int | None:
    try:
        return int((device_dir / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None


def sysfs_pci_address(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' (8-digit domain) -> sysfs '0000:18:00.0'."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.lower()


def collect_nic_numa(ctx: Context) -> dict[str, Any]:
    """NUMA node of every RDMA device and GPU, from sysfs: NVML reports none on x86 hosts."""
    root = Path("/sys/class/infiniband")
    nics = {dev.name: _numa_node(dev / "device") for dev in sorted(root.iterdir())} if root.is_dir() else {}
    gpus = {}
    for g in live_gpus(ctx.facts.get("nvml") or {}):
        if g.get("pci_bus_id"):
            gpus[g["index"]] = _numa_node(Path("/sys/bus/pci/devices") / sysfs_pci_address(g["pci_bus_id"]))
    return {"nics": nics, "gpus": gpus}


def nic_affinity(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("infiniband", "nic_affinity_required", False):
        return Result("gpu.nic_affinity", Status.SKIP, reason="profile does not require GPU-NIC affinity")
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
COLLECTORS = {"fabric_manager": collect_fabric_manager, "nic_numa": collect_nic_numa}
