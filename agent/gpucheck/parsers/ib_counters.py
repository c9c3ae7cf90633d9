"""InfiniBand port counters as the kernel shows them (/sys/class/infiniband/DEV/ports/N/counters/NAME): what each
counter is, how wide the port's PMA counts it (a counter at its top stays there: it saturates, it never wraps), and
the text of a listing of them: `grep -H . /sys/class/infiniband/*/ports/*/counters/*` (PATH:VALUE lines) or a loop
that prints `=== PATH ===` and the value under it. A value is a count, or "N/A (no PMA)" where the driver has no
port management agent to ask (iWARP): None, never 0."""

from __future__ import annotations

import re

from ._common import ParseError, guard, text_lines

KIND = "ib-counters"

# Each error counter of the IBA PortCounters attribute: its width in bits and what its rising means. Traffic
# counters (port_*_data, *_packets) and port_xmit_wait (congestion, not an error) are kept, never judged.
ERRORS: dict[str, tuple[int, str]] = {
    "link_downed": (8, "the link went down and came back (a flap): cable, transceiver or switch port"),
    "link_error_recovery": (8, "the link retrained after errors: a marginal cable or transceiver"),
    "symbol_error": (16, "symbol errors on the wire: a bad cable, transceiver or dirty connector"),
    "port_rcv_errors": (16, "malformed packets received: the link's physical layer"),
    "port_rcv_remote_physical_errors": (16, "packets marked bad upstream: a link beyond this one"),
    "port_rcv_switch_relay_errors": (16, "packets the switch could not relay: routing"),
    "port_xmit_discards": (16, "packets dropped on the way out: congestion or a port that went down"),
    "port_xmit_constraint_errors": (8, "packets not sent: partition or filtering constraints"),
    "port_rcv_constraint_errors": (8, "packets dropped: partition or filtering constraints"),
    "local_link_integrity_errors": (4, "the local link's error threshold was passed: the physical link"),
    "excessive_buffer_overrun_errors": (4, "receive buffers overran: flow control on the link"),
    "VL15_dropped": (16, "subnet management packets dropped: the subnet manager's traffic"),
}
# The rest of the PortCounters (and PortCountersExtended) files: traffic, and port_xmit_wait (congestion)
OTHERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
          "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets", "port_xmit_wait")
PATH = re.compile(r"(?:^|/)(?:infiniband/)?(?P<dev>[^/\s]+)/ports/(?P<port>\d+)/(?:hw_)?counters/(?P<name>[^/:\s]+)$")
BLOCK = re.compile(r"^===\s*(?P<path>\S+)\s*===$")
NO_PMA = re.compile(r"^N/A\b")


def top(name: str) -> int | None:
    """The largest count an error counter holds (it stays there once reached); None for another counter."""
    width = ERRORS.get(name, (0, ""))[0]
    return (1 << width) - 1 if width else None


def value(text: str) -> int | None:
    """A counter file's text -> its count; None for "N/A (no PMA)". ValueError for anything else."""
    text = text.strip()
    if NO_PMA.match(text):
        return None
    if not text.isdigit():
        raise ValueError(f"not a count: {text[:40]!r}")
    return int(text)


def port_key(path: str) -> tuple[str, str] | None:
    """(DEV/PORT, counter name) from a counter's path; ("-", name) when the path names no device (a listing made
    inside one port's counters directory: then the name must be a counter's); None when it is no counter's path."""
    found = PATH.search(path.strip())
    if found:
        return f"{found['dev']}/{found['port']}", found["name"]
    name = path.strip().rstrip("/").rsplit("/", 1)[-1]
    return ("-", name) if name in ERRORS or name in OTHERS else None


@guard(KIND)
def parse(text: str) -> dict:
    """{"ports": {DEV/PORT: {counter: count or None}}}; ParseError when no line is a counter."""
    ports: dict[str, dict[str, int | None]] = {}
    pending: str | None = None
    for line in text_lines(text, KIND):
        line = line.strip()
        if not line:
            continue
        block = BLOCK.match(line)
        if block:
            pending = block["path"]
            continue
        if pending is not None:
            path, raw, pending = pending, line, None
        elif ":" in line:
            path, _, raw = line.rpartition(":")  # a path holds PCI addresses: the value holds no colon
        else:
            continue
        where = port_key(path)
        if where is None:
            continue
        try:
            count = value(raw)
        except ValueError:
            continue
        ports.setdefault(where[0], {})[where[1]] = count
    if not ports:
        raise ParseError("no InfiniBand counter in the text (grep -H . /sys/class/infiniband/*/ports/*/counters/*)")
    return {"ports": ports}
