"""Measuring the bandwidth between two nodes, a -> b, and a round of disjoint pairs at once.

- where every node's thresholds require InfiniBand: perftest `ib_write_bw --report_gbits` (server on
  b, client on a to b's ib_address, or its address), parsed by parsers.perftest;
- otherwise the agent's own TCP test: `gpucheck net serve` on b, `gpucheck net send` on a.

A pair that cannot be measured is a Measured with `error` set, never an exception and never a slow link."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...netbench import DEFAULT_PORT
from ...parsers import ParseError, parse
from ..context import ClusterContext
from ..nodes import address, thresholds
from ..ssh.client import RemoteHosts, command
from .schedule import Pair

UNIT = "Gb/s"
ACCEPT_TIMEOUT_S = 20.0
IB_CONNECT_ATTEMPTS = 3


@dataclass
class Measured:
    a: str
    b: str
    method: str
    value: float | None = None
    error: str | None = None
    evidence: str = ""
    wall_s: float = 0.0


@dataclass
class Plan:
    method: str  # tcp | ib_write_bw
    note: str = ""
    minimum: float | None = None  # the thresholds' floor (InfiniBand), Gb/s


def choose_method(ctx: ClusterContext, nodes: list[str]) -> Plan:
    """InfiniBand when every node's thresholds require it; TCP otherwise (said so when some do)."""
    judged = {n: thresholds(ctx, n) for n in nodes}
    wants_ib = {n: bool(p and p.get("infiniband", "required", False)) for n, p in judged.items()}
    if nodes and all(wants_ib.values()):
        minima = [p.get("bandwidth", "ib_write_bw_Gbps_min") for p in judged.values() if p]
        minima = [float(m) for m in minima if m is not None]
        return Plan("ib_write_bw", minimum=min(minima) if minima else None)
    some = sorted(n for n, ib in wants_ib.items() if ib)
    note = (f"TCP for every pair: only {len(some)} of {len(nodes)} nodes' profiles have InfiniBand "
            "(compare one kind of node at a time with --pattern)") if some else ""
    return Plan("tcp", note)


def last_json(text: str, key: str) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object holding `key` (what `gpucheck net` prints)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and key in doc:
                return doc
    return None


def measure_tcp(ctx: ClusterContext, run: RemoteHosts, a: str, b: str, seconds: float,
                port: int = DEFAULT_PORT) -> Measured:
    """a streams to b for `seconds` with the agent's built-in test; b's figure counts what arrived."""
    began = time.monotonic()
    agent = ctx.options.agent_argv()
    found = Measured(a, b, "tcp")
    serve = command([*agent, "net", "serve", "--port", port, "--timeout", f"{ACCEPT_TIMEOUT_S:g}"])
    server = run.start(b, serve, ACCEPT_TIMEOUT_S + seconds + 30)
    if not server.wait_for('"listening"', ACCEPT_TIMEOUT_S):
        done = server.wait(5)
        found.error = f"the receiver on {b} did not start: {done.describe()}"
        found.evidence = done.evidence()
        found.wall_s = time.monotonic() - began
        return found
    send = command([*agent, "net", "send", address(ctx, b), "--port", port, "--seconds", f"{seconds:g}"])
    client = run.run(a, send, seconds + ACCEPT_TIMEOUT_S + 10)
    if not client.ok:
        server.kill()
    done = server.wait(seconds + 30)
    found.evidence = f"{client.evidence()}\n{done.evidence()}"
    report = last_json(done.stdout, "Gbps") if done.stdout else None
    if report and isinstance(report.get("Gbps"), int | float) and client.ok:
        found.value = round(float(report["Gbps"]), 3)
    elif not client.ok:
        sent = last_json(client.stdout, "error")
        found.error = f"the sender on {a} failed: {sent['error'] if sent else client.describe()}"
    else:
        reason = (report or {}).get("error") or last_json(done.stdout, "error") or done.describe()
        found.error = f"the receiver on {b} reported no figure: {reason}"
    found.wall_s = time.monotonic() - began
    return found


def measure_ib(ctx: ClusterContext, run: RemoteHosts, a: str, b: str, seconds: float) -> Measured:
    """perftest ib_write_bw, a (client) -> b (server), in duration mode, figures in Gb/s."""
    began = time.monotonic()
    found = Measured(a, b, "ib_write_bw")
    base = ["ib_write_bw", "--report_gbits", "-F", "-D", str(max(1, round(seconds)))]
    server = run.start(b, command(base), seconds + 60)
    # perftest may buffer its "Waiting for client" banner when not on a terminal: a short wait, then
    # the client retries while the server is not listening yet.
    server.wait_for("Waiting for client", 2.0)
    client = None
    for _ in range(IB_CONNECT_ATTEMPTS):
        client = run.run(a, command([*base, address(ctx, b)]), seconds + 30)
        if client.ok or not any(x in client.output for x in ("Couldn't connect", "Unable to connect")):
            break
        time.sleep(1.0)
    assert client is not None
    if not client.ok:
        server.kill()
    done = server.wait(seconds + 30 if client.ok else 5)
    found.evidence = f"{client.evidence()}\n{done.evidence()}"
    found.wall_s = time.monotonic() - began
    try:
        parsed = parse("perftest", client.stdout)
    except ParseError as exc:
        found.error = f"ib_write_bw {a} -> {b}: {client.describe() if not client.ok else exc}"
        return found
    if parsed.get("bw_avg_Gbps") is not None and client.ok:
        found.value = round(float(parsed["bw_avg_Gbps"]), 3)
    else:
        errors = "; ".join(parsed.get("errors") or []) or client.describe()
        found.error = f"ib_write_bw {a} -> {b}: {errors}"
    return found


def measure_round(ctx: ClusterContext, run: RemoteHosts, pairs: Iterable[Pair], plan: Plan,
                  seconds: float) -> list[Measured]:
    """Disjoint pairs, all at once (bounded by --forks)."""
    pairs = list(pairs)
    if not pairs:
        return []
    measure = measure_ib if plan.method == "ib_write_bw" else measure_tcp
    with ThreadPoolExecutor(max_workers=max(1, min(ctx.options.forks, len(pairs))),
                            thread_name_prefix="gpucheck-pair") as pool:
        return list(pool.map(lambda p: measure(ctx, run, p[0], p[1], seconds), pairs))
