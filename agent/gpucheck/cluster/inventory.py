"""The hosts to check, read from the Ansible inventory with ansible-core's own API, so groups,
patterns, --limit, host_vars/group_vars, ansible.cfg and templated values behave as in Ansible."""

from __future__ import annotations

import contextlib
import getpass
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..files import kind_of
from .ssh import args as ssh_args

DEFAULT_GROUP = "gpu_nodes"  # the playbook's group of GPU nodes; `all` when an inventory has none
# inventory vars the later cluster stages and Slurm use: words a command line takes, and labels of what nodes share
# (stage shape, the burn's racks, the reports), which never reach a command line
WORD_VARS = ("ib_address", "slurm_node_name", "cluster_name")
# A cluster's name where the inventory gives none: the one Slurm's cluster takes then (roles/slurm's default)
DEFAULT_CLUSTER = "gpucheck"
LABEL_VARS = ("rack", "leaf_switch", "pdu")
# Ansible's names for each connection setting, first wins (as the ssh connection plugin reads them).
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
HOST_KEY_CHECKING_VARS = ("ansible_ssh_host_key_checking", "ansible_host_key_checking")


class InventoryError(Exception):
    """Bad inventory input: str(e) is the one line the user sees (exit 3)."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: tuple[str, ...]
    strict_host_key_checking: bool  # False only when Ansible/ssh options say so; unknown keys are never saved
    connect_timeout: float | None = None
    proxy_command: str | None = None
    groups: tuple[str, ...] = ()
    vars: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Inventory:
    sources: list[str]
    pattern: str
    limit: str | None
    hosts: list[Host]
    config_file: str | None = None
    cluster: str = DEFAULT_CLUSTER  # its cluster_name: what its runs are recorded under

    def to_dict(self) -> dict[str, Any]:
        return {"sources": self.sources, "pattern": self.pattern, "limit": self.limit, "cluster": self.cluster,
                "config_file": self.config_file, "hosts": [h.to_dict() for h in self.hosts]}


@contextlib.contextmanager
def quiet_ansible() -> Iterator[list[str]]:
    """Ansible writes warnings to stderr itself; collect them instead (turned into our one-line errors).
    Display.display is the one public exit of every message; its de-duplication memory (`_warns`) is
    swapped for a fresh one so a warning seen by an earlier load in this process is seen again."""
    from ansible.utils.display import Display

    display = Display()  # a singleton: the instance every ansible module writes through
    messages: list[str] = []

    def collect(msg: str, *args: Any, **kwargs: Any) -> None:
        messages.append(" ".join(str(msg).split()).removeprefix("[WARNING]: "))

    memories = {name: getattr(display, name) for name in ("_warns", "_deprecations") if hasattr(display, name)}
    for name, memory in memories.items():
        setattr(display, name, type(memory)())
    display.display = collect  # type: ignore[method-assign]
    try:
        yield messages
    finally:
        del display.display  # the class's method again
        for name, memory in memories.items():
            setattr(display, name, memory)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _resolve_sources(sources: list[str] | None, config: Any) -> list[str]:
    if sources:
        for source in sources:
            if "," not in source and not os.path.exists(os.path.expanduser(source)):
                raise InventoryError(f"inventory not found: {source}")
            if "," not in source and not (os.path.isfile(os.path.expanduser(source))
                                          or os.path.isdir(os.path.expanduser(source))):
                what = kind_of(os.stat(os.path.expanduser(source)).st_mode)
                raise InventoryError(f"inventory {source} is {what}, not a file or a directory")
        return [os.path.expanduser(s) if "," not in s else s for s in sources]
    defaults = list(config.get_config_value("DEFAULT_HOST_LIST") or [])
    where = f"ansible.cfg ({config._config_file})" if config._config_file else "Ansible's default"
    present = [s for s in defaults if "," in s or os.path.exists(s)]
    if not present:
        raise InventoryError(f"no inventory: pass -i INVENTORY ({where} names {', '.join(defaults) or 'none'}, "
                             "which does not exist)")
    return present


def _parse_failure(warnings: list[str]) -> str | None:
    failed = [w for w in warnings if "Unable to parse" in w or "Failed to parse" in w]
    if not failed:
        return None
    detail = next((w for w in failed if "Failed to parse" in w), failed[0])
    detail = detail.split(" <<< caused by", 1)[0].split(" Origin: ", 1)[0]  # ansible repeats the cause
    head, sep, rest = detail.partition("Failed to parse inventory with")
    detail = head + sep + rest.split(" Failed to parse inventory with", 1)[0]
    return one_line(detail)


def _terms(pattern: str) -> list[str]:
    """The host/group names of an Ansible pattern (`a,b:&c:!d` -> a, b, c, d), as its warnings name them."""
    return [t.lstrip("!&") for t in re.split(r"[,:\s]+", pattern) if t.lstrip("!&")]


def _unmatched(warnings: list[str]) -> list[str]:
    return [w.split("ignoring:", 1)[1].strip() for w in warnings if "Could not match" in w and "ignoring:" in w]


def _select(manager: Any, pattern: str, limit: str | None, sources: list[str], warnings: list[str]) -> list[Any]:
    """Ansible skips a part of a pattern that matches nothing with a warning (`--limit '!typo'` then
    checks every host): here any such part is an error, as is a --limit that names nothing."""
    described = f"'{pattern}'" + (f" with --limit '{limit}'" if limit else "")
    if limit is not None and not _terms(limit):
        raise InventoryError(f"--limit '{limit}' matches no host: it names no host or group")
    before = len(warnings)
    try:
        manager.subset(limit)
        hosts = manager.get_hosts(pattern)
    except Exception as exc:  # ansible raises AnsibleError, and IndexError on some patterns ("a:&")
        raise InventoryError(f"bad host pattern {described}: {one_line(exc)}") from None
    skipped = _unmatched(warnings[before:])
    if hosts and skipped:
        option = "--limit" if limit and skipped[0] in _terms(limit) else "--pattern"
        raise InventoryError(f"{option} '{skipped[0]}' matches no host or group in {', '.join(sources)} (Ansible "
                             "would skip it with a warning and check the rest)")
    if not hosts:
        group = manager.groups.get(pattern)
        if group is not None and not group.get_hosts():
            raise InventoryError(f"group '{pattern}' has no hosts in {', '.join(sources)}")
        unmatched = _unmatched(warnings)
        hint = f" (no host or group named {', '.join(repr(u) for u in unmatched)})" if unmatched else ""
        raise InventoryError(f"no host matches {described} in {', '.join(sources)}{hint}")
    return hosts


def _check_name(name: str) -> None:
    """A host name is one word: drain.txt's lines are `node reason` (read by `while read n r; do scontrol
    update nodename=$n ...`), nodes/ file names and JUnit suites are made from it. A name with
    whitespace or a control character would split or add a line there: refused, not quoted."""
    if not name or any(c.isspace() or not c.isprintable() for c in name):
        raise InventoryError(f"host name {name!r} has whitespace or a control character: gpucheck cluster takes "
                             "one-word host names (drain.txt is one `node reason` line per node)")
    if name.startswith("-"):
        raise InventoryError(f"host name {name!r} starts with '-': a command it reaches would read it as an option")


def _one_word(host: str, variable: str, value: Any) -> str:
    """An inventory value that reaches a command line (an address for ssh, mpirun, torchrun, `gpucheck net`; a user;
    a Slurm node name for srun and scontrol): one word that is never an option (`-oProxyCommand=...`)."""
    text = str(value)
    if not text or text.startswith("-") or any(c.isspace() or not c.isprintable() for c in text):
        raise InventoryError(f"{host}: {variable} {text!r} is not one word a command can take: empty, with whitespace "
                             "or a control character, or starting with '-' (read as an option)")
    return text


def _label(host: str, variable: str, value: Any) -> str | None:
    """An inventory label (a rack, a leaf switch, a PDU: `Rack 12 (row B)`): taken as written, spaces and all; empty
    is no label. Only a control character, which would forge a line in drain.txt or on a terminal, is refused."""
    text = str(value).strip()
    if any(not c.isprintable() for c in text):
        raise InventoryError(f"{host}: {variable} {text!r} has a control character: a label is one line of text")
    return text or None


def _plain(value: Any) -> Any:
    """Ansible 2.19 returns tagged str/int subclasses; keep plain values in our report."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _bool(value: Any) -> bool:
    return str(value).strip().lower() not in ("0", "false", "no", "off", "")


class _HostReader:
    """Reads one host's connection settings (templated, as Ansible would) from its merged vars."""

    def __init__(self, loader: Any, config: Any):
        self.loader = loader
        self.config = config

    def host(self, host: Any, variables: dict[str, Any]) -> Host:
        from ansible.template import Templar

        templar = Templar(loader=self.loader, variables=variables)

        def get(names: tuple[str, ...]) -> Any:
            for name in names:
                if variables.get(name) is not None:
                    try:
                        return _plain(templar.template(variables[name]))
                    except Exception as exc:
                        raise InventoryError(_var_error(host.name, name, exc)) from None
            return None

        address = _one_word(host.name, "ansible_host", get(ADDRESS_VARS) or host.name)
        port_value = get(PORT_VARS) or self.config.get_config_value("DEFAULT_REMOTE_PORT") or 22
        try:
            port = int(port_value)
            if not 0 < port < 65536:
                raise ValueError
        except (TypeError, ValueError):
            raise InventoryError(f"{host.name}: ansible_port {port_value!r} is not a port number") from None
        user = _one_word(host.name, "ansible_user",
                         get(USER_VARS) or self.config.get_config_value("DEFAULT_REMOTE_USER") or getpass.getuser())
        key = get(KEY_VARS) or self.config.get_config_value("DEFAULT_PRIVATE_KEY_FILE")
        if key:  # read when connecting: a key we cannot read is that host's error (ssh/connect.py)
            key = os.path.expanduser(str(key))
        try:
            options = ssh_args.parse(get(("ansible_ssh_common_args",)), get(("ansible_ssh_extra_args",)))
        except ssh_args.SshArgsError as exc:
            raise InventoryError(f"{host.name}: {exc}") from None
        if options.strict_host_key_checking:
            strict = options.strict_host_key_checking not in ssh_args.ACCEPTS_UNKNOWN
        elif get(HOST_KEY_CHECKING_VARS) is not None:
            strict = _bool(get(HOST_KEY_CHECKING_VARS))
        else:
            strict = bool(self.config.get_config_value("HOST_KEY_CHECKING"))
        kept: dict[str, str | None] = {name: _one_word(host.name, name, get((name,))) for name in WORD_VARS
                                       if variables.get(name) is not None}
        kept |= {name: _label(host.name, name, get((name,))) for name in LABEL_VARS if variables.get(name) is not None}
        kept = {name: value for name, value in kept.items() if value is not None}
        groups = tuple(sorted(g.name for g in host.get_groups() if g.name != "all"))
        return Host(name=host.name, address=str(address), port=port, user=str(user), key_file=key,
                    known_hosts=options.known_hosts_files(), strict_host_key_checking=strict,
                    connect_timeout=options.connect_timeout, proxy_command=options.proxy_command,
                    groups=groups, vars=kept)


def _var_error(host: str, name: str, exc: BaseException) -> str:
    if "vault" in str(exc).lower():
        return (f"{host}: {name} is vault-encrypted and gpucheck cluster takes no vault password: keep the "
                "connection variables (ansible_host/user/port/key) unencrypted")
    return f"{host}: cannot template {name}: {one_line(exc)}"


def _vars_error(host: str, exc: BaseException) -> str:
    if "vault" in str(exc).lower():
        return (f"{host}: a vars file is vault-encrypted and gpucheck cluster takes no vault password: keep the "
                "connection variables (ansible_host/user/port/key) in an unencrypted file")
    return f"{host}: cannot read its variables: {one_line(exc)}"


def load(sources: list[str] | None = None, pattern: str | None = None, limit: str | None = None) -> Inventory:
    """Raises InventoryError (one line) for anything the user must fix; Ansible prints nothing."""
    try:
        from ansible.config.manager import ConfigManager
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager
    except ImportError:
        raise InventoryError("ansible-core is not installed: pip install 'gpucheck[cluster]'") from None

    with quiet_ansible() as warnings:
        config = ConfigManager()  # read now, not at import: honours ANSIBLE_CONFIG and the current directory
        resolved = _resolve_sources(sources, config)
        loader = DataLoader()
        try:
            manager = InventoryManager(loader=loader, sources=resolved)
        except Exception as exc:
            raise InventoryError(f"cannot read inventory {', '.join(resolved)}: {one_line(exc)}") from None
        failure = _parse_failure(warnings)
        if failure:
            raise InventoryError(f"cannot read inventory {', '.join(resolved)}: {failure}")
        chosen = pattern or (DEFAULT_GROUP if DEFAULT_GROUP in manager.groups else "all")
        selected = _select(manager, chosen, limit, resolved, warnings)
        variables = VariableManager(loader=loader, inventory=manager)
        reader = _HostReader(loader, config)
        hosts = []
        for host in selected:
            _check_name(host.name)
            try:
                merged = variables.get_vars(host=host, include_hostvars=False)
            except Exception as exc:  # a host_vars file that does not parse, or is vault-encrypted
                raise InventoryError(_vars_error(host.name, exc)) from None
            hosts.append(reader.host(host, merged))
    return Inventory(sources=resolved, pattern=chosen, limit=limit, hosts=hosts, config_file=config._config_file,
                     cluster=cluster_of(hosts))


def cluster_of(hosts: list[Host]) -> str:
    """The inventory's cluster_name (group_vars/all in ours); one cluster per inventory."""
    names: dict[str, list[str]] = {}
    for host in hosts:
        names.setdefault(str(host.vars.get("cluster_name") or DEFAULT_CLUSTER), []).append(host.name)
    if len(names) > 1:
        said = "; ".join(f"{name} ({', '.join(members[:3])}{', ...' if len(members) > 3 else ''})"
                         for name, members in sorted(names.items()))
        raise InventoryError(f"the hosts name more than one cluster_name: {said}: check one cluster at a time")
    return next(iter(names), DEFAULT_CLUSTER)
