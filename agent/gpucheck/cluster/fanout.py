"""Run `gpucheck node --format json` on every host over SSH, a bounded pool at a time, and read what
each answered. Connecting, the host-key policy and the remote timeout are ssh/client.py's.

Every way a host can go wrong becomes that host's NodeOutcome, never an exception out of here:
unreachable or silent, authentication refused or a key file we cannot read, unknown or changed host
key, a hung agent, an agent that is missing, crashed, refused its arguments or printed a report that
is not one (agent_report.py checks its shape)."""

from __future__ import annotations

import shlex
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from ..model import Status
from ..redact import for_terminal
from . import agent_report
from .context import NodeOutcome, Options
from .inventory import Host
from .ssh import client as ssh
from .ssh.result import CUT, TIMEOUT_EXITS, tail

REPORT_STATUS = {0: Status.PASS, 1: Status.WARN, 2: Status.FAIL, 3: Status.ERROR}
# The remote `timeout` normally ends a hung agent first; ours fires this much later as a backstop.
LOCAL_GRACE_S = 2.0
TAIL_CHARS = 2000  # evidence kept per node: a fan-out keeps one per host


def agent_argv(options: Options) -> list[str]:
    """`gpucheck node --format json` as the options ask, with the agent's command on the nodes."""
    try:
        agent = shlex.split(options.remote_command)
    except ValueError as exc:
        raise ValueError(f"--remote-command: {exc}") from None
    if not agent:
        raise ValueError(f"--remote-command is empty ({options.remote_command!r}): give the agent's command on the "
                         "nodes, e.g. gpucheck or /opt/gpucheck/bin/gpucheck")
    argv = [*agent, "node", "--format", "json"]
    if options.profile:
        argv += ["--profile", options.profile]
    if options.node_timeout:
        argv += ["--timeout", f"{options.node_timeout:g}"]
    if options.full:
        argv.append("--full")
    return argv


def build_command(options: Options) -> str:
    """The remote command line; every value is quoted. Under `ssh.limited` (`sh -c`, so any login shell
    runs it, and coreutils `timeout` where the node has it): closing the SSH channel does not end a
    hung agent, its own timeout kills the agent's whole process group."""
    return ssh.limited(ssh.command(agent_argv(options)), options.host_timeout)


def _summary(report: dict[str, Any]) -> str:
    by_status: dict[str, list[str]] = {}
    for result in report["results"]:
        by_status.setdefault(str(result.get("status")), []).append(str(result.get("check")))
    for status in ("fail", "error", "warn"):
        if by_status.get(status):
            checks = by_status[status]
            shown = ", ".join(checks[:6]) + (f" and {len(checks) - 6} more" if len(checks) > 6 else "")
            return f"{len(checks)} {status}: {shown}"
    return f"all {len(report['results'])} checks pass or skip"


def interpret(host: str, stdout: str, stderr: str, exit_code: int | None, wall_s: float,
              host_timeout: float) -> NodeOutcome:
    """Pure: what the remote command's output and exit status say about the node."""
    report = agent_report.find(stdout)
    evidence = tail("\n".join(x for x in (stderr.rstrip(), stdout.rstrip()) if x), TAIL_CHARS)
    if report is not None:
        problem = agent_report.problem(report)
        if problem:
            return NodeOutcome(host, Status.ERROR, f"agent report malformed: {problem}", "malformed", wall_s,
                               exit_code, evidence=evidence)
        return NodeOutcome(host, REPORT_STATUS[report["exit_code"]], for_terminal(_summary(report)), "report",
                           wall_s, exit_code, report, tail(stderr, 500))
    # the reason is one line a terminal shows as it is, whatever the node printed (redact.py)
    last = for_terminal(next((line.strip() for line in reversed(evidence.splitlines()) if line.strip()), ""))
    if exit_code == 127:
        return NodeOutcome(host, Status.ERROR, f"gpucheck agent not found on the node (exit 127): {last}",
                           "agent-missing", wall_s, exit_code, evidence=evidence)
    if exit_code in TIMEOUT_EXITS:
        return NodeOutcome(host, Status.FAIL, f"timed out: no report within {host_timeout:g} s (hung agent?)",
                           "timeout", wall_s, exit_code, evidence=evidence)
    if cut := CUT.search(stdout):  # the report ran past what is kept of a node's output: cut in two, unreadable
        return NodeOutcome(host, Status.ERROR, f"report too large: the agent's output ran over what gpucheck keeps "
                           f"of a node's output ({cut[1]} characters cut), so its report cannot be read",
                           "oversized", wall_s, exit_code, evidence=evidence)
    if exit_code == 3 and "error:" in evidence:
        return NodeOutcome(host, Status.ERROR, f"agent refused the command (exit 3): {last}", "usage", wall_s,
                           exit_code, evidence=evidence)
    return NodeOutcome(host, Status.ERROR, f"agent crashed: exit {exit_code} and no JSON report: {last[:200]}",
                       "agent-crashed", wall_s, exit_code, evidence=evidence)


def collect(host: Host, options: Options, command: str, connections: ssh.Connections | None = None) -> NodeOutcome:
    """One host, start to end. Never raises."""
    from invoke.exceptions import CommandTimedOut

    began = time.monotonic()
    connections = connections or ssh.Connections()
    conn = None
    try:
        conn = ssh.connection(host, options)
        if not connections.add(conn):  # registered before it opens: an interrupt closes a hanging connect too
            return NodeOutcome(host.name, Status.ERROR, "interrupted before it started", "ssh")
        timeout = ssh.connect_timeout(host, options)
        try:
            ssh.open_connection(conn, host, timeout)
        except Exception as exc:
            status, kind, reason = ssh.classify_connect_error(host, exc, timeout)
            return NodeOutcome(host.name, status, reason, kind, time.monotonic() - began)
        try:
            done = conn.run(command, hide=True, warn=True, in_stream=False, pty=False,
                            timeout=options.host_timeout + LOCAL_GRACE_S)
        except CommandTimedOut as exc:
            output = "\n".join(x for x in (exc.result.stderr, exc.result.stdout) if x)
            return NodeOutcome(host.name, Status.FAIL,
                               f"timed out: no report within {options.host_timeout:g} s (hung agent?)", "timeout",
                               time.monotonic() - began, evidence=tail(output, TAIL_CHARS))
        return interpret(host.name, done.stdout, done.stderr, done.exited, time.monotonic() - began,
                         options.host_timeout)
    except Exception as exc:  # a lost connection mid-run, or a bug: this host's result, not the run's end
        reason = "interrupted" if connections.cancelled else f"SSH session failed: {type(exc).__name__}: {exc}"
        return NodeOutcome(host.name, Status.ERROR, reason, "ssh", time.monotonic() - began,
                           evidence=tail(traceback.format_exc(), TAIL_CHARS))
    finally:
        if conn is not None:
            connections.discard(conn)
            ssh.close_quietly(conn)


def fan_out(hosts: Iterable[Host], options: Options,
            on_done: Callable[[NodeOutcome], None] | None = None) -> dict[str, NodeOutcome]:
    """All hosts, `options.forks` at a time; on_done is called (from one thread at a time) as each ends.
    Ctrl-C closes every open connection and returns the outcomes so far (KeyboardInterrupt re-raised)."""
    hosts = list(hosts)
    command = build_command(options)
    outcomes: dict[str, NodeOutcome] = {}
    connections = ssh.Connections()
    lock = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=max(1, min(options.forks, len(hosts) or 1)),
                              thread_name_prefix="gpucheck-ssh")
    try:
        futures = {pool.submit(collect, host, options, command, connections): host for host in hosts}
        for future in as_completed(futures):
            outcome = future.result()
            with lock:
                outcomes[outcome.host] = outcome
                if on_done:
                    on_done(outcome)
    except KeyboardInterrupt:
        connections.close_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
    return {h.name: outcomes[h.name] for h in hosts if h.name in outcomes}
