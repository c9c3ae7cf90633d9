"""A profile derived from the GPU SKU table, for a node no profile matches.

One job: from the GPUs NVML reports, the PCI bus and each GPU's entry in the SKU table (checks/gpus.yaml), state
what a healthy node of this kind looks like, each threshold with where it came from (`sources`). The generic
profile gives what no SKU entry says (health limits, burn-in fractions, disk). A site's own profile always wins:
this is asked only when none matches. When the GPUs are of two SKUs, a threshold they do not share is stated per
GPU (`per_gpu`), so each GPU is judged against its own entry; gpu.model says so.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..profiles import PER_GPU, SKUS, SOURCES, Profile
from ..skus import Sku, SkuTable
from .links import sysfs_pci_address
from .per_gpu import labels, live_gpus

PREFIX = "derived"
# What NVML shows of a SKU's memory. HBM: all but what the driver keeps (H100 81,559 of 81,920 MiB; H200
# 143,771 of 144,384): where the table has the real figure, 0.99 of it. GDDR with ECC on gives 1/16 to the
# check bits (T4 15,360 of 16,384 MiB; A10 23,028 of 24,576 = 0.937): elsewhere 0.93 of the data sheet's size.
NVML_MEMORY_FRACTION = 0.99
DATA_SHEET_MEMORY_FRACTION = 0.93


def node_skus(nvml: dict[str, Any], pci: dict[str, Any] | None, table: SkuTable) -> dict[str, Sku | None]:
    """{"GPU0": its SKU or None} for each responsive GPU: by the PCI device id the bus gives for its address,
    else by NVML's name."""
    devices = {d.get("address"): d.get("device") for d in (pci or {}).get("gpus", [])}
    found: dict[str, Sku | None] = {}
    for gpu in live_gpus(nvml):
        bus = gpu.get("pci_bus_id")
        found[f"GPU{gpu['index']}"] = table.match(gpu.get("name"), devices.get(sysfs_pci_address(bus)) if bus else None)
    return found


def bus_skus(pci: dict[str, Any] | None, table: SkuTable) -> dict[str, Sku | None]:
    """{"PCI 0000:18:00.0": its SKU or None} for each GPU on the PCI bus, by its device id alone."""
    return {f"PCI {d.get('address')}": table.match(None, d.get("device")) for d in (pci or {}).get("gpus", [])}


def derive(nvml: dict[str, Any], pci: dict[str, Any] | None, table: SkuTable, base: Profile) -> Profile | None:
    """The profile for this node from its GPUs' SKU entries, on top of `base` (the generic profile); None when
    the table knows none of its GPUs. When NVML names none (its library gone, every GPU lost), the bus's device ids
    still say what they are: a node whose GPUs are known by their ids is never judged against `base`."""
    found = node_skus(nvml, pci, table) or bus_skus(pci, table)
    known = sorted({sku.id for sku in found.values() if sku})
    if not known:
        return None
    gpu_count = max(len(nvml.get("gpus", [])), len((pci or {}).get("gpus", [])))
    per_gpu = {label: expectations(sku, gpu_count) if sku else {} for label, sku in found.items()}
    data = copy.deepcopy({k: v for k, v in base.data.items() if k not in ("match", "inherits")})
    data["name"] = f"{PREFIX}-{'+'.join(known)}"
    models = ", ".join(f"{sum(1 for s in found.values() if s and s.id == sku_id)} x {table.get(sku_id).name}"
                       for sku_id in known)
    data["description"] = f"derived from the GPU SKU table ({table.path}) for {models}"
    gpu, sources, own = fold(per_gpu)
    gpu.update(node_expectations(nvml, pci, sources))
    data["gpu"] = {**data.get("gpu", {}), **{key: value for key, value in gpu.items() if value is not None}}
    data[PER_GPU] = own
    data[SKUS] = {label: sku.id if sku else None for label, sku in found.items()}
    data[SOURCES] = sources
    return Profile(data["name"], None, data)


def expectations(sku: Sku, gpu_count: int) -> dict[str, tuple[Any, str]]:
    """`gpu` threshold -> (value, where it came from) for one GPU of this SKU on a node of `gpu_count` GPUs."""
    entry = f"SKU {sku.id}"
    found: dict[str, tuple[Any, str]] = {}
    if sku.compute_capability:
        found["compute_capability_min"] = (sku.compute_capability, f"{entry}: compute_capability")
    if sku.nvml_memory_MiB:
        found["memory_per_gpu_MiB_min"] = (
            math.floor(sku.nvml_memory_MiB * NVML_MEMORY_FRACTION),
            f"{entry}: {NVML_MEMORY_FRACTION:g} x nvml_memory_MiB {sku.nvml_memory_MiB}")
    else:
        found["memory_per_gpu_MiB_min"] = (
            math.floor(sku.memory_MiB * DATA_SHEET_MEMORY_FRACTION),
            f"{entry}: {DATA_SHEET_MEMORY_FRACTION:g} x memory_MiB {sku.memory_MiB} (GDDR with ECC on shows 15/16)")
    if sku.data_centre is not None:
        found["persistence_mode_required"] = (sku.data_centre, f"{entry}: data_centre {str(sku.data_centre).lower()}")
    if sku.ecc is not None:
        found["ecc_required"] = (sku.ecc, f"{entry}: ecc {str(sku.ecc).lower()}")
    found["power_limit_W_min"] = (sku.power_limit_W, f"{entry}: power_limit_W (the board's default)")
    found["pcie_gen_min"] = (sku.pcie_gen, f"{entry}: pcie_gen (the card's best)")
    found["pcie_width_min"] = (sku.pcie_width, f"{entry}: pcie_width (the card's best)")
    if sku.nvlink_links and sku.form_factor == "sxm" and gpu_count == 1:
        found["nvlink_links_per_gpu"] = (None, f"not judged: one {entry} module, no NVLink peer on this node")
    elif sku.nvlink_links and sku.form_factor == "sxm":
        found["nvlink_links_per_gpu"] = (sku.nvlink_links, f"{entry}: nvlink_links, an SXM module: every link wired")
    elif sku.nvlink_links and sku.form_factor == "pcie":
        found["nvlink_links_per_gpu"] = (sku.nvlink_links, f"{entry}: nvlink_links through an optional bridge")
        found["nvlink_optional"] = (True, f"{entry}: form_factor pcie (a bridge is optional; fitted, every link up)")
    return found


def fold(per_gpu: dict[str, dict[str, tuple[Any, str]]]) -> tuple[dict[str, Any], dict[str, str],
                                                                   dict[str, dict[str, Any]]]:
    """(the node's `gpu` thresholds, their sources, each GPU's own): a threshold every GPU shares is the node's;
    one they do not (GPUs of two SKUs, or one the table does not know) is stated for each GPU."""
    node: dict[str, Any] = {}
    sources: dict[str, str] = {}
    own: dict[str, dict[str, Any]] = {label: {} for label in per_gpu}
    keys = dict.fromkeys(key for found in per_gpu.values() for key in found)
    for key in keys:
        values = {label: found.get(key, (None, ""))[0] for label, found in per_gpu.items()}
        if len({repr(v) for v in values.values()}) == 1:
            node[key] = next(iter(values.values()))
        else:
            for label, value in values.items():
                own[label][key] = value
        groups = by_source(per_gpu, key)
        sources[f"gpu.{key}"] = "; ".join(text if len(groups) == 1 else f"{labels(group)}: {text}"
                                          for text, group in groups.items())
    return node, sources, {label: values for label, values in own.items() if values}


def by_source(per_gpu: dict[str, dict[str, tuple[Any, str]]], key: str) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for label, found in per_gpu.items():
        groups.setdefault(found[key][1] if key in found else "no SKU entry: not judged", []).append(label)
    return groups


def node_expectations(nvml: dict[str, Any], pci: dict[str, Any] | None, sources: dict[str, str]) -> dict[str, Any]:
    """The thresholds of the machine rather than of a GPU: how many GPUs, and whether an NVSwitch joins them."""
    found: dict[str, Any] = {}
    bus = (pci or {}).get("gpus")
    if bus:
        found["count"] = len(bus)
        sources["gpu.count"] = f"PCI bus: {len(bus)} NVIDIA GPU{'s' if len(bus) > 1 else ''} (NVML must show each)"
    else:
        sources["gpu.count"] = "not judged: the PCI bus could not be listed (NVML's count is reported)"
    switches = (pci or {}).get("nvswitches") or []
    if switches:
        found["nvswitch"] = True
        sources["gpu.nvswitch"] = f"PCI bus: {len(switches)} NVSwitches (Fabric Manager must run)"
    return found


def threshold_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """(section.key, value, where it came from) for every threshold of a derived profile, as `gpucheck profiles`
    shows them: a per-GPU one as "GPU0-1 350; GPU2-3 150"."""
    sources = profile.data.get(SOURCES) or {}
    own = profile.data.get(PER_GPU) or {}
    rows: list[tuple[str, str, str]] = []
    for section, values in profile.data.items():
        if not isinstance(values, dict) or section in (PER_GPU, SOURCES, SKUS):
            continue
        for key, value in values.items():
            if value is not None:
                rows.append((f"{section}.{key}", shown(value), sources.get(f"{section}.{key}", "the generic profile")))
    for key in dict.fromkeys(k for values in own.values() for k in values):
        groups: dict[str, list[str]] = {}
        for label, values in own.items():
            groups.setdefault(shown(values.get(key)), []).append(label)
        rows.append((f"gpu.{key}", "; ".join(f"{labels(group)} {value}" for value, group in groups.items()),
                     sources.get(f"gpu.{key}", "")))
    for key, text in sources.items():  # what is not judged, and why
        if not any(row[0] == key for row in rows):
            rows.append((key, "-", text))
    return sorted(rows, key=lambda row: not row[0].startswith("gpu."))  # the GPU's first; stable otherwise


def shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "-" if value is None else str(value)
