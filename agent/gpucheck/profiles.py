"""Profiles: YAML files in checks/ saying what a healthy node of one kind looks like.

A profile may `inherits:` another and override some keys (section by section; `match` is never
inherited), so a site copies and edits a profile
and never edits code to change a threshold. Unknown keys are errors, and so are unknown names in the
lists (a library, a clock event reason, a framework): a typo must not silently turn a check off.
Numbers must be finite and in range. A file a site edits is input: whatever it holds, loading it ends
quickly with a profile or a one-line ProfileError.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import KNOWN_FRAMEWORKS, read_yaml_file
from .profile_dirs import SKU_TABLE_FILE, search_dirs
from .skus import DTYPES

DEFAULT_PROFILE = "generic"

# section -> key -> accepted Python types. Units live in the key names.
NUM = (int, float)
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "match": {"gpu_name_regex": (str,), "gpu_count": (int,), "ib_hcas_min": (int,)},
    "gpu": {
        "count": (int,),
        "name_regex": (str,),
        "compute_capability_min": (str, float),
        "memory_per_gpu_MiB_min": NUM,
        "driver_version_min": (str,),
        "cuda_driver_version_min": (str, float),
        "persistence_mode_required": (bool,),
        "mig_mode_expected": (bool,),
        "ecc_required": (bool,),
        "ecc_volatile_uncorrected_max": (int,),
        "ecc_aggregate_uncorrected_max": (int,),
        "retired_pages_max": (int,),
        "temperature_C_max": NUM,
        "temperature_slowdown_margin_C_min": NUM,
        "power_limit_W_min": NUM,
        "pcie_gen_min": (int,),
        "pcie_width_min": (int,),
        "nvlink_links_per_gpu": (int,),
        "nvlink_optional": (bool,),  # links through an optional bridge: none up is no bridge, some up need all
        "nvswitch": (bool,),
    },
    "health": {"xid_warn_codes_fail": (bool,), "clocks_event_reasons_fail": (list,),
               "clocks_event_reasons_warn": (list,)},
    "host": {
        "ram_to_gpu_memory_ratio_min": NUM,
        "cpu_cores_min": (int,),
        "disk_free_GiB_min": (dict,),
        "data_path": (str,),
        "read_throughput_MBps_min": NUM,
    },
    "infiniband": {
        "required": (bool,),
        "ports_active_min": (int,),
        "rate_Gbps_min": NUM,
        "link_layer": (str,),
        "nic_affinity_required": (bool,),
        "counter_limits": (dict,),  # error counter -> the most it may rise between two runs (node/ib_counters.py)
    },
    "bandwidth": {
        "nccl_allreduce_busbw_GBps_min": NUM,
        "nccl_allreduce_internode_busbw_GBps_min": NUM,  # gpucheck cluster's all-reduce across nodes
        "nccl_allreduce_size_B": (int,),
        "nccl_tests_required": (bool,),
        "ib_write_bw_Gbps_min": NUM,
        "ib_write_bw_required": (bool,),
    },
    "burnin": {  # docs/burnin.md: fractions of the GPU SKU's data-sheet figures (checks/gpus.yaml)
        "gemm_fraction_min": NUM,
        "gemm_dtypes": (list,),
        "memory_bandwidth_fraction_min": NUM,
        "host_bandwidth_fraction_min": NUM,
        "p2p_bandwidth_fraction_min": NUM,
        "memtest_coverage_min": NUM,
        "burn_collapse_fraction_min": NUM,
        "burn_temperature_C_max": NUM,
        "burn_reasons_fail": (list,),
        "dcgm_level": (int,),
        "dcgm_required": (bool,),
    },
    "training": {  # docs/training.md: the cluster's ResNet-50 benchmark
        "reference_fraction_min": NUM,
        "scaling_efficiency_node_min": NUM,
        "scaling_efficiency_cluster_min": NUM,
    },
    "history": {  # docs/history.md: each GPU against its own baseline and recent runs (gpucheck cluster)
        "regression_drop_pct": NUM,
        "regression_recent_runs": (int,),
        "repeat_offender_failures": (int,),
        "repeat_offender_days": (int,),
    },
    "libraries": {"required": (list,)},
    "frameworks": {
        "required": (list,),
        "gpu_required": (bool,),
        "horovod_controllers_required": (list,),
        "horovod_ops_required": (list,),
    },
}
# `observe: [ids or globs]`: checks recorded and reported but never counted in the verdict (never drain a node), so a
# site turns a new check on safely; node/pipeline.py marks them (a pattern that matches no check is refused there).
OBSERVE = "observe"
# `repair: {check id or glob: action}`: what gpucheck watch does to a node drained for that check (repair/; none by
# default). The actions, from the least to the most disruptive: a node whose failures ask for several gets the last.
REPAIR = "repair"
REPAIR_ACTIONS = ("restart-dcgm", "restart-fabric-manager", "reset-gpu", "reboot")
TOP_LEVEL = {"name", "description", "inherits", OBSERVE, REPAIR, *SCHEMA}
# A derived profile's own keys (node/derived_profile.py), never a site file's: `gpu` thresholds per GPU label,
# where each threshold came from, and each GPU's SKU id.
PER_GPU, SOURCES, SKUS = "per_gpu", "sources", "skus"
TEXT_KEYS = ("name", "description", "inherits")

# The names a profile's lists may hold. The node checks use these names; each is defined here once.
LIBRARY_NAMES = ("cudart", "cudnn", "nccl", "mpi")  # node/stack/known_libraries.py says how each is found
# nvmlClocksEventReason* bits 0..8 in order (nvml.h); node/nvml.py decodes the mask with these names.
CLOCK_EVENT_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                       "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                       "display_clock_setting")
# As `horovodrun --check-build` lists them ("Available Controllers", "Available Tensor Operations");
# MLSL is what Horovod before 0.20 called CCL.
HOROVOD_CONTROLLERS = ("mpi", "gloo")
HOROVOD_OPERATIONS = ("nccl", "mpi", "gloo", "ddl", "ccl", "mlsl")


# (section, key) -> the names its list may hold, and how an item is written
# before it is looked up.
LIST_NAMES: dict[tuple[str, str], tuple[tuple[str, ...], Callable[[str], str]]] = {
    ("libraries", "required"): (LIBRARY_NAMES, lambda item: item.removeprefix("lib")),
    ("health", "clocks_event_reasons_fail"): (CLOCK_EVENT_REASONS, str),
    ("health", "clocks_event_reasons_warn"): (CLOCK_EVENT_REASONS, str),
    ("frameworks", "required"): (KNOWN_FRAMEWORKS, str),
    ("frameworks", "horovod_controllers_required"): (HOROVOD_CONTROLLERS, str.lower),
    ("frameworks", "horovod_ops_required"): (HOROVOD_OPERATIONS, str.lower),
    ("burnin", "gemm_dtypes"): (DTYPES, str),  # the dtypes a SKU may state a peak for
    ("burnin", "burn_reasons_fail"): (CLOCK_EVENT_REASONS, str),
}
# Every number is finite, and within (lowest, highest, whether the lowest itself is excluded): counts,
# minimums, maximums and sizes >= 0, a key named *_fraction or *_fraction_min in (0, 1], and these:
NON_NEGATIVE = (0, math.inf, False)
FRACTION = (0, 1, True)
RANGES: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("bandwidth", "nccl_allreduce_size_B"): (1, math.inf, False),
    ("match", "gpu_count"): (1, math.inf, False),
    ("burnin", "memtest_coverage_min"): FRACTION,
    ("burnin", "burn_temperature_C_max"): (0, 150, True),  # no GPU runs above ~100 C; 150 is a typo's bound
    ("burnin", "dcgm_level"): (1, 4, False),  # dcgmi diag -r 1..4
    ("history", "regression_drop_pct"): (0, 100, True),
    ("history", "regression_recent_runs"): (1, 1000, False),
    ("history", "repeat_offender_failures"): (1, 1000, False),
    ("history", "repeat_offender_days"): (1, 3650, False),
    ("training", "scaling_efficiency_node_min"): FRACTION,
    ("training", "scaling_efficiency_cluster_min"): FRACTION,
}

MAX_PROFILE_BYTES = 1 << 20
MAX_INHERITS = 32  # profiles in one `inherits:` chain


class ProfileError(Exception):
    """A profile cannot be found or is malformed. str(e) is a one-line reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(str(reason).split()))


@dataclass
class Profile:
    name: str
    path: Path | None
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, section: str, key: str, default: Any = None) -> Any:
        value = self.data.get(section, {}).get(key)
        return default if value is None else value

    def for_gpu(self, gpu: dict[str, Any], key: str, default: Any = None) -> Any:
        """A `gpu` threshold for one GPU: its own where the profile states one per GPU (a derived profile of a
        node with GPUs of two SKUs: node/derived_profile.py), else the node's."""
        own = (self.data.get(PER_GPU) or {}).get(f"GPU{gpu['index']}") or {}
        value = own[key] if key in own else self.get("gpu", key)
        return default if value is None else value

    @property
    def description(self) -> str:
        return str(self.data.get("description", ""))


def available(extra_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Profile name -> file, first search directory first; the SKU table is not a profile."""
    found: dict[str, Path] = {}
    for directory in search_dirs(extra_dir):
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                if path.name != SKU_TABLE_FILE:
                    found.setdefault(path.stem, path)
    return found


def _read(path: Path) -> dict[str, Any]:
    data = read_yaml_file(path, f"profile {path}", MAX_PROFILE_BYTES, ProfileError)
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path} must be a YAML mapping")
    return data


def validate(data: dict[str, Any], origin: str) -> None:
    for key, value in data.items():
        if key not in TOP_LEVEL:
            raise ProfileError(f"{origin}: unknown key '{key}' (known: {', '.join(sorted(TOP_LEVEL))})")
        if key in TEXT_KEYS and value is not None and not isinstance(value, str):
            raise ProfileError(f"{origin}: '{key}' must be text, got {_shown(value)}")
        if key == OBSERVE and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            raise ProfileError(f"{origin}: '{OBSERVE}' must be a list of check ids or globs (gpu.temperature, "
                               f"gpu.*), got {_shown(value)}")
        if key == REPAIR and not (isinstance(value, dict) and all(
                isinstance(k, str) and k and v in REPAIR_ACTIONS for k, v in value.items())):
            raise ProfileError(f"{origin}: '{REPAIR}' must map check ids or globs to a repair "
                               f"({', '.join(REPAIR_ACTIONS)}), got {_shown(value)}")
        if key in SCHEMA:
            if not isinstance(value, dict):
                raise ProfileError(f"{origin}: '{key}' must be a mapping")
            for sub, subvalue in value.items():
                allowed = SCHEMA[key].get(sub)
                if allowed is None:
                    raise ProfileError(f"{origin}: unknown key '{key}.{sub}'")
                if subvalue is not None and (
                    not isinstance(subvalue, allowed) or (isinstance(subvalue, bool) and bool not in allowed)
                ):
                    names = "/".join(t.__name__ for t in allowed)
                    raise ProfileError(f"{origin}: '{key}.{sub}' must be {names}, got {_shown(subvalue)}")
                _check_value(origin, key, sub, subvalue)
    for section, key in (("gpu", "name_regex"), ("match", "gpu_name_regex")):
        regex = data.get(section, {}).get(key)
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ProfileError(f"{origin}: '{section}.{key}' is a bad regular expression {_shown(regex)}: "
                                   f"{exc}") from None


# Keys that hold a version or compute capability: "535.54.03", "12.2", 9.0. Anything else ("latest", "")
# would compare as no version at all and enforce nothing.
VERSION_KEYS = ("_version_min", "compute_capability_min")
VERSION = re.compile(r"\d{1,6}(\.\d{1,6}){0,3}")


def _check_value(origin: str, section: str, key: str, value: Any) -> None:
    """Numbers finite and in range; versions written as versions; list items among the known names; disk paths
    absolute."""
    name = f"{section}.{key}"
    if key.endswith(VERSION_KEYS) and not isinstance(value, bool) and not VERSION.fullmatch(str(value).strip()):
        raise ProfileError(f"{origin}: '{name}' must be a version such as \"535.54.03\" or \"12.2\", got "
                           f"{_shown(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        fraction = key.endswith(("_fraction", "_fraction_min"))
        low, high, low_open = RANGES.get((section, key)) or (FRACTION if fraction else NON_NEGATIVE)
        if (isinstance(value, float) and not math.isfinite(value)) or value > high or (
                value <= low if low_open else value < low):
            what = (f"{'>' if low_open else '>='} {low:g}" if high == math.inf
                    else f"in {'(' if low_open else '['}{low:g}, {high:g}]")
            raise ProfileError(f"{origin}: '{name}' must be a finite number {what}, got {_shown(value)}")
    elif isinstance(value, list) and (section, key) in LIST_NAMES:
        known, spelling = LIST_NAMES[(section, key)]
        for item in value:
            if not isinstance(item, str):
                raise ProfileError(f"{origin}: '{name}' holds names, got {_shown(item)}")
            if spelling(item) not in known:
                close = difflib.get_close_matches(spelling(item), known, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ProfileError(f"{origin}: '{name}' has unknown name {_shown(item)} ({hint}known: "
                                   f"{', '.join(known)})")
    elif isinstance(value, dict) and (section, key) == ("infiniband", "counter_limits"):  # {counter: count}
        for counter, limit in value.items():
            if not isinstance(counter, str) or not counter.replace("_", "").isalnum():
                raise ProfileError(f"{origin}: '{name}' keys are counter names (symbol_error), got {_shown(counter)}")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise ProfileError(f"{origin}: '{name}.{counter}' must be a whole number >= 0, got {_shown(limit)}")
    elif isinstance(value, dict):  # host.disk_free_GiB_min: {path: GiB}
        for path, minimum in value.items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise ProfileError(f"{origin}: '{name}' keys are absolute paths, got {_shown(path)}")
            if isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
                raise ProfileError(f"{origin}: '{name}.{path}' must be a number, got {_shown(minimum)}")
            _check_value(origin, section, f"{key}.{path}", minimum)


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _locate(name_or_path: str, extra_dir: str | os.PathLike | None,
            listed: dict[str | os.PathLike | None, dict[str, Path]]) -> Path:
    candidate = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        if not candidate.exists():
            raise ProfileError(f"profile file {name_or_path} does not exist")
        return candidate
    if extra_dir not in listed:  # each directory listed once per load
        listed[extra_dir] = available(extra_dir)
    known = listed[extra_dir]
    if name_or_path not in known:
        raise ProfileError(f"unknown profile '{name_or_path}' (known: {', '.join(sorted(known)) or 'none'})")
    return known[name_or_path]


def load(name_or_path: str, extra_dir: str | os.PathLike | None = None) -> Profile:
    """Load a profile by name (from the search dirs) or by path, resolving `inherits` (a chain read in a
    loop, at most MAX_INHERITS long: never a recursion a site's files can make as deep as they like)."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    listed: dict[str | os.PathLike | None, dict[str, Path]] = {}
    target, lookup_dir = name_or_path, extra_dir
    while True:
        path = _locate(target, lookup_dir, listed)
        seen = [str(p) for p, _ in chain]
        if str(path) in seen:
            raise ProfileError(f"profile {path} inherits itself (through {' -> '.join(seen)})")
        if len(chain) == MAX_INHERITS:
            raise ProfileError(f"profile {chain[0][0]}: its `inherits` chain is longer than {MAX_INHERITS} "
                               f"profiles ({chain[0][0].stem} -> {chain[1][0].stem} -> ... -> {path.stem})")
        data = _read(path)
        validate(data, str(path))
        chain.append((path, data))
        if not data.get("inherits"):
            break
        target, lookup_dir = str(data["inherits"]), extra_dir or path.parent
    merged = chain[-1][1]
    for _, data in reversed(chain[:-1]):
        own_match = data.get("match")  # auto-selection is never inherited: a variant states its own rule
        merged = _merge({k: v for k, v in merged.items() if k != "match"},
                        {k: v for k, v in data.items() if k not in ("inherits", "match")})
        if own_match:
            merged["match"] = own_match
    path = chain[0][0]
    return Profile(str(merged.get("name") or path.stem), path, merged)


def matches(profile: Profile, gpu_names: list[str], ib_hcas: int) -> bool:
    rule = profile.data.get("match") or {}
    if not rule or not gpu_names:
        return False
    if "gpu_count" in rule and rule["gpu_count"] != len(gpu_names):
        return False
    if "ib_hcas_min" in rule and ib_hcas < rule["ib_hcas_min"]:
        return False
    regex = rule.get("gpu_name_regex")
    return not regex or all(re.search(regex, name) for name in gpu_names)


def best_match(gpu_names: list[str], ib_hcas: int = 0, extra_dir: str | os.PathLike | None = None) -> Profile | None:
    """The most specific profile whose `match` fits what NVML reports, or None."""
    best: tuple[int, Profile] | None = None
    for name in available(extra_dir):
        try:
            profile = load(name, extra_dir)
        except ProfileError:
            continue  # a broken site profile must not stop selection; `gpucheck profiles` shows it
        if matches(profile, gpu_names, ib_hcas):
            specificity = len(profile.data.get("match", {}))
            if best is None or specificity > best[0]:
                best = (specificity, profile)
    return best[1] if best else None
