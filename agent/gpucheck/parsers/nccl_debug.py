"""NCCL_DEBUG=INFO logs: NCCL version, the transports the channels use, the IB devices, warnings.

Channel lines look like "Channel 00/0 : 7[7] -> 6[6] via P2P/direct pointer/read" or
"... [send] via NET/IB/3/GDRDMA"; the transport is what follows "via". Coarse names (P2P, SHM,
NET/IB, NET/Socket, ...) are always reported; finer P2P/SHM forms (P2P/IPC, P2P/direct pointer)
are reported too. A GDRDMA suffix means GPUDirect RDMA is in use on that path.

The network NCCL selected is a transport too, named as channel lines name it: "Using network IB" gives
NET/IB, "Using network Socket" NET/Socket; without that line, the network whose initialisation said
"NET/IB : Using [0]mlx5_0:1/IB" or "NET/Socket : Using [0]eth0:...". So a log cut before the channel
lines (or a single node's, where no channel crosses the network) still says which network NCCL took.
"""

from __future__ import annotations

import re

from ._common import ParseError, guard, strip_prefix, text_lines

KIND = "nccl-debug"

_NCCL_LINE = re.compile(r"NCCL (?P<level>INFO|WARN)\b")
_HOST = re.compile(r"^\s*(?P<host>[^\s:]+):\d+:\d+ \[\d+\] NCCL ")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_VIA = re.compile(r"\bvia (?P<path>\S.*)")  # on a right-stripped line: no lazy part to rescan a long tail
_IB_USING = re.compile(r"(?P<net>NET/IB\w*)\s*:\s*Using\s+(?P<list>.*)$")  # NET/IB, NET/IBext (nccl-rdma-sharp)
_IB_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<device>[^:\s\[]+):(?P<port>\d+)/(?P<link>\w+)")
_SOCKET_USING = re.compile(r"NET/Socket\s*:\s*Using\s+(?P<list>.*)$")
_SOCKET_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<device>[^:\s\[<]+)")
_NETWORK = re.compile(r"Using network (?P<network>\S.*)")
_GDR_ENABLED = re.compile(r"GPU Direct RDMA Enabled|GDRDMA")


def _transports(path: str) -> list[str]:
    """'P2P/direct pointer/read' -> ['P2P', 'P2P/direct pointer']; 'NET/IB/3/GDRDMA' -> ['NET/IB']."""
    if path.startswith("direct shared memory"):  # NCCL 2.4 and older
        return ["SHM"]
    parts = [p.strip() for p in path.split("/")]
    kind = parts[0]
    if kind == "NET" and len(parts) > 1:
        return [f"NET/{parts[1]}"]
    if kind in ("P2P", "SHM") and len(parts) > 1:
        return [kind, f"{kind}/{parts[1]}"]
    return [kind]


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    version = cuda = network = None
    transports: set[str] = set()
    initialised: set[str] = set()  # "NET/IB : Using ...", "NET/Socket : Using ..."
    ib_devices: dict[tuple[str, int], dict] = {}
    socket_devices: list[str] = []
    warnings: list[str] = []
    hosts: set[str] = set()
    gdrdma = False
    for line in map(str.rstrip, lines):
        if match := _VERSION.search(line):  # an INFO line, or bare with NCCL_DEBUG=VERSION
            version, cuda = match["version"], match["cuda"]
        nccl = _NCCL_LINE.search(line)
        if not nccl:
            continue
        if host := _HOST.match(strip_prefix(line)):
            hosts.add(host["host"])
        if nccl["level"] == "WARN":
            warnings.append(line.strip())
        if match := _VIA.search(line):
            transports.update(_transports(match["path"]))
        if match := _IB_USING.search(line):
            initialised.add(match["net"])
            for dev in _IB_DEVICE.finditer(match["list"].split(";")[0]):
                key = (dev["device"], int(dev["port"]))
                ib_devices.setdefault(key, {"index": int(dev["index"]), "device": dev["device"],
                                            "port": int(dev["port"]), "link_layer": dev["link"]})
        if match := _SOCKET_USING.search(line):
            initialised.add("NET/Socket")
            for dev in _SOCKET_DEVICE.finditer(match["list"]):
                if dev["device"] not in socket_devices:
                    socket_devices.append(dev["device"])
        if match := _NETWORK.search(line):
            network = match["network"]
        gdrdma = gdrdma or bool(_GDR_ENABLED.search(line))
    # "Using network X" is NCCL's choice; without it, the network whose init said "Using" is.
    transports |= {f"NET/{network}"} if network else initialised
    if not (version or transports or ib_devices or socket_devices or network or warnings):
        raise ParseError(f"not {KIND} output: no NCCL INFO/WARN lines with a version, transport, network or warning")
    return {
        "nccl_version": version,
        "cuda_version": cuda,
        "network": network,
        "transports": sorted(transports),
        "ib_devices": sorted(ib_devices.values(), key=lambda d: d["index"]),
        "socket_devices": socket_devices,
        "gdrdma": gdrdma,
        "warnings": warnings,
        "hosts": sorted(hosts),
    }
