"""Lab processes: start them detached and tagged, find them again, end them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lab import config
from lab.errors import LabError


def spawn(cmd: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """Start cmd in its own session (a Ctrl-C on `up` does not reach it), output appended to log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, cwd="/",
        )


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_lab_process(pid: int | None) -> bool:
    """True when pid is alive and carries the lab's tag (so a reused pid is never signalled)."""
    return bool(pid) and config.TAG in cmdline(pid)  # type: ignore[arg-type]


def matching(wanted: Callable[[list[str]], bool]) -> list[int]:
    """Every process of this machine (but this one) whose command line WANTED accepts."""
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and wanted(cmdline(int(entry))):
            pids.append(int(entry))
    return pids


def tagged() -> list[int]:
    """Every process of this machine started by the lab (its command line carries the tag)."""
    return matching(lambda argv: config.TAG in argv)


def boots_a_host(argv: list[str], within: str = f"{config.RUN_DIR}/") -> bool:
    """Whether argv is a systemd-nspawn booting a lab host whose files are under `within` (this instance's run
    directory; "/run/gpucheck-lab": any instance's). They carry no tag: their argv is systemd-nspawn's own."""
    return bool(argv) and argv[0].endswith("systemd-nspawn") and any(within in a for a in argv)


def host_boots() -> list[int]:
    """Every systemd-nspawn booting one of this instance's lab hosts."""
    return matching(boots_a_host)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def signal_pid(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait until none of pids exists (reaping our own children); return those still there."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    left.remove(pid)
                    continue
            except ChildProcessError:
                pass
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                left.remove(pid)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return left


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def end(pids: Sequence[int], grace: float = 3.0) -> None:
    """SIGTERM, wait up to grace seconds, then SIGKILL what is left."""
    live = [p for p in pids if signal_pid(p, signal.SIGTERM)]
    left = wait_gone(live, grace)
    for pid in left:
        signal_pid(pid, signal.SIGKILL)
    wait_gone(left, 2.0)


def port_answers(address: str, port: int, banner: bytes | None = None, timeout: float = 1.0) -> bool:
    """True if address:port accepts a TCP connection (and, if given, starts with banner)."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            if banner is None:
                return True
            sock.settimeout(timeout)
            return sock.recv(len(banner)) == banner
    except OSError:
        return False


def wait_serving(proc: subprocess.Popen[bytes], address: str, port: int, what: str, log: Path,
                 timeout: float = 10.0) -> None:
    """Wait until the server PROC just started answers on address:port; else one error naming WHAT and its log."""
    deadline = time.monotonic() + timeout
    while not port_answers(address, port, timeout=0.3):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise LabError(f"{what} did not start; see {log}")
        time.sleep(0.05)
