"""InfiniBand: port state and rate from ibstat; loopback ib_write_bw per active HCA (--full)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import psutil

from ..model import Result, Status
from ..parsers import ParseError, parse
from ..process import finish, run, start
from ..profiles import Profile
from . import Check, CollectError, Context

IB = "InfiniBand"
MESSAGE_SIZE_B = 8 * 1024 * 1024  # one large message: the figure that matters for NCCL rings


def collect_ports(ctx: Context) -> dict[str, Any]:
    done = run(["ibstat"], ctx.timeout)
    if done.not_found:
        return {"available": False, "cas": []}
    if not done.ok:
        raise CollectError(done.describe_failure(), evidence=done.output, harness=True)
    if not done.stdout.strip():  # no RDMA devices at all: ibstat prints nothing and exits 0
        return {"available": True, "cas": [], "complete": True}
    try:
        parsed = parse("ibstat", done.stdout)
    except ParseError as exc:
        raise CollectError(f"cannot parse ibstat output: {exc}", evidence=done.output, harness=True) from None
    return {"available": True, **parsed, "evidence": done.stdout}


def ib_ports(facts: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(ca["name"], port) for ca in facts.get("cas", []) for port in ca.get("ports", [])
            if (port.get("link_layer") or IB) == IB]


def ports(f: dict[str, Any], p: Profile) -> Result:
    if not p.get("infiniband", "required", False):
        return Result("ib.ports", Status.SKIP, reason="no InfiniBand in this profile")
    facts = f["ib_ports"]
    want, rate_min = p.get("infiniband", "ports_active_min", 1), p.get("infiniband", "rate_Gbps_min")
    expected = {"active_ports_min": want, "rate_Gbps_min": rate_min}
    if not facts["available"]:
        return Result("ib.ports", Status.ERROR, None, expected, "ibstat not found",
                      "install infiniband-diags (site.yml --tags network)")
    good, bad = [], []
    for ca, port in ib_ports(facts):
        name = f"{ca}/{port['port']}"
        if port.get("state") != "Active":
            bad.append(f"{name} {port.get('state')} ({port.get('physical_state') or '?'})")
        elif rate_min and (port.get("rate_Gbps") or 0) < rate_min:
            bad.append(f"{name} at {port.get('rate_Gbps')} Gb/s < {rate_min}")
        else:
            good.append(name)
    measured = {"active": len(good), "problems": bad}
    if not facts.get("complete", True):
        return Result("ib.ports", Status.ERROR, measured, expected, "ibstat output ended early",
                      "run ibstat by hand; an ibpanic means the driver or HCA is in a bad state",
                      facts.get("evidence", ""))
    if len(good) < want:
        detail = "; ".join(bad) or "no InfiniBand port found"
        return Result("ib.ports", Status.FAIL, measured, expected,
                      f"{len(good)} of {want} InfiniBand ports active at rate: {detail}",
                      "check cables and the switch port (ibportstate, ibdiagnet); a Polling port has no link",
                      facts.get("evidence", ""))
    status = Status.WARN if bad else Status.PASS
    reason = f"{len(good)} InfiniBand port(s) active" + (f"; also {'; '.join(bad)}" if bad else "")
    return Result("ib.ports", status, measured, expected, reason, evidence=facts.get("evidence", ""))


def wait_listening(proc: subprocess.Popen, limit_s: float = 3.0) -> None:
    """The client must not connect before the server listens on its out-of-band TCP port."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(c.status == psutil.CONN_LISTEN for c in psutil.Process(proc.pid).net_connections("tcp")):
                return
        except psutil.Error:
            return
        time.sleep(0.05)


def collect_loopback(ctx: Context) -> dict[str, Any]:
    """ib_write_bw server and client on this host, one HCA port at a time."""
    ports_facts = ctx.facts.get("ib_ports") or collect_ports(ctx)
    active = [(ca, port) for ca, port in ib_ports(ports_facts) if port.get("state") == "Active"]
    results: dict[str, Any] = {}
    for ca, port in active:
        base = ["ib_write_bw", "-d", ca, "-i", str(port["port"]), "-s", str(MESSAGE_SIZE_B),
                "--report_gbits", "-D", "5", "-F"]
        server = start(base)
        if server is None:
            return {"available": False, "results": {}}
        wait_listening(server)
        client = run([*base, "localhost"], ctx.bench_timeout)
        finish(server, 10)
        key = f"{ca}/{port['port']}"
        try:
            parsed = parse("perftest", client.stdout)
            results[key] = {"bw_avg_Gbps": parsed.get("bw_avg_Gbps"), "evidence": client.stdout}
        except ParseError as exc:
            results[key] = {"error": client.describe_failure() if not client.ok else str(exc),
                            "evidence": client.output}
    return {"available": True, "results": results}


def loopback(f: dict[str, Any], p: Profile) -> Result:
    check = "bw.ib_loopback"
    if not p.get("infiniband", "required", False):
        return Result(check, Status.SKIP, reason="no InfiniBand in this profile")
    facts, minimum = f["ib_loopback"], p.get("bandwidth", "ib_write_bw_Gbps_min")
    if not facts["available"]:
        status = Status.ERROR if p.get("bandwidth", "ib_write_bw_required", False) else Status.SKIP
        return Result(check, status, reason="ib_write_bw not found", remediation="install perftest")
    if not facts["results"]:
        return Result(check, Status.FAIL, None, minimum, "no active InfiniBand port to test")
    measured = {k: v.get("bw_avg_Gbps") for k, v in facts["results"].items()}
    errors = {k: v["error"] for k, v in facts["results"].items() if "error" in v}
    evidence = "\n".join(v.get("evidence", "") for v in facts["results"].values())
    if errors:
        return Result(check, Status.ERROR, measured, minimum,
                      "; ".join(f"{k}: {e}" for k, e in errors.items()), evidence=evidence)
    slow = {k: v for k, v in measured.items() if minimum and (v or 0) < minimum}
    if slow:
        return Result(check, Status.FAIL, measured, f">= {minimum} Gb/s",
                      "; ".join(f"{k} {v} Gb/s" for k, v in slow.items()) + f" < {minimum} Gb/s",
                      "check the HCA's PCIe link (lspci -vv), firmware and MTU", evidence)
    return Result(check, Status.PASS, measured, f">= {minimum} Gb/s",
                  f"{len(measured)} HCA port(s) at rate", evidence=evidence)


CHECKS = [
    Check("ib.ports", ("ib_ports",), ports, "InfiniBand ports active at the profile's rate"),
    Check("bw.ib_loopback", ("ib_loopback",), loopback, "loopback ib_write_bw per active HCA", active=True),
]
COLLECTORS = {"ib_ports": collect_ports, "ib_loopback": collect_loopback}
