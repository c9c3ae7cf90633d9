"""Each GPU host's kernel log as gpucheck watch follows it: a file the lab can plant lines into from outside, as
it plants GPU faults through the fake NVML's scenario (lab/gpus.py).

A lab host shares this machine's kernel: its /dev/kmsg is the build machine's, which a test must neither read as
a node's nor write Xids into. So the host's watcher follows HOST_FILE instead (inventory/lab sets
gpucheck_agent_watch_kernel_log to it), a text file of /dev/kmsg records ("PRI,SEQ,USEC,-;MESSAGE") as a syslog
daemon or `cat /dev/kmsg` would keep them, bound read-write from the lab's run directory. `plant` appends a record
stamped with the kernel's monotonic clock, as the kernel stamps its own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lab import config

HOST_DIR = "/var/log/gpucheck-lab"  # inside the host, bound read-write from source_dir()
HOST_FILE = f"{HOST_DIR}/kern.log"
PRIORITY = 3  # LOG_ERR, as NVRM logs an Xid (kern.err)


def source_dir(host: str) -> Path:
    return config.host_run_dir(host) / "kernel-log"


def prepare(host: str) -> Path:
    """The host's log directory and an empty log, before the host boots (a watcher opens it at its start)."""
    directory = source_dir(host)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kern.log").touch()
    return directory


def xid_message(code: int, pci: str = "0000:18:00") -> str:
    """An Xid line as the driver writes it (NVIDIA's Xid catalog; the real lines in tests/fixtures/real)."""
    return f"NVRM: Xid (PCI:{pci}): {code}, pid=0, name=gpucheck-lab, Ch 00000008"


def plant(host: str, message: str) -> float:
    """Append `message` to the host's kernel log as one record; the time.monotonic() it was written at."""
    path = source_dir(host) / "kern.log"
    with open(path, "a+") as fh:
        fh.seek(0)
        seq = sum(1 for _ in fh)
        stamp_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        fh.write(f"{PRIORITY},{seq},{stamp_us},-;{message}\n")
        fh.flush()
        os.fsync(fh.fileno())
    return time.monotonic()
