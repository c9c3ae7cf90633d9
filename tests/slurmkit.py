"""A real one-node Slurm cluster on this machine for the tests: munged, slurmctld and slurmd from Debian's
packages (slurm-wlm 22.05, munge 0.5), each started directly (no init system), on ports of its own and with
every file under one temporary directory, so it neither needs nor disturbs a Slurm the machine may run.

The node is NodeName=gpu-a with NodeHostname set to this machine's host name (how `gpucheck node --slurm`
finds its own NodeName), NodeAddr 127.0.0.1. Clients find it through SLURM_CONF (`cluster.env`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NODE = "gpu-a"
DAEMONS = ("munged", "slurmctld", "slurmd", "scontrol")


def missing() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """\
ClusterName=gpucheck-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={dir}/run/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
RebootProgram=/bin/true
SlurmdTimeout=300
SelectType=select/cons_tres
NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
{others}PartitionName=batch Nodes=ALL Default=YES State=UP
"""


@dataclass
class SlurmCluster:
    dir: Path

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                              env={**os.environ, **self.env})

    def state(self, node: str = NODE) -> tuple[str, str]:
        """(State, Reason without its [user@time]) as scontrol shows them."""
        text = self.scontrol("show", "node", node).stdout
        state = re.search(r"\bState=(\S+)", text).group(1)
        reason = next((line.strip().removeprefix("Reason=") for line in text.splitlines()
                       if line.strip().startswith("Reason=")), "")
        return state, re.sub(r"\s*\[[^\]]*\]$", "", reason)

    def set(self, node: str = NODE, **fields: str) -> None:
        done = self.scontrol("update", f"nodename={node}", *(f"{k}={v}" for k, v in fields.items()))
        assert done.returncode == 0, done.stderr

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((self.dir / "log").glob("*.log")))


def start(directory: Path, others: tuple[str, ...] = ()) -> SlurmCluster:
    """munged, then slurmctld, then slurmd; returns once the node is up (IDLE) in slurmctld's view. `others`
    are more nodes in slurm.conf with no slurmd behind them (not responding: they can still be drained, and
`scontrol reboot` leaves one in REBOOT_REQUESTED, since nothing answers: RebootProgram is set
only so that slurmctld accepts the request)."""
    for sub in ("run", "log", "state", "spool"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    (directory / "run").chmod(0o755)  # munge's socket: any local user may ask (the no-permission test is one)
    key = directory / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    cluster = SlurmCluster(directory)
    # All of 127/8 is loopback: on slurmd's own port, a ping to another node would reach gpu-a's slurmd, which
    # answers it, and ReturnToService=2 would put that node back in service (an admin's DOWN undone mid-test).
    dead_port = free_port()
    cluster.conf.write_text(CONF.format(dir=directory, node=NODE, hostname=socket.gethostname(),
                                        ctld_port=free_port(), slurmd_port=free_port(),
                                        others="".join(f"NodeName={n} NodeAddr=127.0.0.{i + 2} Port={dead_port} "
                                                       "CPUs=1\n" for i, n in enumerate(others))))
    env = {**os.environ, **cluster.env}
    subprocess.run(["munged", "--force", f"--socket={directory}/run/munge.sock", f"--key-file={key}",
                    f"--log-file={directory}/log/munged.log", f"--pid-file={directory}/run/munged.pid",
                    f"--seed-file={directory}/run/munged.seed"], check=True, timeout=30)
    subprocess.run(["slurmctld"], check=True, timeout=30, env=env)
    subprocess.run(["slurmd", "-N", NODE], check=True, timeout=30, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cluster.scontrol("show", "node", NODE).stdout.count("State=IDLE") == 1:
            return cluster
        time.sleep(0.5)
    stop(cluster)
    raise RuntimeError(f"the test Slurm did not come up:\n{cluster.log()}")


def stop(cluster: SlurmCluster) -> None:
    for pidfile in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
        path = cluster.dir / "run" / pidfile
        try:
            os.kill(int(path.read_text().split()[0]), 15)
        except (OSError, ValueError):
            continue
    time.sleep(0.5)


@contextlib.contextmanager
def running(directory: Path, others: tuple[str, ...] = ()) -> Iterator[SlurmCluster]:
    """A test module's Slurm: started, then stopped however the module ends. Without root or the daemons it is
    a skip on a developer's machine and a failure under CI (labkit.lab_unavailable)."""
    from labkit import lab_unavailable
    from support import starting

    starting("a real Slurm", "slurm")
    if missing() or os.geteuid() != 0:
        lab_unavailable("a real Slurm needs root and Debian's slurmctld, slurmd and munge (tests/apt-packages.txt): "
                        "missing " + (", ".join(missing()) or "root"))
    cluster = start(directory, others)
    try:
        yield cluster
    finally:
        stop(cluster)
