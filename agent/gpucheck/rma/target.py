"""Which GPUs an RMA is for: one named by its index, UUID, PCI bus id or serial number, or every GPU of the node.
A name no GPU answers to is one line naming the GPUs there are."""

from __future__ import annotations

from typing import Any

from ..history.gpu_names import bus_key

INDEX_DIGITS_MAX = 4  # longer digit strings are serial numbers (NVIDIA's have 13 digits)


class TargetError(Exception):
    """A target no GPU of this node answers to: the message is the one line to print."""


def describe(gpu: dict[str, Any]) -> str:
    return f"GPU{gpu.get('index')} ({gpu.get('uuid') or 'no UUID'}, {gpu.get('pci_bus_id') or 'no bus id'})"


def answers_to(gpu: dict[str, Any], target: str) -> bool:
    if target.isdigit() and len(target) <= INDEX_DIGITS_MAX:
        return gpu.get("index") == int(target)
    if target.upper().startswith("GPU-"):
        return str(gpu.get("uuid") or "").lower() == target.lower()
    if (key := bus_key(target)) is not None and key == bus_key(gpu.get("pci_bus_id")):
        return True
    return bool(gpu.get("serial")) and str(gpu["serial"]) == target


def choose(gpus: list[dict[str, Any]], target: str | None) -> list[dict[str, Any]]:
    """The GPUs the RMA is about: the one `target` names, or all of them (target None; none when NVML names
    none: the node's evidence is still worth having)."""
    if target is None:
        return gpus
    if not gpus:
        raise TargetError(f"NVML names no GPU on this node, so {target.strip()!r} cannot be identified: run "
                          "gpucheck rma without a GPU for the node's evidence (nvidia-smi -q, the kernel log)")
    chosen = [g for g in gpus if answers_to(g, target.strip())]
    if not chosen:
        raise TargetError(f"no GPU of this node is {target.strip()!r} (an index, a UUID, a PCI bus id or a serial "
                          f"number): it has {', '.join(describe(g) for g in gpus)}")
    return chosen
