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
    """Read node.yaml; a missing default file means 'no site configuration', not an error."""
    explicit = path is not None or "GPUCHECK_CONFIG" in os.environ
    target = Path(path or os.environ.get("GPUCHECK_CONFIG") or DEFAULT_PATH)
    if not target.exists():
        if explicit:
            raise ConfigError(f"config file {target} does not exist")
        return NodeConfig()
    try:
        data = yaml.safe_load(target.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{target} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{target} must be a YAML mapping")
    unknown = set(data) - {"profile", "profiles_dir", "stacks"}
    if unknown:
        raise ConfigError(f"{target}: unknown key(s) {', '.join(sorted(unknown))}")
    stacks = []
    for name, spec in (data.get("stacks") or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("python"), str):
            raise ConfigError(f"{target}: stack '{name}' needs a 'python' path")
        frameworks = spec.get("frameworks") or []
        bad = [f for f in frameworks if f not in KNOWN_FRAMEWORKS]
        if bad:
            raise ConfigError(f"{target}: stack '{name}' has unknown framework(s) {', '.join(map(str, bad))}"
                              f" (known: {', '.join(KNOWN_FRAMEWORKS)})")
        stacks.append(Stack(str(name), spec["python"], list(frameworks)))
    return NodeConfig(target, str(data.get("profile") or "auto"), data.get("profiles_dir"), stacks)
