"""Run a subprocess with a timeout, killing its whole process group when it overruns.

Tools such as mpirun, all_reduce_perf or ib_write_bw fork children; killing only the direct child
would leave them holding GPUs and ports, so each command gets its own session and the group is killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Completed:
    argv: list[str]
    returncode: int | None  # None when timed out or the program could not be started
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    not_found: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + (("\n" + self.stderr) if self.stderr.strip() else "")

    def describe_failure(self) -> str:
        """One line saying why the command did not succeed."""
        name = os.path.basename(self.argv[0]) if self.argv else "command"
        if self.not_found:
            return f"{name} not found on PATH"
        if self.timed_out:
            return f"{name} did not finish within {self.duration_s:.0f} s (killed)"
        last = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
        return f"{name} exited with {self.returncode}: {last[0][:200]}".rstrip(": ")


def which(program: str) -> str | None:
    return shutil.which(program)


def run(
    argv: Sequence[str],
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    input_text: str | None = None,
) -> Completed:
    argv = [str(a) for a in argv]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        return Completed(argv, None, "", str(exc), time.monotonic() - start, not_found=True)
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout)
        return Completed(argv, proc.returncode, out, err, time.monotonic() - start)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # output pipes held by an unkillable grandchild
            out, err = "", ""
        return Completed(argv, None, out or "", err or "", time.monotonic() - start, timed_out=True)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


class CallTimeout(Exception):
    """An in-process call (e.g. NVML) did not return in time; the thread is abandoned."""


def call_with_timeout(fn: Callable[..., T], timeout: float, *args: Any) -> T:
    """Run fn in a daemon thread. A hung C call cannot be interrupted, only abandoned."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=getattr(fn, "__name__", "call"))
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise CallTimeout(f"did not return within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def start(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen | None:
    """Start a background helper (e.g. a benchmark server) in its own process group; None if missing."""
    try:
        return subprocess.Popen(
            [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", env=env, start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        return None


def finish(proc: subprocess.Popen, timeout: float) -> Completed:
    """Wait for a started process; kill its group when it overruns."""
    start_time = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
        return Completed(list(proc.args), proc.returncode, out, err, time.monotonic() - start_time)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return Completed(list(proc.args), None, out or "", err or "", time.monotonic() - start_time, timed_out=True)
