"""How reports and logs name one GPU: `GPU3` (its index in that run), its UUID, its PCI bus id as NVML writes it
(00000000:5D:00.0) or as the kernel does (0000:5d:00). One place for it: which findings are a GPU's, in the
history's repeat offenders and in gpucheck rma's evidence."""

from __future__ import annotations

import re
from typing import Any

# 00000000:5D:00.0 (NVML), 0000:5d:00.0 (lspci, sysfs), 0000:5d:00 (the kernel's Xid lines), 5d:00.0
BUS = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?")


def bus_key(text: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of its spellings; None when it is not one."""
    match = BUS.fullmatch(text.strip()) if isinstance(text, str) else None
    return None if match is None else (int(match[1] or "0", 16), int(match[2], 16), int(match[3], 16))


def other_names(uuid: str | None, pci_bus_id: str | None) -> list[str]:
    """The GPU's names besides GPUn, lower case: its UUID, its bus id as NVML and as the kernel write it."""
    found = [str(name).lower() for name in (uuid, pci_bus_id) if name]
    if key := bus_key(pci_bus_id):
        found.append(f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}")
    return found


def names_gpu(text: str, index: int | None, uuid: str | None, pci_bus_id: str | None) -> bool:
    """Whether a finding's text is about this GPU: GPUn as a word (n its index in that run), or another name."""
    if index is not None and re.search(rf"\bGPU{index}\b", text):
        return True
    lowered = text.lower()
    return any(name in lowered for name in other_names(uuid, pci_bus_id))
