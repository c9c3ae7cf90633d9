"""What the burn-in reads from the host around its workers: the CPUs of each GPU's NUMA node (sysfs), the time
since boot when the run began (/proc/uptime), and the Xids the kernel logged for each GPU after that.

An Xid's stamp is the kernel's own (seconds since boot, as gpu.xid reads them): an event is the run's when it is
stamped at or after the moment the workers started; an event without a stamp cannot be placed and is left to
gpu.xid, which judges it whatever its age.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .. import CollectError, Context, kernel_log
from ..links import Sysfs, sysfs_pci_address, sysfs_root

CPULIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")
XID_FIELDS = ("xid", "pci", "severity", "uptime_s", "message")
UPTIME_MAX_B = 4096


def gpu_cpus(ctx: Context, buses: dict[str, str]) -> dict[str, str | None]:
    """label -> the CPU list of the GPU's NUMA node ("0-55,112-167"), None where sysfs does not say. The PCI device's
    local_cpulist, else its numa_node's cpulist; a sysfs read that does not return leaves every worker unbound."""

    def scan(sysfs: Sysfs) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for label, bus in buses.items():
            device = sysfs_root() / "bus" / "pci" / "devices" / sysfs_pci_address(bus)
            cpus = sysfs.read(device / "local_cpulist")
            if not cpus:
                node = sysfs.numa_node(device)
                if node is not None and node >= 0:
                    cpus = sysfs.read(sysfs_root() / "devices" / "system" / "node" / f"node{node}" / "cpulist")
            found[label] = cpus if cpus and CPULIST.fullmatch(cpus) else None
        return found

    try:
        return Sysfs().scan(ctx, scan)
    except CollectError:
        return {label: None for label in buses}


def uptime_s() -> float | None:
    """Seconds since boot now (/proc/uptime under kernel_log.proc_root()), None when it cannot be read."""
    try:
        with open(kernel_log.proc_root() / "uptime", "rb") as source:
            value = float(source.read(UPTIME_MAX_B).split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def device_of(bus_id: Any) -> tuple[int, str, str] | None:
    """(domain, bus, device) of NVML's "00000000:18:00.0" or the kernel log's "0000:18:00"; the function aside."""
    if not isinstance(bus_id, str):
        return None
    parts = bus_id.lower().split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), parts[1], parts[2]
    except ValueError:
        return None


def xids_during(ctx: Context, began_s: float | None, buses: dict[str, str]) -> tuple[dict[str, list], str | None]:
    """(label -> the Xid events logged for that GPU since `began_s`, why they are not known or None)."""
    if began_s is None:
        return {}, f"the time since boot could not be read ({kernel_log.proc_root() / 'uptime'}) when the run began"
    try:
        log = kernel_log.collect(ctx)
    except CollectError as exc:
        return {}, f"the kernel log could not be read after the run: {exc.reason}"
    devices = {label: device_of(bus) for label, bus in buses.items()}
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in buses}
    # /proc/uptime counts time spent suspended, the log's stamps do not: the run began this much earlier on theirs
    began_on_log = began_s - max(kernel_log.clock_suspended_s(), log.get("suspended_s") or 0.0)
    for event in log.get("events", []):
        stamp = event.get("uptime_s")
        if not isinstance(stamp, (int, float)) or stamp < began_on_log:
            continue
        where = device_of(event.get("pci"))
        for label, device in devices.items():
            if where is not None and where == device:
                found[label].append({key: event.get(key) for key in XID_FIELDS})
    return found, None
