"""The GPU SKU table (checks/gpus.yaml): each GPU model's data-sheet figures, and which model a GPU is.

One job: load the table and match a GPU to an entry, first by its PCI device id, then by the name NVML
reports. The active checks judge a GPU against its SKU's figures (a profile states fractions of them); a
GPU no entry matches (`match` gives None) is measured and reported, not judged. The table sits beside the
profiles: the first gpus.yaml in the profile search directories (profile_dirs.search_dirs) is the table, so a
site extends it the way it overrides a profile. A file a site edits is input: whatever it holds, loading it
ends quickly with a table or a one-line SkuError naming the file, the SKU and the key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import read_yaml_file
from .profile_dirs import SKU_TABLE_FILE, search_dirs

# The dtypes a SKU may state a peak for (checks/gpus.yaml says which unit each means).
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64")
NVIDIA_VENDOR_ID = 0x10DE
MAX_TABLE_BYTES = 1 << 20
SKU_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")

# Numeric keys of an entry: key -> (integers only, zero allowed, required). Every number is finite.
NUMBERS: dict[str, tuple[bool, bool, bool]] = {
    "memory_MiB": (True, False, True),
    "nvml_memory_MiB": (True, False, False),
    "memory_bandwidth_GBps": (False, False, True),
    "power_limit_W": (False, False, True),
    "nvlink_links": (True, True, False),
    "nvlink_GBps_per_link": (False, True, False),
    "pcie_gen": (True, False, True),
    "pcie_width": (True, False, True),
}
# The frameworks a published ResNet-50 training figure may be for (`gpucheck cluster --framework` names).
TRAINING_FRAMEWORKS = ("tf-horovod", "torch")
# What a derived profile (derived_profile.py) needs beyond the figures; each optional: an entry without one
# leaves what it decides unjudged. form_factor: `sxm`, a module on a baseboard whose NVLinks are wired; `pcie`,
# an add-in card whose NVLinks (if any) come only through an optional bridge.
FORM_FACTORS = ("sxm", "pcie")
FLAGS = ("ecc", "data_centre")
OTHER_KEYS = ("name", "nvml_names", "pci_device_ids", "peak_TFLOPS", "resnet50_train_img_s", "compute_capability",
              "form_factor", *FLAGS)
COMPUTE_CAPABILITY = re.compile(r"\d{1,2}\.\d{1,2}")
KEYS = (*OTHER_KEYS, *NUMBERS)


class SkuError(Exception):
    """The SKU table cannot be found or is malformed. str(e) is a one-line reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(str(reason).split()))


@dataclass(frozen=True)
class Sku:
    """One GPU model's data-sheet figures (units in the field names, as in checks/gpus.yaml)."""

    id: str
    name: str
    nvml_names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    peak_TFLOPS: Mapping[str, float]
    memory_MiB: int
    memory_bandwidth_GBps: float
    power_limit_W: float
    pcie_gen: int
    pcie_width: int
    nvml_memory_MiB: int | None = None
    nvlink_links: int = 0
    nvlink_GBps_per_link: float = 0
    # published ResNet-50 training images/s on 1 GPU, mixed precision, per framework (docs/training.md)
    resnet50_train_img_s: Mapping[str, float] = field(default_factory=dict)
    compute_capability: str | None = None  # "9.0"
    form_factor: str | None = None  # FORM_FACTORS
    ecc: bool | None = None  # the memory has ECC (on by default on data-centre parts)
    data_centre: bool | None = None  # a data-centre part: persistence mode is expected on
    patterns: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    def peak(self, dtype: str) -> float | None:
        """The dense peak TFLOP/s for `dtype`, or None when the SKU has no figure for it (not judged)."""
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        return self.peak_TFLOPS.get(dtype)

    def matches_name(self, name: str) -> bool:
        """Whether NVML's name for a GPU is one of this SKU's names (whitespace runs count as one space)."""
        spoken = " ".join(name.split())
        return any(pattern.fullmatch(spoken) for pattern in self.patterns)


@dataclass(frozen=True)
class SkuTable:
    path: Path | None
    skus: tuple[Sku, ...]

    def get(self, sku_id: str) -> Sku | None:
        return next((sku for sku in self.skus if sku.id == sku_id), None)

    def match(self, name: str | None, pci_device_id: int | str | None = None) -> Sku | None:
        """The SKU of a GPU: by PCI device id when the id is known here, else by NVML's name; None if neither."""
        device = device_id(pci_device_id)
        if device is not None:
            for sku in self.skus:
                if device in sku.pci_device_ids:
                    return sku
        if isinstance(name, str) and name.strip():
            for sku in self.skus:
                if sku.matches_name(name):
                    return sku
        return None


def device_id(value: int | str | None) -> int | None:
    """The 16-bit PCI device id of an NVIDIA GPU from the forms the tools print: NVML's pciDeviceId
    (device << 16 | 0x10de: an int, or nvidia-smi's "0x233010DE" / "233010DE"), lspci's "10de:2330", or a
    bare device id (0x2330, "0x2330"). None for another vendor's id or anything that is not such a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        combined = value > 0xFFFF
        number = value
    elif isinstance(value, str):
        text = value.strip().lower()
        pair = re.fullmatch(r"([0-9a-f]{4}):([0-9a-f]{4})", text)
        if pair:
            return int(pair[2], 16) if int(pair[1], 16) == NVIDIA_VENDOR_ID else None
        digits = text.removeprefix("0x")
        if not re.fullmatch(r"[0-9a-f]{1,8}", digits):
            return None
        combined = len(digits) > 4  # "000000DE" is device 0 of vendor 0x00de, not device 0xde
        number = int(digits, 16)
    else:
        return None
    if not combined:
        return number if number > 0 else None
    if number > 0xFFFFFFFF or number & 0xFFFF != NVIDIA_VENDOR_ID:
        return None
    return number >> 16


def table_path(extra_dir: str | os.PathLike | None = None) -> Path | None:
    """The first gpus.yaml in the profile search directories, or None."""
    for directory in search_dirs(extra_dir):
        candidate = directory / SKU_TABLE_FILE
        if candidate.is_file():
            return candidate
    return None


def load(path: str | os.PathLike | None = None, extra_dir: str | os.PathLike | None = None) -> SkuTable:
    """Read and check the table at `path`, by default the one beside the profiles (`table_path`)."""
    if path is None:
        found = table_path(extra_dir)
        if found is None:
            dirs = ", ".join(str(d) for d in search_dirs(extra_dir))
            raise SkuError(f"no GPU SKU table ({SKU_TABLE_FILE}) in the profile directories ({dirs})")
        path = found
    path = Path(path)
    return SkuTable(path, tuple(build(read(path), str(path))))


def match(name: str | None, pci_device_id: int | str | None = None, table: SkuTable | None = None) -> Sku | None:
    """The SKU of a GPU in `table` (by default the table `load()` finds; load once when matching many)."""
    return (table or load()).match(name, pci_device_id)


def read(path: Path) -> Any:
    return read_yaml_file(path, f"GPU SKU table {path}", MAX_TABLE_BYTES, SkuError)


def build(data: Any, origin: str) -> list[Sku]:
    """The checked entries of a parsed table; the first fault is a SkuError naming origin, SKU and key."""
    if not isinstance(data, dict):
        raise SkuError(f"{origin}: the GPU SKU table must be a mapping with the key 'skus'")
    unknown = [key for key in data if key != "skus"]
    if unknown:
        raise SkuError(f"{origin}: unknown key {shown(unknown[0])} (known: skus)")
    entries = data.get("skus")
    if not isinstance(entries, dict) or not entries:
        raise SkuError(f"{origin}: 'skus' must be a non-empty mapping of SKU id to its figures")
    skus: list[Sku] = []
    owners: dict[tuple[str, object], str] = {}  # (key, device id or name) -> the SKU that has it
    for sku_id, entry in entries.items():
        if not isinstance(sku_id, str) or not SKU_ID.fullmatch(sku_id):
            raise SkuError(f"{origin}: SKU id {shown(sku_id)} must be lower-case letters, digits, '.', '-', '_'")
        sku = entry_sku(sku_id, entry, f"{origin}: SKU '{sku_id}'")
        for key, values in (("pci_device_ids", sku.pci_device_ids), ("nvml_names", sku.nvml_names)):
            for value in values:
                other = owners.setdefault((key, value), sku_id)
                if other != sku_id:
                    what = f"0x{value:04x}" if isinstance(value, int) else shown(value)
                    raise SkuError(f"{origin}: SKU '{sku_id}': {key} {what} is also SKU '{other}'s")
        skus.append(sku)
    return skus


def entry_sku(sku_id: str, entry: Any, where: str) -> Sku:
    if not isinstance(entry, dict):
        raise SkuError(f"{where} must be a mapping of its figures")
    for key in entry:
        if key not in KEYS:
            raise SkuError(f"{where}: unknown key {shown(key)} (known: {', '.join(KEYS)})")
    for key in ("name", "nvml_names", "pci_device_ids", "peak_TFLOPS"):
        if key not in entry:
            raise SkuError(f"{where}: '{key}' is missing")
    name = entry["name"]
    if not isinstance(name, str) or not name.strip():
        raise SkuError(f"{where}: 'name' must be text, got {shown(name)}")
    names, patterns = nvml_names(entry["nvml_names"], where)
    devices = pci_device_ids(entry["pci_device_ids"], where)
    if not names and not devices:
        raise SkuError(f"{where}: nvml_names and pci_device_ids are both empty: nothing would match it")
    numbers = {key: number(entry, key, where) for key in NUMBERS}
    for key, (_, _, required) in NUMBERS.items():
        if required and numbers[key] is None:
            raise SkuError(f"{where}: '{key}' is missing")
    if (numbers["nvlink_links"] or 0) > 0 and not numbers["nvlink_GBps_per_link"]:
        raise SkuError(f"{where}: 'nvlink_links' without 'nvlink_GBps_per_link'")
    return Sku(id=sku_id, name=name.strip(), nvml_names=names, pci_device_ids=devices,
               peak_TFLOPS=peaks(entry["peak_TFLOPS"], where),
               memory_MiB=numbers["memory_MiB"], memory_bandwidth_GBps=numbers["memory_bandwidth_GBps"],
               power_limit_W=numbers["power_limit_W"], pcie_gen=numbers["pcie_gen"],
               pcie_width=numbers["pcie_width"], nvml_memory_MiB=numbers["nvml_memory_MiB"],
               nvlink_links=numbers["nvlink_links"] or 0, nvlink_GBps_per_link=numbers["nvlink_GBps_per_link"] or 0,
               resnet50_train_img_s=training_figures(entry.get("resnet50_train_img_s"), where), patterns=patterns,
               compute_capability=compute_capability(entry.get("compute_capability"), where),
               form_factor=choice(entry, "form_factor", FORM_FACTORS, where),
               **{flag: boolean(entry, flag, where) for flag in FLAGS})


def compute_capability(value: Any, where: str) -> str | None:
    """"9.0" (YAML may read 9.0 or 8.6 as a number: a capability is written MAJOR.MINOR either way)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else ""
    if not COMPUTE_CAPABILITY.fullmatch(text.strip()):
        raise SkuError(f"{where}: 'compute_capability' must be MAJOR.MINOR such as \"9.0\", got {shown(value)}")
    return text.strip()


def choice(entry: dict[str, Any], key: str, known: tuple[str, ...], where: str) -> str | None:
    value = entry.get(key)
    if value is not None and value not in known:
        raise SkuError(f"{where}: '{key}' must be one of {', '.join(known)}, got {shown(value)}")
    return value


def boolean(entry: dict[str, Any], key: str, where: str) -> bool | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, bool):
        raise SkuError(f"{where}: '{key}' must be true or false, got {shown(value)}")
    return value


def nvml_names(value: Any, where: str) -> tuple[tuple[str, ...], tuple[re.Pattern[str], ...]]:
    if not isinstance(value, list):
        raise SkuError(f"{where}: 'nvml_names' must be a list of names or regular expressions, got {shown(value)}")
    patterns = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise SkuError(f"{where}: 'nvml_names' holds names, got {shown(item)}")
        try:
            patterns.append(re.compile(item))
        except re.error as exc:
            raise SkuError(f"{where}: 'nvml_names' has a bad regular expression {shown(item)}: {exc}") from None
    return tuple(value), tuple(patterns)


def pci_device_ids(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise SkuError(f"{where}: 'pci_device_ids' must be a list of 16-bit ids (0x2330), got {shown(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 < item <= 0xFFFF:
            raise SkuError(f"{where}: 'pci_device_ids' holds 16-bit PCI device ids (0x2330), got {shown(item)}")
    if len(set(value)) != len(value):
        raise SkuError(f"{where}: 'pci_device_ids' lists an id twice")
    return tuple(value)


def peaks(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        raise SkuError(f"{where}: 'peak_TFLOPS' must be a mapping of dtype to TFLOP/s ({', '.join(DTYPES)})")
    for dtype, figure in value.items():
        if dtype not in DTYPES:
            raise SkuError(f"{where}: 'peak_TFLOPS' has unknown dtype {shown(dtype)} (known: {', '.join(DTYPES)})")
        if not positive(figure):
            raise SkuError(f"{where}: 'peak_TFLOPS.{dtype}' must be a finite number > 0, got {shown(figure)}")
    return {dtype: value[dtype] for dtype in DTYPES if dtype in value}


def training_figures(value: Any, where: str) -> dict[str, float]:
    key = "resnet50_train_img_s"
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise SkuError(f"{where}: '{key}' must be a mapping of framework to images/s "
                       f"({', '.join(TRAINING_FRAMEWORKS)})")
    for framework, figure in value.items():
        if framework not in TRAINING_FRAMEWORKS:
            raise SkuError(f"{where}: '{key}' has unknown framework {shown(framework)} "
                           f"(known: {', '.join(TRAINING_FRAMEWORKS)})")
        if not positive(figure):
            raise SkuError(f"{where}: '{key}.{framework}' must be a finite number > 0, got {shown(figure)}")
    return dict(value)


def number(entry: dict[str, Any], key: str, where: str) -> Any:
    value = entry.get(key)
    if value is None:
        return None
    integer, zero, _ = NUMBERS[key]
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not finite(value) or value < 0 or (
            value == 0 and not zero):
        what = "an integer" if integer else "a finite number"
        raise SkuError(f"{where}: '{key}' must be {what} {'>= 0' if zero else '> 0'}, got {shown(value)}")
    return value


def positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and finite(value) and value > 0


def finite(value: int | float) -> bool:
    """A float that is not NaN or infinite, or an int small enough for a figure (a huge one is a typo)."""
    return math.isfinite(value) if isinstance(value, float) else abs(value) < 2**53


def shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
