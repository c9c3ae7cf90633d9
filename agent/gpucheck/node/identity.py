"""Which machine this is, for `gpucheck cluster` to tell two inventory entries that reach one machine
(cluster/duplicates.py): the machine id (set once per installation, so a cloned VM image shares it), the
kernel's boot id (drawn at each boot, so containers on one kernel share it) and the GPUs' UUIDs (burned into
each GPU). Two small file reads and what NVML already answered; a value that cannot be read is None."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..files import read_file
from .kernel_log import read_boot_id

# systemd's place, then D-Bus's older one (a system without systemd may have only that)
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
MAX_ID_CHARS = 64  # a machine id is 32 hex digits: anything longer is not one
NOT_SET = "uninitialized"  # what systemd leaves in /etc/machine-id until the first boot completes


def read_id(path: Path) -> str | None:
    """The id the file holds, or None: missing, unreadable (a FIFO is refused, never waited on), empty, not set yet
    or not an id."""
    try:
        data = read_file(path, MAX_ID_CHARS + 1)
    except OSError:
        return None
    text = data.decode("ascii", errors="replace").strip()
    if not text or text == NOT_SET or len(text) > MAX_ID_CHARS or not text.isprintable() or " " in text:
        return None
    return text


def machine_id() -> str | None:
    return next((found for path in MACHINE_ID_FILES if (found := read_id(path))), None)


def boot_id() -> str | None:
    try:
        return read_boot_id()
    except (OSError, UnicodeDecodeError):
        return None


def gpu_uuids(nvml_facts: dict[str, Any]) -> list[str]:
    """The UUID of every GPU NVML named, lost ones included (a lost GPU is still that machine's)."""
    return [g["uuid"] for g in nvml_facts.get("gpus") or [] if isinstance(g.get("uuid"), str) and g["uuid"].strip()]


def machine(nvml_facts: dict[str, Any]) -> dict[str, Any]:
    """The facts' `machine` entry."""
    return {"machine_id": machine_id(), "boot_id": boot_id(), "gpu_uuids": gpu_uuids(nvml_facts)}
