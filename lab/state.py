"""What the lab has created, recorded as it is created, so `down` can undo it even after a crash.

The state is one JSON file under /run/gpucheck-lab (config.RUN_DIR). Every command that changes the lab holds an
exclusive lock (flock) for its whole run, so two `up`s cannot interleave.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lab import config
from lab.errors import LabError
from lab.progress import say


@dataclass
class HostState:
    name: str
    address: str
    netns: str
    veth: str
    scenario: str
    pid: int | None = None  # the host's supervisor (hostinit.py), whose systemd-nspawn boots its systemd
    role: str = "node"  # node (simulated GPUs) | admin (none)
    faults: list[str] = field(default_factory=list)
    ib_ports: int = 0  # simulated InfiniBand ports in its fake sysfs (lab/ib_ports.py)


@dataclass
class LabState:
    subnet: str
    bridge: str
    bridge_address: str
    started_at: float = field(default_factory=time.time)
    phase: str = "starting"  # starting -> up
    image: str = "base"  # "base" or "golden <key>"
    lowers: list[str] = field(default_factory=list)  # overlay lower dirs, top first
    bridge_created: bool = False
    netns_dir_mounted_by_lab: bool = False
    proxy_pid: int | None = None
    proxy_url: str = ""
    allowed_hosts: list[str] = field(default_factory=list)
    nvidia_repo_pid: int | None = None  # the stand-in NVIDIA repository's server (lab/standin_repo.py)
    nvidia_repo_url: str = ""
    nvidia_repo_fingerprint: str = ""
    hosts: list[HostState] = field(default_factory=list)
    slurm_client_pid: int | None = None  # this machine's munged for the lab's Slurm (lab/slurm.py)
    kubernetes_server: str = ""  # the lab's Kubernetes apiserver, when up --kubernetes (lab/kubernetes/lab_plane.py)

    def host(self, name_or_address: str) -> HostState:
        for host in self.hosts:
            if name_or_address in (host.name, host.address):
                return host
        names = ", ".join(h.name for h in self.hosts)
        raise LabError(f"no lab host named {name_or_address!r} (the lab has: {names})")


def load(path: Path = config.STATE_FILE) -> LabState | None:
    """The recorded lab, or None when no lab was recorded."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"cannot read the lab state {path}: {exc} (remove it and run `python3 -m lab down`)") \
            from exc
    hosts = [HostState(**h) for h in raw.pop("hosts", [])]
    known = {f.name for f in dataclasses.fields(LabState)}
    return LabState(**{k: v for k, v in raw.items() if k in known}, hosts=hosts)


def save(state: LabState, path: Path = config.STATE_FILE) -> None:
    """Write the state atomically (a crash leaves the old or the new file, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(state), indent=2) + "\n")
    os.replace(tmp, path)


def remove(path: Path = config.STATE_FILE) -> None:
    path.unlink(missing_ok=True)


@contextmanager
def locked(path: Path = config.LOCK_FILE) -> Iterator[None]:
    """Hold the lab's lock; refuse at once (one line) if another lab command holds it."""
    if config.INSTANCE_ERROR:
        raise LabError(config.INSTANCE_ERROR)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LabError("another `python3 -m lab` command is changing the lab right now; wait for it") from exc
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_up() -> LabState:
    """The state of the lab that is up, or a LabError saying none is."""
    st = load()
    if st is None:
        raise LabError("no lab is up: start one with `python3 -m lab up --hosts 3`")
    return st


@contextmanager
def cache_locked(name: str, waiting: str) -> Iterator[None]:
    """Hold the machine's lock NAME on the shared cache (every lab instance builds the same base and golden
    images): a second builder waits, saying WAITING once, and then finds the first one's result."""
    config.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(config.CACHE_DIR / f"{name}.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(waiting)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cache_lock_held(name: str) -> bool:
    """Whether a builder holds the machine's lock NAME right now (its half-built result is not a leftover)."""
    path = config.CACHE_DIR / f"{name}.lock"
    if not path.exists():
        return False
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False
