"""Helpers of the cluster tests (and bench/fanout.py): a real sshd on 127.0.0.1 with its own host key,
client keys and known_hosts; fake node agents chosen per host; canned node reports; running
`gpucheck cluster` as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from support import starting

ROOT = Path(__file__).resolve().parents[2]
SSHD = Path("/usr/sbin/sshd")

# The fake agent every host runs: it picks this host's behaviour by the port the client connected to
# (the last field of SSH_CONNECTION), so one sshd serves many "hosts" with different agents.
DISPATCH = """#!/bin/sh
port=${SSH_CONNECTION##* }
exec "$(dirname "$0")/by-port/$port" "$@"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "gpucheck-test", "-f", str(path)], check=True,
                   timeout=30)
    return path


class LoopbackSshd:
    """One sshd listening on several 127.0.0.1 ports; stop() ends it. Needs openssh-server."""

    def __init__(self, root: Path, ports: int = 4):
        if not SSHD.exists():
            raise RuntimeError("/usr/sbin/sshd is missing: apt-get install openssh-server "
                               "(tests/apt-packages.txt)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port() for _ in range(ports)]
        self.host_key = keygen(root / "ssh_host_ed25519_key")
        self.client_key = keygen(root / "id_ed25519")
        self.other_key = keygen(root / "id_other")  # a valid key that is not authorized
        (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
        host_pub = " ".join((root / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text("".join(f"[127.0.0.1]:{p} {host_pub}\n" for p in self.ports))
        self.agent_dir = root / "agent"
        (self.agent_dir / "by-port").mkdir(parents=True, exist_ok=True)
        self.agent = self.agent_dir / "gpucheck"
        self.agent.write_text(DISPATCH)
        self.agent.chmod(0o755)
        config = root / "sshd_config"
        config.write_text("".join(f"Port {p}\n" for p in self.ports) + f"""\
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {root / 'sshd.pid'}
AuthorizedKeysFile {root / 'authorized_keys'}
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
MaxStartups 200
MaxSessions 50
LogLevel ERROR
""")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.log = open(root / "sshd.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait()

    def _wait(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                        if s.recv(64).startswith(b"SSH-"):
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not answer on port {port}")
                time.sleep(0.05)

    def behave(self, port: int, script: str) -> None:
        """What the agent does on the host reached through this port (a shell script body)."""
        path = self.agent_dir / "by-port" / str(port)
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)

    def hang(self, port: int) -> None:
        """A hung agent: records its pid (so the test can check it was ended) and sleeps."""
        self.behave(port, f"echo $$ >> '{self.root / 'hung.pids'}'\nexec sleep 600\n")

    def hung_pids(self) -> list[int]:
        path = self.root / "hung.pids"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def report(self, port: int, report: dict[str, Any], exit_code: int | None = None) -> None:
        """The agent prints this node report and exits with its exit code, as gpucheck node does."""
        path = self.agent_dir / f"report-{port}.json"
        path.write_text(json.dumps(report))
        code = report["exit_code"] if exit_code is None else exit_code
        self.behave(port, f"cat '{path}'\nexit {code}\n")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        self.log.close()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def kill_strays(sshd: LoopbackSshd) -> None:
    """End the hung agents a test started (by the pids they recorded), should the remote timeout not have."""
    for pid in sshd.hung_pids():
        if alive(pid) and b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


@contextlib.contextmanager
def running_sshd(directory: Path, ports: int) -> Iterator[LoopbackSshd]:
    """A LoopbackSshd for a test module (the `sshd` fixtures), stopped afterwards with the fake agents it
    left hanging."""
    starting("a real sshd", "sshd")
    server = LoopbackSshd(directory, ports=ports)
    try:
        yield server
    finally:
        server.stop()
        kill_strays(server)


def node_report(host: str, driver: str = "535.183.01", fail: dict[str, str] | None = None,
                measured: dict[str, float] | None = None, profile: str = "generic",
                frameworks: dict[str, dict[str, Any]] | None = None, gpus: int = 8) -> dict[str, Any]:
    """A node report shaped by the agent's own model (Report.to_dict), so a schema change shows here."""
    from gpucheck.model import Report, Result, Status

    results = [Result("gpu.count", Status.PASS, gpus, gpus, f"{gpus} GPUs"),
               Result("gpu.driver", Status.PASS, driver, ">= 535", "driver recent enough")]
    for check, reason in (fail or {}).items():
        results.append(Result(check, Status.FAIL, None, None, reason, "replace the GPU"))
    for check, value in (measured or {}).items():
        results.append(Result(check, Status.PASS, value, None, f"{value} measured"))
    stacks = frameworks if frameworks is not None else {"tf": {"tensorflow": "2.15.1", "horovod": "0.28.1"}}
    facts = {"profile": profile, "driver_version": driver, "cuda_driver_version": "12.2", "gpu_count": gpus,
             "gpu_models": ["NVIDIA H100 80GB HBM3"],
             "libraries": {"nccl": {"tf": "2.18.3"}, "mpi": {"tf": "Open MPI 4.1.4"}}, "frameworks": stacks}
    return Report(host=host, profile=profile, results=results, facts=facts, started="2026-01-01T00:00:00+00:00",
                  duration_s=0.5, version="0.1.0").to_dict()


def write_inventory(path: Path, sshd: LoopbackSshd, hosts: dict[str, dict[str, Any]],
                    group: str = "gpu_nodes") -> Path:
    """A YAML inventory: each host is 127.0.0.1 at its own port, with the lab's ssh options by default."""
    common = f"-o UserKnownHostsFile={sshd.known_hosts} -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"
    entries = {}
    for name, overrides in hosts.items():
        entry = {"ansible_host": "127.0.0.1", "ansible_user": "root",
                 "ansible_ssh_private_key_file": str(sshd.client_key), "ansible_ssh_common_args": common}
        entry.update(overrides)
        entries[name] = entry
    path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": entries}}}}, sort_keys=False))
    return path


def run_cluster(args: list[str], timeout: float = 120, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`gpucheck cluster ARGS` as a user runs it; through `python -m gpucheck.cluster` until cli.py has it."""
    environ = dict(env if env is not None else os.environ)
    environ["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("ANSIBLE_CONFIG", None)
    from gpucheck.main import build_parser

    wired = "cluster" in build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    entry = ["-m", "gpucheck", "cluster"] if wired else ["-m", "gpucheck.cluster"]
    if not any(a.startswith(("--stages", "--skip-stages")) for a in args):
        # these hosts are fake agents on one machine: the fan-out and the comparison only, not the
        # network/MPI/training stages (tests/cluster_lab runs those against the lab)
        args = [*args, "--stages", "consistency,stragglers"]
    return subprocess.run([sys.executable, *entry, *args], capture_output=True, text=True, env=environ,
                          timeout=timeout, cwd=cwd)


def load_report(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "report.json").read_text())
