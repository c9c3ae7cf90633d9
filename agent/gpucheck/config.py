"""The node's site configuration, /etc/gpucheck/node.yaml, written by the gpucheck_agent role, and the
guarded YAML reader it shares with the profiles.

    cluster_name: west-gpu         # the cluster this node is of (the inventory's): its reports say so
    profile: dgx-h100              # what this node is supposed to be (the inventory's gpucheck_profile), or auto
    profiles_dir: /etc/gpucheck/checks
    pins: {driver: "535.261.03", cuda: "12.2", cudnn: "8.9.7.29", nccl: "2.18.5"}  # what site.yml installed
    stacks:                        # one entry per framework virtualenv, with its frameworks' pins
      tf-horovod: {python: /opt/stacks/tf-horovod/bin/python, frameworks: [tensorflow, horovod],
                   pins: {tensorflow: "2.15.1", horovod: "0.28.1"}}
    prometheus_textfile: /var/lib/prometheus/node-exporter/gpucheck.prom   # every run's metrics, for node_exporter
    breaker:                       # gpucheck's own drains held when too many came at once (breaker.py)
      window_s: 600
      fleet_fraction: 0.25         # of the nodes Slurm knows
      group_fraction: 0.5          # of one rack's or leaf switch's nodes
      groups:                      # this node's rack and leaf switch (the inventory's), each with its nodes
        rack: {name: B, nodes: [gpu-b1, gpu-b2, gpu-b3, gpu-b4]}
    repair:                        # what gpucheck watch may do to repair a drained node (repair/, docs/watch.md)
      allow_reboot: false          # a profile's `reboot` repair is done only when true
      return_window_s: 86400       # a fault back this soon after its repair returned the node: needs hands
      jobs_wait_s: 3600            # how long a repair waits for the node's jobs to end
      burn_s: 120                  # the proof's burn (gpu.burn) on the repaired GPUs

A pin is an exact version or a glob ("535.*"); an empty or absent one pins nothing. node/stack/pins.py enforces them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .files import read_file

DEFAULT_PATH = Path("/etc/gpucheck/node.yaml")
# The frameworks a stack can hold, as node.yaml, the node's facts and `gpucheck cluster` name them.
TENSORFLOW, HOROVOD, TORCH = "tensorflow", "horovod", "torch"
KNOWN_FRAMEWORKS = (TENSORFLOW, HOROVOD, TORCH)
# node.yaml's `pins:`: the system layer site.yml installs from the inventory's gpu_stack.
SYSTEM_PINS = ("driver", "cuda", "cudnn", "nccl")
PIN_PATTERN = re.compile(r"^[0-9][0-9A-Za-z.+_*?-]*$")  # 535.261.03, 12.2, 2.5.1+cpu, 535.*

MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_NODES = 10_000  # with every alias expanded; a profile has a few hundred, node.yaml a few dozen


class ConfigError(Exception):
    """node.yaml is unreadable or malformed. str(e) is a one-line reason."""


class UnsafeYAML(Exception):
    """A YAML document refused before construction. str(e) is a one-line reason naming the document."""


@dataclass
class Stack:
    name: str
    python: str
    frameworks: list[str]
    pins: dict[str, str] = field(default_factory=dict)  # framework -> version or glob


@dataclass(frozen=True)
class BreakerSettings:
    """When gpucheck's automatic drains are held (breaker.py): at most max(1, fraction x size) nodes drained by
    gpucheck within `window_s`, of the fleet and of each rack or leaf switch."""
    window_s: float = 600.0
    fleet_fraction: float = 0.25
    group_fraction: float = 0.5
    # this node's groups: kind (rack, leaf_switch) -> (its name, the Slurm names of its nodes)
    groups: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


GROUP_KINDS = ("rack", "leaf_switch")


@dataclass(frozen=True)
class RepairSettings:
    """What the node's owner allows gpucheck's repairs (repair/); which repair a fault gets is the profile's."""
    allow_reboot: bool = False
    return_window_s: float = 86400.0
    jobs_wait_s: float = 3600.0
    burn_s: float = 120.0


@dataclass
class NodeConfig:
    path: Path | None = None
    profile: str = "auto"
    profiles_dir: str | None = None
    stacks: list[Stack] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # SYSTEM_PINS name -> version or glob
    prometheus_textfile: str | None = None  # each `gpucheck node` run also writes its metrics here
    cluster_name: str | None = None  # the cluster the node is of: its reports' cluster_name (one history per cluster)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    repair: RepairSettings = field(default_factory=RepairSettings)


def parse_yaml(text: str, label: str) -> Any:
    """yaml.safe_load, refusing before construction a document that its aliases make huge ("billion
    laughs": nine aliases of nine aliases of ...) or make contain itself, or that is nested too deeply
    (UnsafeYAML, naming `label`). Syntax errors are yaml.YAMLError, as from yaml.safe_load."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise UnsafeYAML(f"{label} is nested too deeply") from None
        if node is None:
            return None
        check_size(node, label)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def check_size(root: yaml.Node, label: str) -> None:
    """Count the nodes with every alias expanded, without expanding any (each node's count once)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[id(node)] > MAX_YAML_NODES:
                raise UnsafeYAML(f"{label} expands to more than {MAX_YAML_NODES} YAML nodes "
                                 "(anchors and aliases used over and over)")
        elif id(node) in open_nodes:
            raise UnsafeYAML(f"{label} has an alias inside the anchor it refers to")
        elif id(node) not in sizes:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)


def load(path: str | os.PathLike | None = None) -> NodeConfig:
    """Read node.yaml; a missing default file means 'no site configuration', not an error. Anything of the
    wrong shape is a ConfigError naming the key, never a crash further on."""
    explicit = path is not None or "GPUCHECK_CONFIG" in os.environ
    target = Path(path or os.environ.get("GPUCHECK_CONFIG") or DEFAULT_PATH)
    if not target.exists():
        if explicit:
            raise ConfigError(f"config file {target} does not exist")
        return NodeConfig()
    data = read(target)
    if not isinstance(data, dict):
        raise ConfigError(f"{target} must be a YAML mapping")
    unknown = set(map(str, data)) - {"profile", "profiles_dir", "stacks", "pins", "prometheus_textfile",
                                     "cluster_name", "breaker", "repair"}
    if unknown:
        raise ConfigError(f"{target}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("profile", "profiles_dir", "prometheus_textfile", "cluster_name"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{target}: '{key}' must be a string, not {shape(data[key])}")
    return NodeConfig(target, data.get("profile") or "auto", data.get("profiles_dir"),
                      read_stacks(target, data.get("stacks")), read_pins(target, "pins", data.get("pins"), SYSTEM_PINS),
                      read_textfile(target, data.get("prometheus_textfile")), data.get("cluster_name") or None,
                      read_breaker(target, data.get("breaker")), read_repair(target, data.get("repair")))


def read_breaker(target: Path, entries: object) -> BreakerSettings:
    """node.yaml's `breaker:`; what it leaves out keeps its default."""
    if entries is None:
        return BreakerSettings()
    entries = section(target, "breaker", entries, ("window_s", "fleet_fraction", "group_fraction", "groups"))
    numbers = read_numbers(target, "breaker", entries, BreakerSettings,
                           (("window_s", 1, 7 * 86400), ("fleet_fraction", 0, 1), ("group_fraction", 0, 1)))
    groups = entries.get("groups") or {}
    wrong = not isinstance(groups, dict) or any(
        kind not in GROUP_KINDS or not isinstance(group, dict) or set(group) != {"name", "nodes"}
        or not isinstance(group["nodes"], list) for kind, group in groups.items())
    if wrong:
        raise ConfigError(f"{target}: 'breaker.groups' must map {' or '.join(GROUP_KINDS)} to {{name, nodes: [the "
                          "Slurm names of its nodes]}")
    return BreakerSettings(**numbers, groups={kind: (str(group["name"]), tuple(map(str, group["nodes"])))
                                              for kind, group in groups.items()})


def read_repair(target: Path, entries: object) -> RepairSettings:
    """node.yaml's `repair:`; what it leaves out keeps its default."""
    if entries is None:
        return RepairSettings()
    entries = section(target, "repair", entries, ("allow_reboot", "return_window_s", "jobs_wait_s", "burn_s"))
    allow = entries.get("allow_reboot", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"{target}: 'repair.allow_reboot' is {shown(allow)}: true or false")
    numbers = read_numbers(target, "repair", entries, RepairSettings,
                           (("return_window_s", 0, 30 * 86400), ("jobs_wait_s", 0, 7 * 86400), ("burn_s", 0, 86400)))
    return RepairSettings(allow_reboot=allow, **numbers)


def section(target: Path, name: str, entries: object, keys: tuple[str, ...]) -> dict:
    """A mapping section of node.yaml holding only `keys`."""
    if not isinstance(entries, dict):
        raise ConfigError(f"{target}: '{name}' must be a mapping ({', '.join(keys)}), not {shape(entries)}")
    unknown = set(map(str, entries)) - set(keys)
    if unknown:
        raise ConfigError(f"{target}: '{name}' has unknown key(s) {', '.join(sorted(unknown))}")
    return entries


def read_numbers(target: Path, section: str, entries: dict, defaults: type,
                 bounds: tuple[tuple[str, float, float], ...]) -> dict[str, float]:
    """A section's numbers, each low < value <= high; what it leaves out keeps `defaults`' value."""
    numbers = {}
    for key, low, high in bounds:
        value = entries.get(key, getattr(defaults, key))
        if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
            raise ConfigError(f"{target}: '{section}.{key}' is {shown(value)}: a number more than {low}, at most "
                              f"{high}")
        numbers[key] = float(value)
    return numbers


def read_textfile(target: Path, value: str | None) -> str | None:
    """An absolute path ending in .prom (node_exporter's textfile collector reads only those); "" or none: off."""
    if not value:
        return None
    if not value.startswith("/") or not value.endswith(".prom"):
        raise ConfigError(f"{target}: 'prometheus_textfile' is {shown(value)}: an absolute path ending in .prom, "
                          "in the directory node_exporter's --collector.textfile.directory names")
    return value


def read(target: Path) -> Any:
    return read_yaml_file(target, str(target), MAX_CONFIG_BYTES, ConfigError) or {}


def read_yaml_file(path: Path, label: str, max_bytes: int, error: type[Exception]) -> Any:
    """A YAML file of at most `max_bytes` of UTF-8 through the guarded loader (node.yaml, profiles, the SKU
    table); every way it can be unreadable is one `error` naming `label` (and the line of a syntax error)."""
    try:
        raw = read_file(path, max_bytes)  # a FIFO or a device where the file should be is refused, never waited on
    except OSError as exc:
        raise error(f"cannot read {label}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{label} is larger than {max_bytes // 2**20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        return parse_yaml(text, label)  # aliases that expand without end are refused first
    except UnsafeYAML as exc:
        raise error(str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise error(f"{label}{where} is not valid YAML") from None


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
        unknown = set(map(str, spec)) - {"python", "frameworks", "pins"}
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
        pins = read_pins(target, f"stacks.{name}.pins", spec.get("pins"), tuple(frameworks))
        found.append(Stack(str(name), spec["python"], list(frameworks), pins))
    return found


def read_pins(target: Path, key: str, entries: object, allowed: tuple[str, ...]) -> dict[str, str]:
    """{component: version or glob}; the components `allowed` (for a stack: its frameworks); empty = unpinned."""
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise ConfigError(f"{target}: '{key}' must be a mapping of component to version, like "
                          f'{{{allowed[0] if allowed else "driver"}: "1.2.3"}}, not {shape(entries)}')
    pins = {}
    for name, value in entries.items():
        if name not in allowed:
            among = (f"among that stack's frameworks ({', '.join(allowed) or 'none'})" if key.startswith("stacks.")
                     else f"one of {', '.join(allowed)}")
            raise ConfigError(f"{target}: '{key}' names {shown(name)}, which is not {among}")
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{target}: '{key}.{name}' must be a quoted version like \"12.2\", not "
                              f"{shape(value)} (YAML reads 12.10 as the number 12.1)")
        if not PIN_PATTERN.match(value):
            raise ConfigError(f"{target}: '{key}.{name}' is {shown(value)}: a pin is a version like 535.261.03 "
                              "or a glob like 535.*")
        pins[name] = value
    return pins


def shape(value: object) -> str:
    """What YAML made of a value, in YAML's words."""
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number",
             float: "a number"}
    return next((word for kind, word in kinds.items() if isinstance(value, kind)), type(value).__name__)


def shown(value: object) -> str:
    """A value as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
