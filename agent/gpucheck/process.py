"""Run a subprocess with a timeout, killing its whole process group when it overruns.

Tools such as mpirun, all_reduce_perf or ib_write_bw fork children; killing only the direct child
would leave them holding GPUs and ports, so each command gets its own session and the group is killed.
Being in its own session, a child does not get the signals sent to the agent's group (coreutils
`timeout`, Ctrl-C): every child still running is kept here, and `children_end_with_command` kills
their groups when the command ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_live: dict[int, subprocess.Popen] = {}  # the children started and not yet waited for, by pid (= group id)
_live_lock = threading.Lock()
_ending = [False]  # set once the command ends: a thread it left behind starts no new child


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
        proc = _spawn(argv, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL, env=env,
                      cwd=cwd)
    except (FileNotFoundError, PermissionError, NotADirectoryError, Ending) as exc:
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
    finally:
        _forget(proc)


class Ending(OSError):
    """The command is ending: no new child is started (a thread it abandoned may still try)."""


def _spawn(argv: list[str], **options: Any) -> subprocess.Popen:
    """Popen in a new session, kept in `_live` until `_forget`. Started and kept under one lock, so that
    `end_children` either sees the child or the child is never started."""
    with _live_lock:
        if _ending[0]:
            raise Ending(f"not started: {os.path.basename(argv[0])}: the command is ending")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True, **options)
        _live[proc.pid] = proc
    return proc


def _forget(proc: subprocess.Popen) -> None:
    with _live_lock:
        _live.pop(proc.pid, None)


def end_children() -> int:
    """Kill the group of every child still running, start no new one; how many there were."""
    with _live_lock:
        _ending[0] = True
        live = list(_live.values())
        _live.clear()
    for proc in live:
        kill_group(proc)
    ends = time.monotonic() + 1  # reaped here, so that none lingers as a zombie of an agent about to exit; a
    for proc in live:  # child stuck in the kernel cannot die yet: not waited for beyond a second in all
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(ends - time.monotonic(), 0.01))
    return len(live)


class Stopped(KeyboardInterrupt):
    """The agent was asked to stop (SIGTERM from `timeout` or a scheduler, SIGHUP, SIGINT)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def children_end_with_command() -> Iterator[None]:
    """For the length of one command: SIGTERM, SIGHUP and SIGINT raise Stopped in the main thread (a second
    one is ignored while the command ends), and on the way out, however the command ends, every child
    still running is killed with its whole group and no new one is started."""
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: Any) -> None:
        ignore()
        raise Stopped(signum)

    def ignore() -> None:
        for number in previous:
            signal.signal(number, signal.SIG_IGN)

    _ending[0] = False
    if threading.current_thread() is threading.main_thread():
        previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        ignore()  # nothing interrupts the ending of the children
        end_children()
        for number, handler in previous.items():
            signal.signal(number, handler)


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
        return _spawn([str(a) for a in argv], stdin=subprocess.DEVNULL, env=env)
    except (FileNotFoundError, PermissionError, NotADirectoryError, Ending):
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
    finally:
        _forget(proc)
