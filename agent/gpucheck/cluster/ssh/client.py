"""The one SSH layer of `gpucheck cluster` (Fabric, with the inventory's user, key and known_hosts):
connecting to a host and saying why that failed (connect.py, its names used from here), the
fan-out's set of open connections, and for the stages after it one command, one file copy or one
background command on one host (a benchmark client, an `mpirun` on the launcher node, a benchmark
server). A command's output is kept within bounds (output.py); what a command gave is a `result.Remote`.

Nothing here raises: a host that cannot be reached, refuses our key, or a command that overruns is a
`Remote` with `error` set. Every command runs under the node's coreutils `timeout` (`limited`, when
the node has it), so a hung command is killed on the node itself, not only abandoned by us: closing
an SSH channel does not end a process started without a terminal.

`start` runs a command in the background (background.Background): the caller waits for a line it
prints (`wait_for`), then for its end (`wait`), or kills it (`kill`: its whole process group).

Commands are shell strings: build them with `command()` (every word quoted with shlex) from argv
lists, never by pasting inventory values into a string."""

from __future__ import annotations

import contextlib
import math
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..context import Options
from ..inventory import Host
from .background import PID_MARK, Background
from .connect import classify_connect_error, connect_timeout, connection, open_connection
from .result import Remote

GRACE_S = 8.0  # the node's own `timeout -k 5` ends the command first; ours fires this much later


def command(argv: Sequence[str | int | float], env: Mapping[str, str] | None = None) -> str:
    """One shell command line from an argv list (and environment), every word quoted."""
    words = [str(w) for w in argv]
    if env:
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *words]
    return shlex.join(words)


def limited(cmd: str, seconds: float, announce_pid: bool = False) -> str:
    """`cmd` (a shell command line) under coreutils `timeout` where the node has it: TERM after
    `seconds`, KILL 5 s later, to the whole process group (timeout makes itself a group leader).
    announce_pid: first print `gpucheck-remote-pid N` on stderr, N being that group's id."""
    limit = max(1, math.ceil(seconds))
    pid = f"echo {PID_MARK} $$ >&2; " if announce_pid else ""
    inner = shlex.quote(cmd)
    script = (f"{pid}if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 {limit} sh -c {inner}; "
              f"else exec sh -c {inner}; fi")
    return f"sh -c {shlex.quote(script)}"


# ---------------------------------------------------------------- open connections


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
            close_quietly(conn)


def close_quietly(thing: Any) -> None:
    """Close a connection or channel that may already be gone."""
    if thing is not None:
        with contextlib.suppress(Exception):
            thing.close()


def _open(host: Host, options: Options, what: str) -> tuple[Any, Remote | None]:
    """A connected Fabric Connection, or (None, the Remote of `what` saying why not)."""
    conn = None
    began = time.monotonic()
    try:
        conn = connection(host, options)
        open_connection(conn, host, connect_timeout(host, options))
        return conn, None
    except Exception as exc:
        close_quietly(conn)
        _, kind, reason = classify_connect_error(host, exc, connect_timeout(host, options))
        return None, Remote(host.name, what, error=f"{host.name}: {reason}", kind=kind,
                            wall_s=time.monotonic() - began)


# ---------------------------------------------------------------- one command, one file


def run(host: Host, options: Options, cmd: str, timeout: float) -> Remote:
    """Run `cmd` (a shell command line) on `host` within `timeout` seconds. Never raises."""
    from invoke.exceptions import CommandTimedOut

    began = time.monotonic()
    conn, failed = _open(host, options, cmd)
    if failed:
        return failed
    try:
        try:
            done = conn.run(limited(cmd, timeout), hide=True, warn=True, in_stream=False, pty=False,
                            timeout=timeout + GRACE_S)
        except CommandTimedOut as exc:
            return Remote(host.name, cmd, exc.result.stdout, exc.result.stderr, None,
                          f"{host.name}: no answer within {timeout:g} s", "timeout", time.monotonic() - began)
        result = Remote(host.name, cmd, done.stdout, done.stderr, done.exited, wall_s=time.monotonic() - began)
        if result.killed_on_node:
            result.error, result.kind = f"{host.name}: did not finish within {timeout:g} s (killed)", "timeout"
        return result
    except Exception as exc:  # the connection dropped mid-command
        return Remote(host.name, cmd, error=f"{host.name}: SSH session failed: {type(exc).__name__}: {exc}",
                      kind="ssh", wall_s=time.monotonic() - began)
    finally:
        close_quietly(conn)


def put(host: Host, options: Options, local: str | Path, remote_dir: str, timeout: float = 60.0,
        mode: int = 0o644) -> Remote:
    """Copy one file into `remote_dir` (created if missing) over SFTP; where the node's sshd has no
    SFTP subsystem, through `cat` on an exec channel. Never raises."""
    began = time.monotonic()
    local = Path(local)
    target = f"{remote_dir.rstrip('/')}/{local.name}"
    what = f"copy {local} -> {host.name}:{target}"
    try:
        data = local.read_bytes()
    except OSError as exc:
        return Remote(host.name, what, error=f"cannot read {local}: {exc.strerror}", kind="copy")
    made = run(host, options, command(["mkdir", "-p", remote_dir]), timeout)
    if not made.ok:
        made.command = what
        return made
    conn, failed = _open(host, options, what)
    if failed:
        return failed
    try:
        try:
            sftp = conn.sftp()
        except Exception:  # no SFTP subsystem: stream it through cat
            sftp = None
        if sftp is not None:
            sftp.get_channel().settimeout(timeout)
            with sftp.open(target, "wb") as out:
                out.write(data)
            sftp.chmod(target, mode)
        else:
            channel = conn.client.get_transport().open_session()
            channel.settimeout(timeout)
            tmp = f"{target}.tmp"
            channel.exec_command(limited(f"cat > {shlex.quote(tmp)} && chmod {mode:o} {shlex.quote(tmp)} && "
                                         f"mv -f {shlex.quote(tmp)} {shlex.quote(target)}", timeout))
            channel.sendall(data)
            channel.shutdown_write()
            status = channel.recv_exit_status()
            if status != 0:
                return Remote(host.name, what, exit=status, error=f"{host.name}: cannot write {target} "
                              f"(exit {status})", kind="copy", wall_s=time.monotonic() - began)
        return Remote(host.name, what, exit=0, wall_s=time.monotonic() - began)
    except Exception as exc:
        return Remote(host.name, what, error=f"{host.name}: cannot copy {local.name} to {target}: "
                      f"{type(exc).__name__}: {exc}", kind="copy", wall_s=time.monotonic() - began)
    finally:
        close_quietly(conn)


def start(host: Host, options: Options, cmd: str, timeout: float) -> Background:
    """Start `cmd` on `host`; it is killed on the node after `timeout` seconds. Never raises (a
    failure to connect or start is kept, and returned by `wait`)."""
    began = time.monotonic()
    conn, failed = _open(host, options, cmd)
    if failed:
        return Background.not_started(failed)
    channel = None
    try:
        channel = conn.client.get_transport().open_session()
        channel.exec_command(limited(cmd, timeout, announce_pid=True))
        return Background(Remote(host.name, cmd), timeout, began, GRACE_S, conn, channel)
    except Exception as exc:
        close_quietly(channel)
        close_quietly(conn)
        return Background.not_started(Remote(host.name, cmd, error=f"{host.name}: cannot start the command: "
                                             f"{type(exc).__name__}: {exc}", kind="ssh"))


class RemoteHosts:
    """The stages' way to reach the nodes by name; tests replace it with a fake of the same shape."""

    def __init__(self, hosts: Sequence[Host], options: Options):
        self.hosts = {h.name: h for h in hosts}
        self.options = options

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def run(self, name: str, cmd: str, timeout: float) -> Remote:
        return run(self.hosts[name], self.options, cmd, timeout)

    def start(self, name: str, cmd: str, timeout: float) -> Background:
        return start(self.hosts[name], self.options, cmd, timeout)

    def put(self, name: str, local: str | Path, remote_dir: str, timeout: float = 60.0) -> Remote:
        return put(self.hosts[name], self.options, local, remote_dir, timeout)
