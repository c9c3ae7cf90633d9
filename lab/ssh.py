"""Reaching a lab host over SSH as root, with the lab's key and known_hosts (strict host key checking)."""

from __future__ import annotations

from lab import config
from lab.run import run


def ssh_argv(address: str, *, batch: bool = True) -> list[str]:
    """ssh to a lab host as root with the lab's key and known_hosts (strict host key checking)."""
    argv = [
        "ssh", "-i", str(config.KEY_FILE), "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={config.KNOWN_HOSTS}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
    ]
    if batch:
        argv += ["-o", "BatchMode=yes"]
    return [*argv, f"root@{address}"]


def ssh_run(address: str, command: str, timeout: float = 60, stdin: str | None = None):
    """Run command on a lab host over SSH (never raises for a non-zero exit)."""
    return run([*ssh_argv(address), command], timeout=timeout, check=False, input=stdin)
