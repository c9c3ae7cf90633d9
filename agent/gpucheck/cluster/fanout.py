"""Run `gpucheck node --format json` on every host over SSH (Fabric), a bounded pool at a time.

Every way a host can go wrong becomes that host's NodeOutcome, never an exception out of here:
unreachable, authentication refused, unknown or changed host key, a hung agent, an agent that is
missing, crashed or refused its arguments."""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from ..model import Status
from .context import NodeOutcome, Options
from .inventory import Host

REPORT_STATUS = {0: Status.PASS, 1: Status.WARN, 2: Status.FAIL, 3: Status.ERROR}
# The remote `timeout` normally ends a hung agent first; ours fires this much later as a backstop.
LOCAL_GRACE_S = 2.0
TAIL_CHARS = 2000


def build_command(options: Options) -> str:
    """The remote command line; every value is quoted. Wrapped in `sh -c` so any login shell runs it,
    and in coreutils `timeout` where the node has it: closing the SSH channel does not end a hung
    agent, its own timeout kills the agent's whole process group."""
    try:
        agent = shlex.split(options.remote_command)
    except ValueError as exc:
        raise ValueError(f"--remote-command: {exc}") from None
    argv = [*agent, "node", "--format", "json"]
    if options.profile:
        argv += ["--profile", options.profile]
    if options.node_timeout:
        argv += ["--timeout", f"{options.node_timeout:g}"]
    if options.full:
        argv.append("--full")
    command = shlex.join(argv)
    limit = max(1, math.ceil(options.host_timeout))
    script = (f"if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 {limit} {command}; "
              f"else exec {command}; fi")
    return f"sh -c {shlex.quote(script)}"


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _report_from(stdout: str) -> dict[str, Any] | None:
    """The node's JSON report; tolerates lines printed before it (a login banner, a warning)."""
    text = stdout.strip()
    candidates = [text] + [text[i + 1:] for i in range(len(text)) if text[i] == "\n" and text[i + 1:i + 2] == "{"]
    for candidate in candidates:
        try:
            report = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("results"), list) and "exit_code" in report:
            return report
    return None


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
    report = _report_from(stdout)
    if report is not None:
        status = REPORT_STATUS.get(report.get("exit_code"), Status.ERROR)
        return NodeOutcome(host, status, _summary(report), "report", wall_s, exit_code, report,
                           tail(stderr, 500))
    evidence = tail("\n".join(x for x in (stderr.rstrip(), stdout.rstrip()) if x))
    last = next((line.strip() for line in reversed(evidence.splitlines()) if line.strip()), "")
    if exit_code == 127:
        return NodeOutcome(host, Status.ERROR, f"gpucheck agent not found on the node (exit 127): {last}",
                           "agent-missing", wall_s, exit_code, evidence=evidence)
    if exit_code in (124, 137):  # coreutils timeout: TERM, then KILL
        return NodeOutcome(host, Status.FAIL, f"timed out: no report within {host_timeout:g} s (hung agent?)",
                           "timeout", wall_s, exit_code, evidence=evidence)
    if exit_code == 3 and "error:" in evidence:
        return NodeOutcome(host, Status.ERROR, f"agent refused the command (exit 3): {last}", "usage", wall_s,
                           exit_code, evidence=evidence)
    return NodeOutcome(host, Status.ERROR, f"agent crashed: exit {exit_code} and no JSON report: {last[:200]}",
                       "agent-crashed", wall_s, exit_code, evidence=evidence)


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: Any):
        super().__init__(f"{hostname} {key.get_name()} {key.get_base64()[:16]}...")
        self.hostname = hostname
        self.key = key


def _policies() -> tuple[Any, Any]:
    from paramiko import MissingHostKeyPolicy

    class RefuseUnknown(MissingHostKeyPolicy):
        """Unknown host: refused, and never written anywhere (no AutoAdd)."""

        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    class AcceptUnknownOnce(MissingHostKeyPolicy):
        """StrictHostKeyChecking=no: this connection only; nothing is saved. Changed keys stay refused
        (paramiko raises BadHostKeyException before asking a policy)."""

    return RefuseUnknown(), AcceptUnknownOnce()


REFUSE_UNKNOWN, ACCEPT_UNKNOWN_ONCE = _policies()


def _connect_error(host: Host, exc: BaseException, timeout: float) -> tuple[Status, str, str]:
    """(status, kind, reason) for an exception raised while connecting."""
    from paramiko.ssh_exception import (
        AuthenticationException,
        BadHostKeyException,
        NoValidConnectionsError,
        PasswordRequiredException,
        SSHException,
    )

    where = f"{host.address}:{host.port}"
    if isinstance(exc, UnknownHostKey):
        return (Status.ERROR, "host-key",
                f"host key of {exc.hostname} is not in known_hosts ({', '.join(host.known_hosts) or 'none'}): "
                "refused, not added; check its fingerprint and add it (ssh-keyscan)")
    if isinstance(exc, BadHostKeyException):
        return (Status.ERROR, "host-key", f"host key of {where} does not match known_hosts (reinstalled node, "
                "or someone in the middle): refused")
    if isinstance(exc, PasswordRequiredException):
        return Status.ERROR, "auth", f"key file {host.key_file} needs a passphrase: use ssh-agent"
    if isinstance(exc, AuthenticationException):
        key = f" with key {host.key_file}" if host.key_file else ""
        return Status.ERROR, "auth", f"authentication failed as {host.user}@{where}{key}: {exc}"
    if isinstance(exc, NoValidConnectionsError):
        errors = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()}))
        return Status.FAIL, "unreachable", f"unreachable: {where}: {errors.lower()}"
    if isinstance(exc, socket.gaierror):
        return Status.FAIL, "unreachable", f"unreachable: cannot resolve {host.address}: {exc.strerror}"
    if isinstance(exc, TimeoutError):
        return Status.FAIL, "unreachable", f"unreachable: {where}: no answer within {timeout:g} s"
    if isinstance(exc, SSHException | EOFError):
        return Status.ERROR, "ssh", f"SSH handshake with {where} failed: {exc or type(exc).__name__}"
    if isinstance(exc, OSError):
        return Status.FAIL, "unreachable", f"unreachable: {where}: {(exc.strerror or str(exc)).lower()}"
    return Status.ERROR, "ssh", f"cannot connect to {where}: {type(exc).__name__}: {exc}"


class Connections:
    """The open connections, so an interrupted run can close them all (their reads then return)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: set[Any] = set()
        self.cancelled = False

    def add(self, conn: Any) -> bool:
        with self.lock:
            if self.cancelled:
                return False
            self.open.add(conn)
            return True

    def discard(self, conn: Any) -> None:
        with self.lock:
            self.open.discard(conn)

    def close_all(self) -> None:
        with self.lock:
            self.cancelled = True
            conns = list(self.open)
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()


def _connection(host: Host, options: Options) -> Any:
    from fabric import Connection

    timeout = host.connect_timeout or options.connect_timeout
    kwargs: dict[str, Any] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if host.key_file:
        # the inventory names the key: use it (and the agent), not every key in ~/.ssh
        kwargs.update(key_filename=host.key_file, look_for_keys=False)
    conn = Connection(host.address, user=host.user, port=host.port, connect_timeout=max(1, math.ceil(timeout)),
                      connect_kwargs=kwargs, gateway=host.proxy_command)
    conn.client.set_missing_host_key_policy(REFUSE_UNKNOWN if host.strict_host_key_checking
                                            else ACCEPT_UNKNOWN_ONCE)
    for path in host.known_hosts:
        with contextlib.suppress(OSError):  # a missing known_hosts file is no key, as for ssh
            conn.client.load_system_host_keys(path)  # read-only: never saved back
    return conn


def collect(host: Host, options: Options, command: str, connections: Connections | None = None) -> NodeOutcome:
    """One host, start to end. Never raises."""
    from invoke.exceptions import CommandTimedOut

    began = time.monotonic()
    connections = connections or Connections()
    conn = None
    try:
        conn = _connection(host, options)
        if not connections.add(conn):
            return NodeOutcome(host.name, Status.ERROR, "interrupted before it started", "ssh")
        try:
            conn.open()
        except Exception as exc:
            status, kind, reason = _connect_error(host, exc, host.connect_timeout or options.connect_timeout)
            return NodeOutcome(host.name, status, reason, kind, time.monotonic() - began)
        try:
            done = conn.run(command, hide=True, warn=True, in_stream=False, pty=False,
                            timeout=options.host_timeout + LOCAL_GRACE_S)
        except CommandTimedOut as exc:
            output = "\n".join(x for x in (exc.result.stderr, exc.result.stdout) if x)
            return NodeOutcome(host.name, Status.FAIL,
                               f"timed out: no report within {options.host_timeout:g} s (hung agent?)", "timeout",
                               time.monotonic() - began, evidence=tail(output))
        return interpret(host.name, done.stdout, done.stderr, done.exited, time.monotonic() - began,
                         options.host_timeout)
    except Exception as exc:  # a lost connection mid-run, or a bug: this host's result, not the run's end
        reason = "interrupted" if connections.cancelled else f"SSH session failed: {type(exc).__name__}: {exc}"
        return NodeOutcome(host.name, Status.ERROR, reason, "ssh", time.monotonic() - began,
                           evidence=tail(traceback.format_exc()))
    finally:
        if conn is not None:
            connections.discard(conn)
            with contextlib.suppress(Exception):
                conn.close()


def fan_out(hosts: Iterable[Host], options: Options,
            on_done: Callable[[NodeOutcome], None] | None = None) -> dict[str, NodeOutcome]:
    """All hosts, `options.forks` at a time; on_done is called (from one thread at a time) as each ends.
    Ctrl-C closes every open connection and returns the outcomes so far (KeyboardInterrupt re-raised)."""
    hosts = list(hosts)
    command = build_command(options)
    outcomes: dict[str, NodeOutcome] = {}
    connections = Connections()
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
