"""`nvidia-smi -q -x` (DTD v10 to v12): per-GPU identity, modes, health counters, links, clocks.

Old and new element names are both read: clocks_throttle_reasons / clocks_event_reasons,
power_readings(power_limit) / gpu_power_readings(current_power_limit), and the old ECC schema
ecc_errors/{volatile,aggregate}/{single_bit,double_bit}/total next to the new
sram_/dram_(un)correctable counters. "N/A" and missing elements read as null.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ._common import ParseError, guard, number, text_lines

KIND = "nvidia-smi-xml"

_ROOT_START = re.compile(r"<\?xml|<nvidia_smi_log\b")


def _text(element: ET.Element | None, path: str) -> str | None:
    """Stripped text at `path`, None when missing, empty or N/A."""
    found = element.find(path) if element is not None else None
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return value if value and value != "N/A" else None


def _num(element: ET.Element | None, *paths: str) -> int | float | None:
    """The number at the first of `paths` that has one: '81920 MiB' -> 81920, '16x' -> 16."""
    for path in paths:
        value = number(_text(element, path))
        if value is not None:
            return value
    return None


def _yes_no(value: str | None) -> bool | None:
    if value is None:
        return None
    return {"yes": True, "no": False}.get(value.lower())


def _ecc_totals(block: ET.Element | None) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) for one ecc_errors/volatile or /aggregate block, either schema."""
    if block is None:
        return None, None
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        return _num(block, "single_bit/total"), _num(block, "double_bit/total")
    corrected = uncorrected = None
    for child in block:
        value = number(child.text.strip()) if child.text else None
        if value is None:
            continue
        if "uncorrectable" in child.tag:
            uncorrected = (uncorrected or 0) + value
        elif "correctable" in child.tag:
            corrected = (corrected or 0) + value
    return corrected, uncorrected


def _ecc(gpu: ET.Element) -> dict:
    volatile_c, volatile_u = _ecc_totals(gpu.find("ecc_errors/volatile"))
    aggregate_c, aggregate_u = _ecc_totals(gpu.find("ecc_errors/aggregate"))
    return {
        "mode": _text(gpu, "ecc_mode/current_ecc"),
        "volatile_corrected": volatile_c,
        "volatile_uncorrected": volatile_u,
        "aggregate_corrected": aggregate_c,
        "aggregate_uncorrected": aggregate_u,
    }


def _remapped_rows(gpu: ET.Element) -> dict | None:
    block = gpu.find("remapped_rows")
    if block is None or len(block) == 0:  # "N/A" on GPUs without row remapping (pre-Ampere, MIG)
        return None
    return {
        "correctable": _num(block, "remapped_row_corr"),
        "uncorrectable": _num(block, "remapped_row_unc"),
        "pending": _yes_no(_text(block, "remapped_row_pending")),
        "failure": _yes_no(_text(block, "remapped_row_failure")),
    }


def _clock_reasons(gpu: ET.Element) -> list[str]:
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return []
    active = []
    for child in block:
        if (child.text or "").strip() == "Active":
            active.append(re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag))
    return active


def _mig_devices(gpu: ET.Element) -> list[dict]:
    return [
        {
            "index": _num(mig, "index"),
            "gpu_instance_id": _num(mig, "gpu_instance_id"),
            "compute_instance_id": _num(mig, "compute_instance_id"),
            "sm_count": _num(mig, "device_attributes/shared/multiprocessor_count"),
            "memory_total_MiB": _num(mig, "fb_memory_usage/total"),
        }
        for mig in gpu.findall("mig_devices/mig_device")
    ]


def _gpu(gpu: ET.Element) -> dict:
    power = "gpu_power_readings" if gpu.find("gpu_power_readings") is not None else "power_readings"
    return {
        "name": _text(gpu, "product_name"),
        "uuid": _text(gpu, "uuid"),
        "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
        "architecture": _text(gpu, "product_architecture"),
        "serial": _text(gpu, "serial"),
        "vbios_version": _text(gpu, "vbios_version"),
        "memory_total_MiB": _num(gpu, "fb_memory_usage/total"),
        "compute_mode": _text(gpu, "compute_mode"),
        "mig_mode": _text(gpu, "mig_mode/current_mig"),
        "persistence_mode": _text(gpu, "persistence_mode"),
        "ecc": _ecc(gpu),
        "retired_pages": {
            "single_bit": _num(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"),
            "double_bit": _num(gpu, "retired_pages/double_bit_retirement/retired_count"),
        },
        "retired_pages_pending": _yes_no(_text(gpu, "retired_pages/pending_retirement")
                                         or _text(gpu, "retired_pages/pending_blacklist")),
        "remapped_rows": _remapped_rows(gpu),
        "reset_required": _yes_no(_text(gpu, "gpu_reset_status/reset_required")),
        "recovery_action": _text(gpu, "gpu_recovery_action"),
        "pcie": {
            "gen_current": _num(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
            "gen_max": _num(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
            "width_current": _num(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
            "width_max": _num(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"),
        },
        "clocks_event_reasons": _clock_reasons(gpu),
        "temperature_C": _num(gpu, "temperature/gpu_temp"),
        "power_draw_W": _num(gpu, f"{power}/power_draw", f"{power}/instant_power_draw",
                             f"{power}/average_power_draw"),
        "power_limit_W": _num(gpu, f"{power}/current_power_limit", f"{power}/power_limit",
                              f"{power}/enforced_power_limit"),
        "fabric": {"state": _text(gpu, "fabric/state"), "status": _text(gpu, "fabric/status")},
        "mig_devices": _mig_devices(gpu),
    }


@guard(KIND)
def parse(text: str) -> dict:
    text_lines(text, KIND)  # rejects empty and binary input
    start = _ROOT_START.search(text)
    if start is None:
        raise ParseError(f"not {KIND} output: no <nvidia_smi_log> XML document")
    try:
        root = ET.fromstring(text[start.start():].strip())
    except ET.ParseError as exc:
        raise ParseError(f"not {KIND} output: malformed or truncated XML ({exc})") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"not {KIND} output: root element is <{root.tag}>, not <nvidia_smi_log>")
    gpus = [_gpu(gpu) for gpu in root.findall("gpu")]
    mig_devices = [dict(mig, gpu=gpu["pci_bus_id"]) for gpu in gpus for mig in gpu["mig_devices"]]
    return {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _num(root, "attached_gpus"),
        "gpus": gpus,
        "mig_devices": mig_devices,
    }
