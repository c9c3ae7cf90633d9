"""Helpers of the lab's tests: run the lab CLI, ssh into hosts, read the inventory, find leftovers."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from lab import config, procs
from support import starting

REPO = Path(__file__).resolve().parents[1]
# This process's lab instance (tests/conftest.py gives each xdist worker its own): its places and names.
RUN_DIR, KEY, KNOWN_HOSTS = config.RUN_DIR, config.KEY_FILE, config.KNOWN_HOSTS
INVENTORY, TAG = config.INVENTORY, config.TAG
# The session lab: three hosts, each with different simulated GPUs (2, 8 and 7 of them), so a
# host that saw another host's GPUs (or the controller's) would show up as a wrong count.
SCENARIOS = {"node01": ("lab", 2), "node02": ("dgx-h100", 8), "node03": ("seven-of-eight", 7)}


def lab_cli(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python3 -m lab ARGS` from the repository root, as a user would run it."""
    if args[:1] in (("up",), ("build",), ("demo",)):
        starting("the lab", "lab")
    proc = subprocess.run([sys.executable, "-m", "lab", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"python3 -m lab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def ssh_argv(address: str) -> list[str]:
    """Plain OpenSSH with the lab's key and known_hosts, strict host key checking (never disabled)."""
    return ["ssh", "-i", str(KEY), "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={KNOWN_HOSTS}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5", f"root@{address}"]


@dataclass
class Lab:
    hosts: dict[str, str]  # name -> address

    def ssh(self, name: str, command: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*ssh_argv(self.hosts[name]), command], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"on {name}: {command!r} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc


def read_inventory() -> dict[str, str]:
    doc = yaml.safe_load(INVENTORY.read_text())
    hosts = doc["all"]["children"]["gpu_nodes"]["hosts"]
    return {name: v["ansible_host"] for name, v in hosts.items()}


def ci() -> bool:
    """A CI run: the CI variable set to a true value ("true", "1", "yes"; unset, "", "0", "false", "no", "off": not)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def lab_unavailable(reason: str) -> NoReturn:
    """The lab cannot run here: a skip on a developer's machine, a failure under CI, which must produce the
    end-to-end evidence (CI runs as root on a machine with no other lab)."""
    if ci():
        pytest.fail(f"the lab tests cannot run, and under CI (CI={os.environ.get('CI')}) they must: {reason}",
                    pytrace=False)
    pytest.skip(reason)


def require_root() -> None:
    if os.geteuid() != 0:
        lab_unavailable("the lab needs root (network namespaces, mounts)")


def lab_is_up() -> bool:
    return config.STATE_FILE.exists()


def argv_of(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:
        return []


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def whose(words: list[str]) -> bool | None:
    """True: a process of this instance's lab (its tag, or a systemd-nspawn booting from its run directory);
    False: another instance's; None: neither says."""
    if TAG in words or procs.boots_a_host(words):
        return True
    if any(w.startswith("--gpucheck-lab") for w in words) or procs.boots_a_host(words, "/run/gpucheck-lab"):
        return False
    return None


def ours(pid: int) -> bool:
    """Whether a process of a lab host (its sshd, a process a test left there) is this instance's: its nearest
    ancestor that says; one that none claims is an orphan of some lab, and counts."""
    while pid > 1:
        claimed = whose(argv_of(pid))
        if claimed is not None:
            return claimed
        pid = parent_of(pid)
    return True


def leftovers() -> list[str]:
    """Everything of this instance's lab still on this machine: namespaces, links, mounts, processes, inventory
    (another instance's lab, up beside it, is not a leftover of this one)."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith(config.PREFIX + "-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30).stdout
    found += [f"link {name}" for name in (line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
              if name.startswith(config.PREFIX)]
    for line in Path("/proc/mounts").read_text().splitlines():
        places = (f"{RUN_DIR}/", f" {RUN_DIR} ", f"{config.DATA_DIR}/", f" {config.DATA_DIR} ", f"/{config.PREFIX}-")
        if any(place in line for place in places):
            found.append(f"mount {line}")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        words = argv_of(int(pid))
        if not words or not words[0]:
            continue
        lab_host_process = ("sshd: /usr/sbin/sshd -D -e -f /etc/gpucheck-lab/sshd_config" in " ".join(words)
                            or "4321.5" in words)
        if whose(words) or (lab_host_process and ours(int(pid))):
            found.append(f"process {pid}: {shlex.join(words)}")
    if INVENTORY.exists():
        found.append(f"file {INVENTORY}")
    return found


class LabSession:
    """One 3-host lab for the whole session, brought up on first use; tests that need the machine
    without a lab (lifecycle, golden image) take it down, and the next user brings it back."""

    def __init__(self) -> None:
        self.lab: Lab | None = None

    def ensure_up(self) -> Lab:
        if self.lab is None or not lab_is_up():
            if lab_is_up():
                lab_cli("down")
            scenarios = ",".join(s for s, _ in SCENARIOS.values())
            lab_cli("up", "--hosts", "3", "--scenarios", scenarios, "--no-golden", "--ib-ports", "2", timeout=900)
            self.lab = Lab(read_inventory())
        return self.lab

    def ensure_down(self) -> None:
        lab_cli("down")
        self.lab = None


def debian12_with_apt_bindings() -> bool:
    """Root on Debian 12 with what Ansible's apt and pip modules need on the target (`make deps` installs
    them from tests/apt-packages.txt): the roles can run here for real, against localhost."""
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        return False
    if "ID=debian" not in release or 'VERSION_ID="12"' not in release or os.geteuid() != 0:
        return False
    probe = subprocess.run(["/usr/bin/python3", "-c", "import apt, apt_pkg, packaging"], capture_output=True,
                           check=False)
    return probe.returncode == 0
