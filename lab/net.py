"""The lab network: one bridge in the main namespace, one network namespace + veth per host.

Nothing here routes anywhere: hosts get an on-link /24 and no default route, so the only things a
host can reach are the other hosts and the bridge address (where the lab's proxy listens).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

from lab import config
from lab.errors import LabError
from lab.run import run

NETNS_DIR = Path("/run/netns")


def namespaces_available() -> str | None:
    """None when network, mount, UTS and PID namespaces can be created here, else why not."""
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no namespace support (/proc/self/ns/net is missing)"
    try:
        proc = subprocess.run(
            ["unshare", "--net", "--mount", "--uts", "--pid", "--fork", "true"],
            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return "`unshare` is missing (install util-linux)"
    except subprocess.TimeoutExpired:
        return "`unshare` hung"
    if proc.returncode != 0:
        return f"cannot create namespaces: {proc.stderr.strip() or 'unshare failed'}"
    return None


def host_address(subnet: str, index: int) -> str:
    net = ipaddress.ip_network(subnet)
    return str(net.network_address + config.HOST_OFFSET + index)


def bridge_address(subnet: str) -> str:
    return str(ipaddress.ip_network(subnet).network_address + 1)


def check_subnet(subnet: str, hosts: int) -> None:
    """Refuse a subnet that is malformed, too small, or overlapping anything this machine already uses."""
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError as exc:
        raise LabError(f"--subnet {subnet!r} is not a network such as {config.DEFAULT_SUBNET}") from exc
    if net.version != 4 or not net.is_private or net.prefixlen != 24:
        raise LabError(f"--subnet must be a private IPv4 /24 (got {subnet})")
    if hosts + config.HOST_OFFSET >= 254:
        raise LabError(f"{hosts} hosts do not fit in one /24")
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("dev") == config.BRIDGE or route.get("type") in (
            "broadcast", "multicast"
        ):
            continue
        try:
            other = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        except ValueError:
            continue
        if other.overlaps(net) and not other.is_loopback:
            raise LabError(
                f"subnet {subnet} overlaps {dst} (dev {route.get('dev', '?')}) already used on this machine;"
                " pick another with --subnet"
            )


def list_netns() -> list[str]:
    """Network namespaces of the lab (by name prefix)."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(config.PREFIX + "-"))


def list_links() -> list[str]:
    """Links of the lab in the main namespace (bridge and host-side veths), by name prefix."""
    links = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    return sorted(link["ifname"] for link in links if link.get("ifname", "").startswith(config.PREFIX))


def netns_dir_is_mount() -> bool:
    return any(line.split()[1] == str(NETNS_DIR) for line in Path("/proc/mounts").read_text().splitlines())


def create_bridge(address: str) -> None:
    """The lab's bridge, with the controller's lab address (where the proxy listens).

    Defence in depth for the network rule: nothing arriving on the bridge is ever forwarded
    (even if this machine has ip_forward on, or a playbook adds a default route in a host), and
    the bridge has no IPv6 at all.
    """
    run(["ip", "link", "add", config.BRIDGE, "type", "bridge"])
    _sysctl(f"net/ipv4/conf/{config.BRIDGE}/forwarding", "0")
    _sysctl(f"net/ipv6/conf/{config.BRIDGE}/disable_ipv6", "1")
    run(["ip", "addr", "add", f"{address}/24", "dev", config.BRIDGE])
    run(["ip", "link", "set", config.BRIDGE, "up"])


def _sysctl(key: str, value: str) -> None:
    path = Path("/proc/sys") / key
    if path.exists():
        path.write_text(value)


def create_host_link(netns: str, veth: str, address: str) -> None:
    """A namespace with loopback up and eth0 (the peer of `veth`, which joins the bridge) at address/24."""
    run(["ip", "netns", "add", netns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run(["ip", "link", "set", veth, "master", config.BRIDGE, "up"])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0"])
    run(["ip", "-n", netns, "link", "set", "eth0", "up"])


def netns_pids(netns: str) -> list[int]:
    proc = run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def delete_netns(netns: str) -> None:
    run(["ip", "netns", "delete", netns], check=False)


def delete_link(name: str) -> None:
    run(["ip", "link", "delete", name], check=False)


def unmount_netns_dir_if_empty() -> None:
    """Undo the /run/netns mount `ip netns add` made, if the lab made it and nobody else uses it."""
    if netns_dir_is_mount() and not os.listdir(NETNS_DIR):
        run(["umount", str(NETNS_DIR)], check=False)
