"""Profiles: YAML files in checks/ saying what a healthy node of one kind looks like.

A profile may `inherits:` another and override some keys (section by section; `match` is never
inherited), so a site copies and edits a profile
and never edits code to change a threshold. Unknown keys are errors: a typo must not silently
turn a check off.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
    },
    "bandwidth": {
        "nccl_allreduce_busbw_GBps_min": NUM,
        "nccl_allreduce_size_B": (int,),
        "nccl_tests_required": (bool,),
        "ib_write_bw_Gbps_min": NUM,
        "ib_write_bw_required": (bool,),
    },
    "libraries": {"required": (list,)},
    "frameworks": {
        "required": (list,),
        "gpu_required": (bool,),
        "horovod_controllers_required": (list,),
        "horovod_ops_required": (list,),
    },
}
TOP_LEVEL = {"name", "description", "inherits", *SCHEMA}


class ProfileError(Exception):
    """A profile cannot be found or is malformed. str(e) is a one-line reason."""


@dataclass
class Profile:
    name: str
    path: Path | None
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, section: str, key: str, default: Any = None) -> Any:
        value = self.data.get(section, {}).get(key)
        return default if value is None else value

    @property
    def description(self) -> str:
        return str(self.data.get("description", ""))


def search_dirs(extra: str | os.PathLike | None = None) -> list[Path]:
    """Where profiles are looked up, first match wins."""
    dirs = [Path(extra)] if extra else []
    env = os.environ.get("GPUCHECK_PROFILES_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path("/etc/gpucheck/checks"))
    dirs.append(Path(__file__).resolve().parent / "checks")  # shipped with the package
    return dirs


def available(extra_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in search_dirs(extra_dir):
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ProfileError(f"profile {path}{where} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path} must be a YAML mapping")
    return data


def validate(data: dict[str, Any], origin: str) -> None:
    for key, value in data.items():
        if key not in TOP_LEVEL:
            raise ProfileError(f"{origin}: unknown key '{key}' (known: {', '.join(sorted(TOP_LEVEL))})")
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
                    raise ProfileError(f"{origin}: '{key}.{sub}' must be {names}, got {subvalue!r}")
    regex = data.get("gpu", {}).get("name_regex") or data.get("match", {}).get("gpu_name_regex")
    if regex:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ProfileError(f"{origin}: bad regular expression {regex!r}: {exc}") from None


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def load(name_or_path: str, extra_dir: str | os.PathLike | None = None, _seen: tuple[str, ...] = ()) -> Profile:
    """Load a profile by name (from the search dirs) or by path, resolving `inherits`."""
    candidate = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        if not candidate.is_file():
            raise ProfileError(f"profile file {name_or_path} does not exist")
        path = candidate
    else:
        known = available(extra_dir)
        if name_or_path not in known:
            raise ProfileError(f"unknown profile '{name_or_path}' (known: {', '.join(sorted(known)) or 'none'})")
        path = known[name_or_path]
    if str(path) in _seen:
        raise ProfileError(f"profile {path} inherits itself (through {' -> '.join(_seen)})")
    data = _read(path)
    validate(data, str(path))
    parent = data.get("inherits")
    if parent:
        base = load(str(parent), extra_dir or path.parent, (*_seen, str(path)))
        own_match = data.get("match")  # auto-selection is never inherited: a variant states its own rule
        data = _merge({k: v for k, v in base.data.items() if k != "match"},
                      {k: v for k, v in data.items() if k not in ("inherits", "match")})
        if own_match:
            data["match"] = own_match
    return Profile(str(data.get("name") or path.stem), path, data)


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


def select(gpu_names: list[str], ib_hcas: int = 0, extra_dir: str | os.PathLike | None = None) -> Profile:
    """The most specific profile whose `match` fits what NVML reports, else the generic one."""
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
    return best[1] if best else load(DEFAULT_PROFILE, extra_dir)
