"""Run one command on one host over SSH (Fabric, with the inventory's key and known_hosts), for the
cluster stages after the fan-out: a benchmark client, an `mpirun` on the launcher node, a file copy.

Nothing here raises: a host that cannot be reached, refuses our key, or a command that overruns is a
`Remote` with `error` set. Every command runs under the node's coreutils `timeout` (when it has one),
so a hung command is killed on the node itself, not only abandoned by us: closing an SSH channel does
not end a process started without a terminal.

`start` runs a command in the background (a benchmark server): the caller waits for a line it prints
(`wait_for`), then for its end (`wait`), or kills it (`kill`: its whole process group on the node).

Commands are shell strings: build them with `command()` (every word quoted with shlex) from argv
lists, never by pasting inventory values into a string."""

from __future__ import annotations

import contextlib
import math
import re
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .context import Options
from .inventory import Host

GRACE_S = 8.0  # the node's own `timeout -k 5` ends the command first; ours fires this much later
TAIL_CHARS = 4000
PID_MARK = "gpucheck-remote-pid"
_PID_LINE = re.compile(rf"^{PID_MARK} (\d+)$", re.M)


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


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def banner_lines(text: str) -> list[str]:
    """What OpenMPI-style output says went wrong: each line printed outside its `----` banners, and
    each banner's first line (its headline), in order; [] when the text has no banner."""
    lines = text.splitlines()
    if not any(line.startswith("-----") for line in lines):
        return []
    out: list[str] = []
    inside, headline = False, False
    for line in lines:
        if line.startswith("-----"):
            inside = not inside
            headline = inside
            continue
        if not line.strip():
            continue
        if headline or not inside:
            if not line.startswith("$ "):
                out.append(line.strip())
            headline = False
    return out


@dataclass
class Remote:
    """What one remote command gave. `error` says why it did not run to its end (connect failure,
    timeout); `exit` is its exit status when it ended."""

    host: str
    command: str
    stdout: str = ""
    stderr: str = ""
    exit: int | None = None
    error: str | None = None
    kind: str = ""  # when error: unreachable | auth | host-key | ssh | timeout | killed | copy
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit == 0

    @property
    def timed_out(self) -> bool:
        return self.kind == "timeout"

    @property
    def output(self) -> str:
        return "\n".join(x.rstrip() for x in (self.stdout, self.stderr) if x.strip())

    def describe(self) -> str:
        """One line: why this did not succeed (or 'exit 0')."""
        if self.error:
            return self.error
        banner = banner_lines(self.output)
        last = "; ".join(banner[:2]) if banner else next(
            (line.strip() for line in reversed(self.output.splitlines()) if any(c.isalnum() for c in line)), "")
        if self.exit == 127:
            return f"command not found (exit 127): {last[:200]}"
        return f"exit {self.exit}" + (f": {last[:200]}" if last else "")

    def evidence(self) -> str:
        head = f"$ {self.command}\n" if self.command else ""
        return head + tail(self.output)


def _open(host: Host, options: Options) -> tuple[Any, Remote | None]:
    """A connected Fabric Connection, or (None, the Remote saying why not)."""
    from . import fanout

    conn = None
    began = time.monotonic()
    try:
        conn = fanout._connection(host, options)
        conn.open()
        return conn, None
    except Exception as exc:
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        _, kind, reason = fanout._connect_error(host, exc, host.connect_timeout or options.connect_timeout)
        return None, Remote(host.name, "", error=f"{host.name}: {reason}", kind=kind,
                            wall_s=time.monotonic() - began)


def _timed_out_exit(exit_code: int | None) -> bool:
    return exit_code in (124, 137)  # coreutils timeout: TERM, then KILL


def run(host: Host, options: Options, cmd: str, timeout: float) -> Remote:
    """Run `cmd` (a shell command line) on `host` within `timeout` seconds. Never raises."""
    from invoke.exceptions import CommandTimedOut

    began = time.monotonic()
    conn, failed = _open(host, options)
    if failed:
        failed.command = cmd
        return failed
    try:
        try:
            done = conn.run(limited(cmd, timeout), hide=True, warn=True, in_stream=False, pty=False,
                            timeout=timeout + GRACE_S)
        except CommandTimedOut as exc:
            return Remote(host.name, cmd, exc.result.stdout, exc.result.stderr, None,
                          f"{host.name}: no answer within {timeout:g} s", "timeout", time.monotonic() - began)
        result = Remote(host.name, cmd, done.stdout, done.stderr, done.exited, wall_s=time.monotonic() - began)
        if _timed_out_exit(done.exited):
            result.error, result.kind = f"{host.name}: did not finish within {timeout:g} s (killed)", "timeout"
        return result
    except Exception as exc:  # the connection dropped mid-command
        return Remote(host.name, cmd, error=f"{host.name}: SSH session failed: {type(exc).__name__}: {exc}",
                      kind="ssh", wall_s=time.monotonic() - began)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


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
    conn, failed = _open(host, options)
    if failed:
        failed.command = what
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
        with contextlib.suppress(Exception):
            conn.close()


class Background:
    """A command started on a host and left running (a benchmark server). Use `start()`."""

    def __init__(self, host: Host, options: Options, cmd: str, timeout: float):
        self.host, self.cmd, self.timeout = host, cmd, timeout
        self.began = time.monotonic()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.lock = threading.Condition()
        self.eof = {"out": False, "err": False}
        self.failed: Remote | None = None
        self.channel: Any = None
        self.killed = False
        self.conn, self.failed = _open(host, options)
        if self.failed:
            self.failed.command = cmd
            return
        try:
            self.channel = self.conn.client.get_transport().open_session()
            self.channel.exec_command(limited(cmd, timeout, announce_pid=True))
        except Exception as exc:
            self.failed = Remote(host.name, cmd, error=f"{host.name}: cannot start the command: "
                                 f"{type(exc).__name__}: {exc}", kind="ssh")
            self.close()
            return
        for stream, reader in (("out", self.channel.recv), ("err", self.channel.recv_stderr)):
            threading.Thread(target=self._pump, args=(stream, reader), daemon=True,
                             name=f"gpucheck-bg-{host.name}-{stream}").start()

    def _pump(self, stream: str, reader: Any) -> None:
        sink = self.stdout if stream == "out" else self.stderr
        while True:
            try:
                data = reader(65536)
            except Exception:
                data = b""
            with self.lock:
                if data:
                    sink.append(data.decode("utf-8", "replace"))
                else:
                    self.eof[stream] = True
                self.lock.notify_all()
            if not data:
                return

    def text(self, stream: str = "out") -> str:
        with self.lock:
            return "".join(self.stdout if stream == "out" else self.stderr)

    def wait_for(self, needle: str, timeout: float) -> bool:
        """True as soon as stdout holds `needle`; False when the command ended or `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                if self.failed:
                    return False
                if needle in "".join(self.stdout):
                    return True
                if self.eof["out"]:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))

    def pid(self) -> int | None:
        found = _PID_LINE.search(self.text("err"))
        return int(found.group(1)) if found else None

    def wait(self, timeout: float | None = None) -> Remote:
        """Wait for the end (at most `timeout`, default what is left of the start's limit); an
        overrunning command is killed. Never raises."""
        if self.failed:
            return self.failed
        left = self.timeout + GRACE_S - (time.monotonic() - self.began)
        limit = max(0.0, left if timeout is None else min(timeout, left))
        ended = self.channel.status_event.wait(limit)
        if not ended:
            self.kill()
            self.channel.status_event.wait(5)
        with self.lock:  # the readers see EOF shortly after the exit status
            deadline = time.monotonic() + 2
            while not all(self.eof.values()) and time.monotonic() < deadline:
                self.lock.wait(0.2)
        stderr = _PID_LINE.sub("", self.text("err")).lstrip("\n")
        result = Remote(self.host.name, self.cmd, self.text("out"), stderr, wall_s=time.monotonic() - self.began)
        if ended:
            result.exit = self.channel.recv_exit_status()
            if _timed_out_exit(result.exit):
                result.error, result.kind = f"{self.host.name}: did not finish within {self.timeout:g} s", "timeout"
            elif self.killed:
                result.error, result.kind = f"{self.host.name}: stopped (its partner had failed)", "killed"
        else:
            result.error, result.kind = f"{self.host.name}: did not finish within {limit:g} s (killed)", "timeout"
        self.close()
        return result

    def kill(self) -> None:
        """End the command's process group on the node (TERM; the node's timeout KILLs 5 s later)."""
        if self.killed or self.failed:
            return
        self.killed = True
        pid = self.pid()
        if pid and self.conn is not None:
            kill = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"
            with contextlib.suppress(Exception):
                self.conn.run(kill, hide=True, warn=True, in_stream=False, pty=False, timeout=15)

    def close(self) -> None:
        for thing in (self.channel, self.conn):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()


def start(host: Host, options: Options, cmd: str, timeout: float) -> Background:
    """Start `cmd` on `host`; it is killed on the node after `timeout` seconds. Never raises (a
    failure to connect or start is kept, and returned by `wait`)."""
    try:
        return Background(host, options, cmd, timeout)
    except Exception as exc:  # a bug, not a host problem: still this host's result
        bg = Background.__new__(Background)
        bg.host, bg.cmd, bg.timeout, bg.began = host, cmd, timeout, time.monotonic()
        bg.stdout, bg.stderr, bg.lock = [], [], threading.Condition()
        bg.eof, bg.channel, bg.conn, bg.killed = {"out": True, "err": True}, None, None, False
        bg.failed = Remote(host.name, cmd, error=f"{host.name}: {type(exc).__name__}: {exc}", kind="ssh")
        return bg


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
