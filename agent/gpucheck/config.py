"""The node's site configuration, /etc/gpucheck/node.yaml, written by the gpucheck_agent role.

    profile: auto                  # or a profile name or path
    profiles_dir: /etc/gpucheck/checks
    stacks:                        # one entry per framework virtualenv
      tf-horovod: {python: /opt/stacks/tf-horovod/bin/python, frameworks: [tensorflow, horovod]}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_PATH = Path("/etc/gpucheck/node.yaml")
# The frameworks a stack can hold, as node.yaml, the node's facts and `gpucheck cluster` name them.
TENSORFLOW, HOROVOD, TORCH = "tensorflow", "horovod", "torch"
KNOWN_FRAMEWORKS = (TENSORFLOW, HOROVOD, TORCH)


class ConfigError(Exception):
    """node.yaml is unreadable or malformed. str(e) is a one-line reason."""


@dataclass
class Stack:
    name: str
    python: str
    frameworks: list[str]


@dataclass
class NodeConfig:
    path: Path | None = None
    profile: str = "auto"
    profiles_dir: str | None = None
    stacks: list[Stack] = field(default_factory=list)


def load(path: str | os.PathLike | None = None) -> NodeConfig:
    """Read node.yaml; a missing default file means 'no site configuration', not an error. Anything of the
    wrong shape is a ConfigError naming the key, never a crash further on."""
    explicit = path is not None or "GPUCHECK_CONFIG" in os.environ
    target = Path(path or os.environ.get("GPUCHECK_CONFIG") or DEFAULT_PATH)
    if not target.exists():
        if explicit:
            raise ConfigError(f"config file {target} does not exist")
        return NodeConfig()
    try:
        data = yaml.safe_load(target.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{target} is not UTF-8 text") from None
    except yaml.YAMLError:
        raise ConfigError(f"{target} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{target} must be a YAML mapping")
    unknown = set(map(str, data)) - {"profile", "profiles_dir", "stacks"}
    if unknown:
        raise ConfigError(f"{target}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("profile", "profiles_dir"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{target}: '{key}' must be a string, not {shape(data[key])}")
    return NodeConfig(target, data.get("profile") or "auto", data.get("profiles_dir"),
                      read_stacks(target, data.get("stacks")))


def read_stacks(target: Path, entries: object) -> list[Stack]:
    if entries is None:
        return []
    if not isinstance(entries, dict):
        raise ConfigError(f"{target}: 'stacks' must be a mapping of name to {{python, frameworks}}, not "
                          f"{shape(entries)}")
    found = []
    for name, spec in entries.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("python"), str):
            raise ConfigError(f"{target}: stack '{name}' needs a 'python' path")
        unknown = set(map(str, spec)) - {"python", "frameworks"}
        if unknown:
            raise ConfigError(f"{target}: stack '{name}' has unknown key(s) {', '.join(sorted(unknown))}")
        frameworks = spec.get("frameworks") or []
        if not isinstance(frameworks, list):
            raise ConfigError(f"{target}: stack '{name}': 'frameworks' must be a list like [{TENSORFLOW}, {HOROVOD}], "
                              f"not {shape(frameworks)}")
        bad = [f for f in frameworks if f not in KNOWN_FRAMEWORKS]
        if bad:
            raise ConfigError(f"{target}: stack '{name}' has unknown framework(s) {', '.join(map(str, bad))}"
                              f" (known: {', '.join(KNOWN_FRAMEWORKS)})")
        found.append(Stack(str(name), spec["python"], list(frameworks)))
    return found


def shape(value: object) -> str:
    """What YAML made of a value, in YAML's words."""
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number",
             float: "a number"}
    return next((word for kind, word in kinds.items() if isinstance(value, kind)), type(value).__name__)
