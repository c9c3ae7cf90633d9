"""A command left running on a host (a benchmark server), followed over its open SSH channel: two
threads read its stdout and stderr as they come, so the caller can wait for a line it prints
(`wait_for`), then for its end (`wait`), or end it on the node (`kill`: its whole process group).

`ssh.start` connects and starts the command; this module only follows it. It fills in the `Remote`
that `ssh.start` hands it."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from typing import Any

from .result import Remote

# `ssh.limited(..., announce_pid=True)` prints this first on stderr, with the command's process group
PID_MARK = "gpucheck-remote-pid"
PID_LINE = re.compile(rf"^{PID_MARK} (\d+)$", re.M)


class Background:
    """A command started on a host and left running. Made by `ssh.start`; one that could not start
    is `Background.not_started(why)`, and every method then answers as for a command that ended."""

    def __init__(self, result: Remote, timeout: float, began: float, grace_s: float, conn: Any, channel: Any):
        """`result` names the host and the command (`wait` returns a copy with the outcome); it runs on
        `channel` of `conn` and the node kills it after `timeout` s; `wait` gives up `grace_s` later."""
        self.result, self.timeout, self.began, self.grace_s = result, timeout, began, grace_s
        self.conn, self.channel = conn, channel
        self.failure: Remote | None = None
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.lock = threading.Condition()
        self.eof = {"out": channel is None, "err": channel is None}
        self.killed = False
        if channel is not None:
            for stream, reader in (("out", channel.recv), ("err", channel.recv_stderr)):
                threading.Thread(target=self._pump, args=(stream, reader), daemon=True,
                                 name=f"gpucheck-bg-{result.host}-{stream}").start()

    @classmethod
    def not_started(cls, why: Remote) -> Background:
        """A command that never ran: `why` (its error set) is what `wait` returns."""
        background = cls(why, 0.0, time.monotonic(), 0.0, None, None)
        background.failure = why
        return background

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
                if self.failure:
                    return False
                if needle in "".join(self.stdout):
                    return True
                if self.eof["out"]:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))

    def pid(self, timeout: float = 0.0) -> int | None:
        """The command's process group on the node, from the line it printed first on stderr; waits up to
        `timeout` s for that line (the two streams are read apart: stdout's lines can be here first)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                found = PID_LINE.search("".join(self.stderr))
                left = deadline - time.monotonic()
                if found or self.eof["err"] or left <= 0:
                    return int(found.group(1)) if found else None
                self.lock.wait(min(left, 0.5))

    def wait(self, timeout: float | None = None) -> Remote:
        """Wait for the end (at most `timeout`, default what is left of the start's limit); an
        overrunning command is killed. Never raises."""
        if self.failure:
            return self.failure
        left = self.timeout + self.grace_s - (time.monotonic() - self.began)
        limit = max(0.0, left if timeout is None else min(timeout, left))
        ended = self.channel.status_event.wait(limit)
        if not ended:
            self.kill()
            self.channel.status_event.wait(5)
        with self.lock:  # the readers see EOF shortly after the exit status
            deadline = time.monotonic() + 2
            while not all(self.eof.values()) and time.monotonic() < deadline:
                self.lock.wait(0.2)
        host = self.result.host
        result = dataclasses.replace(self.result, stdout=self.text("out"), wall_s=time.monotonic() - self.began,
                                     stderr=PID_LINE.sub("", self.text("err")).lstrip("\n"))
        if ended:
            result.exit = self.channel.recv_exit_status()
            if result.killed_on_node:
                result.error, result.kind = f"{host}: did not finish within {self.timeout:g} s", "timeout"
            elif self.killed:
                result.error, result.kind = f"{host}: stopped (its partner had failed)", "killed"
        else:
            result.error, result.kind = f"{host}: did not finish within {limit:g} s (killed)", "timeout"
        self.close()
        return result

    def kill(self) -> None:
        """End the command's process group on the node (TERM; the node's timeout KILLs 5 s later)."""
        if self.killed or self.failure:
            return
        self.killed = True
        pid = self.pid(timeout=5)
        if pid and self.conn is not None:
            kill = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"
            with contextlib.suppress(Exception):
                self.conn.run(kill, hide=True, warn=True, in_stream=False, pty=False, timeout=15)

    def close(self) -> None:
        for thing in (self.channel, self.conn):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
