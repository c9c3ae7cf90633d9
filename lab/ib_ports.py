"""Simulated InfiniBand ports in a lab host's fake sysfs (the tree GPUCHECK_SYSFS_ROOT names): `up --ib-ports N`
gives every GPU host N ConnectX-7 ports at NDR 400, ACTIVE, each counter at 0 as after a boot, and `fault HOST ib
[DEV/]COUNTER[+N]` steps one counter as the port's PMA would (up to the top of its width, where it stays). The files
are those a real ConnectX-7 port has (tests/fixtures/real/ib-counters/, gpud #943). The machine writes them; the host
sees them through its read-only bind of the scenario's directory, as the agent sees a real port's counters move."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lab.errors import LabError

CLASS_DIR = "class/infiniband"
# The counters directory of a ConnectX-7 port, each with its width in bits (the PMA's PortCounters; 64 for the
# extended traffic counters)
COUNTERS = {"link_downed": 8, "link_error_recovery": 8, "symbol_error": 16, "port_rcv_errors": 16,
            "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
            "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
            "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16, "port_xmit_wait": 32,
            **{name: 64 for name in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                                     "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                                     "multicast_rcv_packets")}}
PORT = {"link_layer": "InfiniBand", "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)"}
DEVICE = {"hca_type": "MT4129", "fw_ver": "28.41.1000", "board_id": "MT_0000000838"}
STEP = re.compile(r"^(?:(?P<dev>[\w-]+)/)?(?P<counter>\w+)(?:\+(?P<by>\d+))?$")
DEFAULT_STEP = "link_downed+1"


def write(sys_root: Path, count: int) -> list[str]:
    """mlx5_0..count-1, port 1 each, into `sys_root` (replacing the devices there); their names."""
    root = sys_root / CLASS_DIR
    names = [f"mlx5_{i}" for i in range(count)]
    for name in names:
        device = root / name
        port = device / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        for file, text in DEVICE.items():
            (device / file).write_text(text + "\n")
        for file, text in PORT.items():
            (port / file).write_text(text + "\n")
        for counter in COUNTERS:
            (port / "counters" / counter).write_text("0\n")
    return names


def step(sys_root: Path, spec: str | None) -> str:
    """Raise one counter of one port by N (`[DEV/]COUNTER[+N]`, DEV the first port's by default, N 1), capped at its
    width's top; what was done, in words."""
    found = STEP.match(spec or DEFAULT_STEP)
    if not found or found["counter"] not in COUNTERS:
        raise LabError(f"fault HOST ib takes [DEV/]COUNTER[+N] with COUNTER one of {', '.join(COUNTERS)}, "
                       f"not {spec!r}")
    root = sys_root / CLASS_DIR
    devices = sorted(d.name for d in root.iterdir()) if root.is_dir() else []
    if not devices:
        raise LabError("this host has no simulated InfiniBand port: bring the lab up with --ib-ports N")
    device = found["dev"] or devices[0]
    path = root / device / "ports" / "1" / "counters" / found["counter"]
    if not path.is_file():
        raise LabError(f"no InfiniBand device {device} here (there are {', '.join(devices)})")
    top = (1 << COUNTERS[found["counter"]]) - 1
    now = min(top, int(path.read_text()) + int(found["by"] or 1))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(f"{now}\n")
    tmp.replace(path)  # a reader sees the old count or the new one
    return f"{device} port 1 {found['counter']} now {now}"
