"""InfiniBand port status from `ibstat`, `ibstatus` or `ibv_devinfo` (the format is detected).

States are normalised to Down/Init/Armed/Active/ActiveDefer and physical states to Sleep,
Polling, Disabled, PortConfigurationTraining, LinkUp, LinkErrorRecovery, PhyTest (the names and
numeric codes of the IB spec, as printed by infiniband-diags and libibverbs).
"""

from __future__ import annotations

import re

from ._common import ParseError, guard, number, text_lines

KIND = "ibstat"

_IBSTAT_CA = re.compile(r"^\s*CA '(?P<name>[^']+)'")
_IBSTAT_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_IBSTATUS_PORT = re.compile(r"^\s*Infiniband device '(?P<name>[^']+)' port (?P<port>\d+) status:")
_DEVINFO_CA = re.compile(r"^\s*hca_id:\s*(?P<name>\S+)")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_NO_DEVICES = re.compile(r"No IB devices found", re.IGNORECASE)
# ibpanic/ibwarn: infiniband-diags' fatal and warning messages; the output stops at an ibpanic.
_DIAG_MESSAGE = re.compile(r"\b(?P<level>ibpanic|ibwarn|ibdebug|ibexit)\b")

_STATE_NAMES = {"down": "Down", "init": "Init", "initializing": "Init", "armed": "Armed",
                "active": "Active", "activedefer": "ActiveDefer"}
_STATE_CODES = {1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_PHYS_NAMES = {"sleep": "Sleep", "polling": "Polling", "disabled": "Disabled",
               "portconfigurationtraining": "PortConfigurationTraining", "linkup": "LinkUp",
               "linkerrorrecovery": "LinkErrorRecovery", "phytest": "PhyTest"}
_PHYS_CODES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "PhyTest"}
_LINK_LAYERS = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}


def _normalise(raw: str, names: dict[str, str], codes: dict[int, str]) -> str | None:
    """'Active', '4: ACTIVE', 'PORT_ACTIVE (4)', 'LINK_UP (5)' -> the canonical name."""
    if not raw:
        return None
    word = re.sub(r"[^a-z]", "", raw.lower().replace("port_", "", 1))
    if word in names:
        return names[word]
    code = re.search(r"\d+", raw)
    if code and int(code.group()) in codes:
        return codes[int(code.group())]
    return raw


def _new_port(port: int) -> dict:
    return {"port": port, "state": None, "physical_state": None, "rate_Gbps": None, "link_layer": None}


def _set_port_field(port: dict, key: str, value: str) -> None:
    key = key.lower().replace(" ", "_")
    if key == "state":
        port["state"] = _normalise(value, _STATE_NAMES, _STATE_CODES)
    elif key in ("physical_state", "phys_state"):
        port["physical_state"] = _normalise(value, _PHYS_NAMES, _PHYS_CODES)
    elif key == "rate":  # ibstat "400", ibstatus "200 Gb/sec (4X HDR)"
        port["rate_Gbps"] = number(value)
    elif key == "link_layer":
        port["link_layer"] = _LINK_LAYERS.get(value.lower(), value)
    elif key == "active_width":  # ibv_devinfo -v: "4X (2)"
        port["_width"] = number(value)
    elif key == "active_speed":  # ibv_devinfo -v: "25.0 Gbps (32)", per lane
        port["_speed"] = number(value)


def _finish_port(port: dict) -> dict:
    width, speed = port.pop("_width", None), port.pop("_speed", None)
    if port["rate_Gbps"] is None and width and speed:
        rate = width * speed
        port["rate_Gbps"] = int(rate) if float(rate).is_integer() else round(rate, 3)
    return port


def _detect(lines: list[str]) -> str:
    for line in lines:
        if _IBSTAT_CA.match(line):
            return "ibstat"
        if _IBSTATUS_PORT.match(line):
            return "ibstatus"
        if _DEVINFO_CA.match(line) or _NO_DEVICES.search(line):
            return "ibv_devinfo"
    raise ParseError(f"not {KIND} output: no \"CA '...'\", \"Infiniband device '...'\" or \"hca_id:\" line")


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    fmt = _detect(lines)
    cas: list[dict] = []
    errors: list[str] = []
    panicked = False
    ca: dict | None = None
    port: dict | None = None
    for line in lines:
        if match := _DIAG_MESSAGE.search(line):
            errors.append(line.strip())
            panicked = panicked or match["level"] in ("ibpanic", "ibexit")
            continue
        ca_match = _IBSTAT_CA.match(line) if fmt == "ibstat" else _DEVINFO_CA.match(line)
        status_match = _IBSTATUS_PORT.match(line) if fmt == "ibstatus" else None
        port_match = (_IBSTAT_PORT.match(line) if fmt == "ibstat" else
                      _DEVINFO_PORT.match(line) if fmt == "ibv_devinfo" else None)
        if ca_match or status_match:
            name = (ca_match or status_match)["name"]
            ca = next((c for c in cas if c["name"] == name), None)
            if ca is None:
                ca = {"name": name, "type": None, "firmware": None, "declared_ports": None, "ports": []}
                cas.append(ca)
            port = None
            if status_match:
                port = _new_port(int(status_match["port"]))
                ca["ports"].append(port)
            continue
        if ca is not None and port_match:
            port = _new_port(int(port_match["port"]))
            ca["ports"].append(port)
            continue
        key, colon, value = line.partition(":")  # not a regex: `key\s*:\s*(.*?)\s*$` is quadratic in blanks
        key, value = key.strip(), value.strip()
        if ca is None or not colon or not key:
            continue
        if key in ("CA type", "vendor_part_id"):
            ca["type"] = value
        elif key in ("Firmware version", "fw_ver"):
            ca["firmware"] = value
        elif key in ("Number of ports", "phys_port_cnt"):
            ca["declared_ports"] = number(value)
        elif port is not None:
            _set_port_field(port, key, value)
    for each in cas:
        each["ports"] = [_finish_port(p) for p in each["ports"]]
    return {"format": fmt, "cas": cas, "errors": errors, "complete": _complete(fmt, cas, panicked)}


def _complete(fmt: str, cas: list[dict], panicked: bool) -> bool:
    """False when the output stopped early: an ibpanic, a CA without its ports, a port without a state."""
    if panicked:
        return False
    for ca in cas:
        ports = ca["ports"]
        if not ports or any(p["state"] is None for p in ports):
            return False
        if ca["declared_ports"] is not None and len(ports) < ca["declared_ports"]:
            return False
    return True
