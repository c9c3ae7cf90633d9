"""One lab host: what goes into it (its spec), starting it, its sshd, ending it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lab import compute, config, gpus, kernel_log, module_bytecode, net, procs
from lab.errors import LabError
from lab.state import HostState

HOSTINIT = Path(__file__).resolve().parent / "hostinit.py"
SSHD_CONFIG = "/etc/gpucheck-lab/sshd_config"
# Debian's ssh.service, told to read the lab's sshd_config (a drop-in: the unit itself stays the package's)
SSHD_DROP_IN = "/etc/systemd/system/ssh.service.d/gpucheck-lab.conf"
SSH_UNIT = "ssh.service"
NSPAWN_RUN = "/run/systemd/nspawn"  # systemd-nspawn's own run directory, private to each host's supervisor
SSH_BANNER = b"SSH-"
LAB_KEY_COMMENT = "root@gpucheck-lab"  # comment of the lab's client key: marks its authorized_keys line
AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"


@dataclass
class HostIdentity:
    host_key: str  # private key text
    host_pub: str
    client_key: str  # the lab's key for root (private), shared by all hosts
    client_pub: str


def sshd_config(address: str) -> str:
    return f"""\
# Written by the gpucheck lab at every start of this host; sshd runs with -f this file.
Port 22
ListenAddress {address}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PidFile /run/sshd.pid
AcceptEnv LANG LC_*
# The agent compares NVML with this host's simulated PCI bus, not the build machine's (lab/gpus.py).
SetEnv {config.SYSFS_ENV}={config.FAKE_SYSFS_DIR}
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def apt_proxy_conf(proxy_url: str) -> str:
    """Debian's archive through the lab's proxy; the bridge itself (the stand-in NVIDIA repository) directly."""
    bridge = urlsplit(proxy_url).hostname
    return (f'Acquire::http::Proxy "{proxy_url}";\nAcquire::https::Proxy "{proxy_url}";\n'
            f'Acquire::http::Proxy::{bridge} "DIRECT";\nAcquire::http::Proxy::{config.BRIDGE_HOST} "DIRECT";\n'
            'Acquire::Retries "3";\n')


def sshd_drop_in() -> str:
    return f"""\
# Written by the gpucheck lab at every start of this host: sshd reads the lab's configuration.
[Service]
ExecStartPre=
ExecStartPre=/usr/sbin/sshd -t -f {SSHD_CONFIG}
ExecStart=
ExecStart=/usr/sbin/sshd -D -e -f {SSHD_CONFIG}
ExecReload=
ExecReload=/usr/sbin/sshd -t -f {SSHD_CONFIG}
ExecReload=/bin/kill -HUP $MAINPID
"""


def agent_env_file(gpus: bool) -> str:
    """/etc/default/gpucheck: the agent's environment on this host (VAR=value lines)."""
    env = {config.SYSFS_ENV: config.FAKE_SYSFS_DIR, **(compute.environment() if gpus else {})}
    return "# Written by the gpucheck lab.\n" + "".join(f"{name}={value}\n" for name, value in env.items())


def machine_id(name: str) -> str:
    """/etc/machine-id of lab host `name`: its own (the base image's is emptied), the same at every start, as a
    real machine's is (systemd-nspawn gives each boot its own boot id; the kernel is the build machine's)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"gpucheck-lab:machine/{name}").hex


def hosts_file(hosts: list[HostState], bridge: str) -> str:
    lines = [
        "# Written by the gpucheck lab: every lab host, by name and address, and the bridge (the stand-in NVIDIA",
        "# repository's server).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{bridge}\t{config.BRIDGE_HOST}",
    ]
    lines += [f"{h.address}\t{h.name}" for h in hosts]
    return "\n".join(lines) + "\n"


def spec(host: HostState, all_hosts: list[HostState], lowers: list[str], identity: HostIdentity,
         known_hosts: str, proxy_url: str, nvml_library: Path | None, node: dict | None = None) -> dict:
    """Everything hostinit.py needs to assemble this host; NODE: what makes it a Kubernetes node
    (lab/kubernetes/node_host.parts), with the pods' cgroup root the host removes as it ends."""
    run_dir, data_dir = config.host_run_dir(host.name), config.host_data_dir(host.name)
    files = [
        ("/etc/hostname", host.name + "\n", 0o644),
        ("/etc/machine-id", machine_id(host.name) + "\n", 0o444),
        ("/etc/hosts", hosts_file(all_hosts, urlsplit(proxy_url).hostname or ""), 0o644),
        ("/etc/resolv.conf", "# lab hosts have no DNS: they know each other from /etc/hosts\n", 0o644),
        ("/etc/ssh/ssh_host_ed25519_key", identity.host_key, 0o600),
        ("/etc/ssh/ssh_host_ed25519_key.pub", identity.host_pub + "\n", 0o644),
        ("/etc/ssh/ssh_known_hosts", known_hosts, 0o644),
        (AUTHORIZED_KEYS, identity.client_pub + "\n", 0o600),
        ("/root/.ssh/id_ed25519", identity.client_key, 0o600),
        ("/root/.ssh/id_ed25519.pub", identity.client_pub + "\n", 0o644),
        (SSHD_CONFIG, sshd_config(host.address), 0o644),
        (SSHD_DROP_IN, sshd_drop_in(), 0o644),
        # the same for what slurmd starts (its health check: roles/slurm's wrapper reads this file), and on a GPU
        # host the simulated compute (lab/compute.py)
        (compute.AGENT_ENV_FILE, agent_env_file(nvml_library is not None), 0o644),
        ("/etc/apt/apt.conf.d/90gpucheck-lab-proxy", apt_proxy_conf(proxy_url), 0o644),
        ("/etc/pip.conf",
         f"[global]\nproxy = {proxy_url}\ncert = /etc/ssl/certs/ca-certificates.crt\n", 0o644),
    ]
    # Ansible's modules: their module_utils compiled once for every host (lab/module_bytecode)
    files.append((module_bytecode.HOST_FILE, module_bytecode.SOURCE.read_text(), 0o644))
    binds = [{"source": str(module_bytecode.MACHINE_CACHE), "target": module_bytecode.HOST_CACHE, "writable": True}]
    # the simulated GPUs: a node's own scenario, the fake library and its driver's module (an admin node has none)
    links, kernel = [], None
    if nvml_library is not None:
        binds += [{"source": str(run_dir / "fakenvml"), "target": config.FAKENVML_DIR},
                  {"source": str(nvml_library), "target": config.LAB_NVML_PATH},
                  {"source": str(run_dir / "kernel"), "target": config.KERNEL_DIR},
                  {"source": str(compute.SOURCE), "target": compute.HOST_DIR},
                  # the kernel log its watcher follows, which the lab plants lines into (lab/kernel_log.py)
                  {"source": str(kernel_log.source_dir(host.name)), "target": kernel_log.HOST_DIR, "writable": True},
                  # where its nvidia-smi -r writes what a GPU reset cleared, which its scenario includes last
                  {"source": str(gpus.reset_dir(host.name)), "target": gpus.RESET_DIR, "writable": True}]
        links.append({"path": config.NVML_PATH, "target": config.LAB_NVML_PATH})
        files.append((compute.AGENT_SHIM, compute.agent_shim(), 0o755))
        kernel = {"dir": str(run_dir / "kernel"), "file": config.MODULE_VERSION_FILE,
                  "scenario": config.MODULE_SCENARIO_FILE, "driver_scenario": config.DRIVER_SCENARIO}
    node = node or {}
    files += node.get("files", [])
    binds += node.get("binds", [])
    links += node.get("links", [])
    return {
        "hostname": host.name,
        "root": str(run_dir / "root"),
        "lowers": lowers,
        "upper": str(data_dir / "upper"),
        "work": str(data_dir / "work"),
        "files": [
            {"path": p, "content": c, "mode": m, "dir_mode": 0o700 if p.startswith("/root/") else 0o755,
             "merge_marker": LAB_KEY_COMMENT if p == AUTHORIZED_KEYS else ""}
            for p, c, m in files
        ],
        "binds": binds,
        "links": links,
        "kernel": kernel,
        "netns_path": str(net.NETNS_DIR / host.netns),
        "nspawn_run": NSPAWN_RUN,
        "cgroup": config.cgroup_name(host.name),
        "capabilities": node.get("capabilities", []),
        "pod_cgroup": node.get("pod_cgroup", ""),
    }


def start(host: HostState, host_spec: dict) -> subprocess.Popen[bytes]:
    """Start the host's supervisor, which boots it; returns at once (see wait_ready)."""
    run_dir = config.host_run_dir(host.name)
    (run_dir / "root").mkdir(parents=True, exist_ok=True)
    (run_dir / "kernel").mkdir(exist_ok=True)
    kernel_log.prepare(host.name)
    gpus.prepare_reset_dir(host.name)
    module_bytecode.MACHINE_CACHE.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(host_spec, indent=1))
    spec_path.chmod(0o600)  # holds private keys
    cmd = ["unshare", "--mount", "--propagation", "private",
           sys.executable, "-I", str(HOSTINIT), str(spec_path), config.TAG]
    return procs.spawn(cmd, run_dir / "host.log")


def log_tail(host: str) -> str:
    try:
        lines = (config.host_run_dir(host) / "host.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def wait_ready(started: dict[str, tuple[HostState, subprocess.Popen[bytes]]], timeout: float = 60) -> None:
    """Wait until every started host's sshd answers; name the first host that died or stayed silent."""
    waiting = dict(started)
    deadline = time.monotonic() + timeout
    while waiting:
        for name, (host, proc) in list(waiting.items()):
            if proc.poll() is not None:
                raise LabError(f"{name} did not start (exit {proc.returncode}): {log_tail(name)}")
            if procs.port_answers(host.address, 22, SSH_BANNER, timeout=0.5):
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            name = sorted(waiting)[0]
            raise LabError(f"{name}'s sshd did not answer within {timeout:.0f} s: {log_tail(name)}")
        if waiting:
            time.sleep(0.05)


def init_pid(host: HostState) -> int | None:
    """PID (in the main PID namespace) of the host's systemd: the child of the supervisor's systemd-nspawn."""
    if not procs.is_lab_process(host.pid):
        return None
    for nspawn in procs.children(host.pid):  # type: ignore[arg-type]
        kids = procs.children(nspawn)
        if kids:
            return kids[0]
    return None


def running(host: HostState) -> bool:
    return init_pid(host) is not None


def in_host(host: HostState, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run argv inside the host (all its namespaces, its root), as its own root user; for what the lab does
    to a host that SSH cannot do (stop its sshd)."""
    pid = init_pid(host)
    if pid is None:
        raise LabError(f"{host.name} is not running (its processes are gone); `down` then `up` again")
    return subprocess.run(["nsenter", f"--target={pid}", "--all", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def sshd_answers(host: HostState, timeout: float = 1.0) -> bool:
    return procs.port_answers(host.address, 22, SSH_BANNER, timeout=timeout)


def set_sshd(host: HostState, up: bool, timeout: float = 10) -> None:
    """Stop (up=False) or start the host's sshd unit, and wait until that is visible from outside."""
    done = in_host(host, ["systemctl", "start" if up else "stop", SSH_UNIT], timeout=timeout)
    if done.returncode != 0:
        raise LabError(f"{host.name}: systemctl {'start' if up else 'stop'} {SSH_UNIT} failed: "
                       f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    deadline = time.monotonic() + timeout
    while sshd_answers(host, timeout=0.5) != up:
        if time.monotonic() > deadline:
            raise LabError(f"{host.name}'s sshd did not {'start' if up else 'stop'} within {timeout:.0f} s")
        time.sleep(0.05)


def end(host: HostState) -> None:
    """Halt the host (systemd's poweroff, a few seconds at most), then end whatever of it is left; its mounts go
    with its supervisor's mount namespace."""
    if procs.is_lab_process(host.pid):
        procs.end([host.pid], grace=15.0)  # type: ignore[list-item]
    leftover = net.netns_pids(host.netns) if host.netns in net.list_netns() else []
    for p in leftover:
        procs.signal_pid(p, signal.SIGKILL)
    procs.wait_gone(leftover, 3.0)
