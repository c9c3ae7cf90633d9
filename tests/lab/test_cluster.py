"""Integration tests of the lab: real namespaces, systemd booted in each host, real sshd, real apt/pip through the
lab proxy, real OpenMPI across hosts, the fake NVML inside hosts only, and faults. Needs root (skipped otherwise)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from lab import config, procs
from labkit import INVENTORY, REPO, SCENARIOS, Lab, lab_cli, ssh_argv
from support import run_gpucheck

pytestmark = pytest.mark.lab

NVML_COUNT = (
    "import ctypes; lib = ctypes.CDLL('libnvidia-ml.so.1'); assert lib.nvmlInit_v2() == 0, 'init failed';"
    " n = ctypes.c_uint(); assert lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0; print(n.value)"
)
MPI_HELLO = """\
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
names = comm.allgather(socket.gethostname())
print("rank %d of %d on %s sees %s" % (comm.Get_rank(), comm.Get_size(), socket.gethostname(), ",".join(names)))
"""


def why_failed(lab: Lab, name: str, failed: str) -> str:
    """The boot's journal of each unit `systemctl --failed` listed: what a failure in CI is read from."""
    units = " ".join(f"-u {line.split()[0]}" for line in failed.splitlines())
    return "\n" + lab.ssh(name, f"journalctl -b --no-pager -o short-monotonic {units} | tail -40",
                          check=False).stdout


def init_cgroups() -> dict[str, str]:
    """Each lab host's PID 1, as this machine sees it: its cgroup in the hierarchy systemd tracks units in."""
    found = {}
    for nspawn in procs.host_boots():
        machine = next(a.split("=", 1)[1] for a in procs.cmdline(nspawn) if a.startswith("--machine="))
        [init] = procs.children(nspawn)
        lines = Path(f"/proc/{init}/cgroup").read_text().splitlines()
        found[machine] = next((ln for ln in lines if ":name=systemd:" in ln), lines[-1]).split(":", 2)[2]
    return found


def gpu_count(lab: Lab, name: str, timeout: float = 30) -> int:
    return int(lab.ssh(name, f'python3 -c "{NVML_COUNT}"', timeout=timeout).stdout.strip())


def test_each_host_answers_ssh_at_its_own_address_with_its_own_hostname(lab3: Lab) -> None:
    assert sorted(lab3.hosts) == ["node01", "node02", "node03"]
    assert len(set(lab3.hosts.values())) == 3
    for name, address in lab3.hosts.items():
        out = lab3.ssh(name, "hostname; ip -4 -o addr show dev eth0").stdout.split("\n", 1)
        assert out[0] == name
        assert f"inet {address}/24" in out[1]


def test_hosts_reach_each_other_by_name_and_address_as_root_with_checked_host_keys(lab3: Lab) -> None:
    for src in lab3.hosts:
        targets = " ".join(f"{n} {a}" for n, a in lab3.hosts.items())
        script = (f"for t in {targets}; do ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 "
                  "root@$t hostname || exit 1; done; getent hosts $(hostname)")
        out = lab3.ssh(src, script).stdout.split()
        expected = [n for n in lab3.hosts for _ in (0, 1)]
        assert out[:6] == expected, f"from {src}"
        assert out[6:] == [lab3.hosts[src], src], "a host's own name must resolve to its address (Gloo needs it)"


def test_host_keys_are_per_host(lab3: Lab) -> None:
    keys = {n: lab3.ssh(n, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for n in lab3.hosts}
    assert len(set(keys.values())) == 3


def test_a_file_written_on_one_host_is_absent_on_the_others(lab3: Lab) -> None:
    marker = f"/root/lab-marker-{uuid.uuid4().hex}"
    lab3.ssh("node01", f"echo hello > {marker}")
    assert lab3.ssh("node01", f"cat {marker}").stdout == "hello\n"
    for other in ("node02", "node03"):
        assert lab3.ssh(other, f"test -e {marker}", check=False).returncode == 1, f"{marker} leaked to {other}"
    lab3.ssh("node01", f"rm {marker}")


def test_proxy_lets_hosts_reach_the_debian_archive_and_pypi_and_nothing_else(lab3: Lab) -> None:
    lab3.ssh("node02", "apt-get update -q", timeout=300)
    out = lab3.ssh("node02", "rm -rf /tmp/pipdl /tmp/v && python3 -m venv /tmp/v && "
                             "/tmp/v/bin/pip download --no-deps -d /tmp/pipdl six && ls /tmp/pipdl", timeout=300)
    assert out.stdout.strip().splitlines()[-1].startswith("six-")
    refused = lab3.ssh("node02", """python3 - <<'EOF'
import os, urllib.request, urllib.error
proxy = open("/etc/pip.conf").read().split("proxy = ")[1].split()[0]
os.environ["http_proxy"] = os.environ["https_proxy"] = proxy
for url in ("http://example.com/", "https://example.com/"):
    try:
        urllib.request.urlopen(url, timeout=20)
        print(url, "OPEN")
    except urllib.error.HTTPError as exc:
        print(url, exc.code)
    except urllib.error.URLError as exc:
        print(url, exc.reason)
EOF""").stdout
    assert "http://example.com/ 403" in refused
    assert "https://example.com/ Tunnel connection failed: 403 Forbidden" in refused
    # and without the proxy a host has no route out at all
    direct = lab3.ssh("node02", "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), 3)\"",
                      check=False)
    assert direct.returncode != 0 and "Network is unreachable" in direct.stderr


def test_mpirun_runs_across_all_hosts_and_every_rank_reports_its_own_hostname(lab3: Lab) -> None:
    install = ("apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
               "--no-install-recommends openmpi-bin python3-mpi4py >/tmp/apt.log 2>&1 || { tail -5 /tmp/apt.log; "
               "exit 1; }")
    with ThreadPoolExecutor(max_workers=3) as pool:  # in parallel, through the proxy
        list(pool.map(lambda n: lab3.ssh(n, install, timeout=600), lab3.hosts))
    for name in lab3.hosts:
        subprocess.run([*ssh_argv(lab3.hosts[name]), "cat > /root/hello.py"], input=MPI_HELLO, text=True,
                       check=True, timeout=30)
    out = lab3.ssh("node01", "mpirun --allow-run-as-root --oversubscribe -np 3 -H node01,node02,node03 "
                             "--map-by node --mca btl tcp,self --mca btl_tcp_if_include eth0 "
                             "--mca oob_tcp_if_include eth0 python3 /root/hello.py", timeout=120).stdout
    lines = sorted(out.strip().splitlines())
    assert lines == [f"rank {i} of 3 on node0{i + 1} sees node01,node02,node03" for i in range(3)], out


def test_simulated_gpus_are_visible_inside_each_host_from_its_own_scenario(lab3: Lab) -> None:
    for name, (_scenario, count) in SCENARIOS.items():
        assert gpu_count(lab3, name) == count, name


def test_simulated_gpus_are_not_visible_outside_the_lab_hosts(lab3: Lab) -> None:
    out = subprocess.run([sys.executable, "-c", NVML_COUNT], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "libnvidia-ml.so.1: cannot open shared object file" in out.stderr


def test_status_and_ssh_commands(lab3: Lab) -> None:
    status = lab_cli("status", "--json")
    rows = json.loads(status.stdout)["hosts"]
    assert [(r["name"], r["running"], r["ssh"], r["scenario"]) for r in rows] == [
        (n, True, True, s) for n, (s, _) in SCENARIOS.items()
    ]
    assert lab_cli("ssh", "node02", "hostname").stdout == "node02\n"
    bad = lab_cli("ssh", "node07", "true", check=False)
    assert bad.returncode == 3 and bad.stderr.startswith("lab: error: no lab host named 'node07'")


def test_up_refuses_while_a_lab_is_up(lab3: Lab) -> None:
    out = lab_cli("up", "--hosts", "2", check=False)
    assert out.returncode == 3
    assert len(out.stderr.strip().splitlines()) == 1
    assert "already up" in out.stderr and "python3 -m lab down" in out.stderr


def test_fault_scenario_changes_the_gpus_that_host_sees(lab3: Lab) -> None:
    try:
        lab_cli("fault", "node03", "scenario", "t4")
        assert gpu_count(lab3, "node03") == 1
        assert gpu_count(lab3, "node02") == 8  # the others are untouched
    finally:
        lab_cli("fault", "node03", "scenario", SCENARIOS["node03"][0])
    assert gpu_count(lab3, "node03") == 7


def test_fault_ib_steps_a_simulated_port_counter_the_host_sees_and_the_agent_judges_a_flap(lab3: Lab,
                                                                                           tmp_path) -> None:
    """`up --ib-ports 2`: each host's fake sysfs has two ACTIVE NDR ports, counters at 0. `fault node02 ib` raises
    mlx5_0's link_downed by one, which node02 reads at once and node01 never sees; the agent, given node02's tree,
    passes before it and fails the flap after it, naming the port."""
    counter = "class/infiniband/mlx5_0/ports/1/counters/link_downed"
    inside = f"cat {config.FAKE_SYSFS_DIR}/{counter}"
    tree = config.host_run_dir("node02") / "fakenvml" / Path(config.FAKE_SYSFS_DIR).name
    env = {**os.environ, "GPUCHECK_SYSFS_ROOT": str(tree), "GPUCHECK_STATE_DIR": str(tmp_path)}
    args = ["node", "--only", "ib.counters", "--profile", "generic", "--format", "json"]
    assert lab3.ssh("node02", inside).stdout.strip() == "0"
    assert run_gpucheck(args, env=env).returncode == 0
    said = lab_cli("fault", "node02", "ib")
    assert "node02: mlx5_0 port 1 link_downed now 1" in said.stdout
    assert lab3.ssh("node02", inside).stdout.strip() == "1" and lab3.ssh("node01", inside).stdout.strip() == "0"
    flap = run_gpucheck(args, env=env)
    assert flap.returncode == 2 and "mlx5_0/1 flapped: link_downed +1 (now 1), port ACTIVE now" in flap.stdout


def test_fault_hang_makes_that_hosts_nvml_hang(lab3: Lab) -> None:
    try:
        lab_cli("fault", "node01", "hang")
        hung = lab3.ssh("node01", f'timeout 5 python3 -c "{NVML_COUNT}"', check=False, timeout=30)
        assert hung.returncode == 124, hung.stdout + hung.stderr
        assert gpu_count(lab3, "node02") == 8
    finally:
        lab_cli("fault", "node01", "scenario", SCENARIOS["node01"][0])
    assert gpu_count(lab3, "node01") == 2


def test_fault_drift_changes_one_package_version_on_that_host_only(lab3: Lab) -> None:
    venv = "/opt/drift-test"
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda n: lab3.ssh(n, f"python3 -m venv {venv} && {venv}/bin/pip install -q six==1.17.0",
                                         timeout=300), ("node01", "node02")))
    out = lab_cli("fault", "node01", "drift", "six==1.16.0", timeout=600)
    assert out.stdout.strip() == f"node01: six 1.17.0 -> 1.16.0 in {venv}"
    version = "import six; print(six.__version__)"
    assert lab3.ssh("node01", f"{venv}/bin/python -c '{version}'").stdout.strip() == "1.16.0"
    assert lab3.ssh("node02", f"{venv}/bin/python -c '{version}'").stdout.strip() == "1.17.0"
    missing = lab_cli("fault", "node03", "drift", "six==1.16.0", check=False, timeout=600)
    assert missing.returncode == 3 and "not installed in any virtualenv" in missing.stderr


def test_fault_down_makes_exactly_that_host_unreachable(lab3: Lab) -> None:
    try:
        lab_cli("fault", "node02", "down")
        gone = lab3.ssh("node02", "true", check=False, timeout=30)
        assert gone.returncode == 255 and "Connection refused" in gone.stderr
        for other in ("node01", "node03"):
            assert lab3.ssh(other, "hostname").stdout.strip() == other
        rows = {r["name"]: r for r in json.loads(lab_cli("status", "--json").stdout)["hosts"]}
        assert rows["node02"]["running"] and not rows["node02"]["ssh"] and rows["node02"]["faults"] == ["down"]
        # the host itself lives on: node01 still reaches it over the network, just not its sshd
        ping = lab3.ssh("node01", "python3 -c \"import socket; socket.create_connection(('node02', 22), 3)\"",
                        check=False)
        assert "Connection refused" in ping.stderr
    finally:
        lab_cli("fault", "node02", "up")
    assert lab3.ssh("node02", "hostname").stdout.strip() == "node02"


def test_each_host_boots_systemd_and_sshd_is_its_ssh_unit(lab3: Lab) -> None:
    for name in SCENARIOS:
        out = lab3.ssh(name, "ps -o comm= -p 1; systemctl is-system-running --wait; "
                             "systemctl show -p MainPID --value ssh.service; cat /run/sshd.pid").stdout.split()
        assert out[0] == "systemd" and out[1] in ("running", "degraded"), out
        assert out[2] == out[3] != "0", out  # the sshd we reached is the unit's main process
    failed = lab3.ssh("node01", "systemctl --failed --no-legend --plain").stdout.strip()
    assert failed == "", failed + why_failed(lab3, "node01", failed)  # nothing of the bare base fails at boot
    # each host's systemd has a cgroup tree of its own: in one shared tree a unit ending on one host removed the
    # cgroup the same unit was entering on another (CI saw status=219/CGROUP at boot)
    cgroups = init_cgroups()
    assert sorted(cgroups) == sorted(SCENARIOS), cgroups
    assert all(f"/{config.cgroup_name(n)}/" in path for n, path in cgroups.items()), cgroups
    # each host has a boot id of its own, as separate machines do (not this machine's)
    ids = {lab3.ssh(n, "cat /proc/sys/kernel/random/boot_id").stdout.strip() for n in SCENARIOS}
    with open("/proc/sys/kernel/random/boot_id") as fh:
        assert len(ids) == len(SCENARIOS) and fh.read().strip() not in ids


def test_ansibles_reboot_module_reboots_a_host_and_waits_for_it(lab3: Lab) -> None:
    """The driver role's reboot: systemd inside node03 reboots, the lab boots it again (new boot id, /run
    emptied, the disk kept, sshd and the simulated GPUs back), and Ansible's reboot module sees it come back."""
    before = lab3.ssh("node03", "cat /proc/sys/kernel/random/boot_id; touch /run/gclab-mark /root/gclab-mark")
    ansible = Path(sys.executable).parent / "ansible"
    done = subprocess.run([str(ansible), "-i", str(INVENTORY), "node03", "-m", "ansible.builtin.reboot",
                           "-a", "reboot_timeout=120"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and re.search(r'"?rebooted"?: true', done.stdout), done.stdout + done.stderr
    after = lab3.ssh("node03", "cat /proc/sys/kernel/random/boot_id; ls /run/gclab-mark /root/gclab-mark",
                     check=False)
    lines = after.stdout.split()
    assert lines[0] != before.stdout.strip(), "the boot id did not change"
    assert "/root/gclab-mark" in lines and "/run/gclab-mark" not in lines
    assert gpu_count(lab3, "node03") == SCENARIOS["node03"][1]
    lab3.ssh("node03", "rm /root/gclab-mark")


def test_the_standin_nvidia_repository_is_served_on_the_bridge_with_its_fingerprint_in_the_inventory(
        lab3: Lab, tmp_path: Path) -> None:
    """`up` builds the stand-in NVIDIA repository, serves it on the bridge and writes its address and its key's
    fingerprint into the inventory (as NVIDIA's is in inventory/prod); hosts reach it directly, not by the proxy."""
    doc = yaml.safe_load(INVENTORY.read_text())["all"]["vars"]
    url, fingerprint = doc["lab_nvidia_repo_url"], doc["lab_nvidia_repo_fingerprint"]
    bridge = doc["lab_proxy_url"].split("//", 1)[1].split(":")[0]  # the bridge's address: the proxy's
    # the hosts know the bridge by name (a golden image built by another lab instance names the right server)
    assert re.fullmatch(r"http://lab-bridge:\d+/", url) and re.fullmatch(r"[0-9A-F]{40}", fingerprint), doc
    assert f"{bridge}\tlab-bridge" in lab3.ssh("node01", "cat /etc/hosts").stdout
    fetch = f"python3 -c \"import urllib.request as u; print(u.urlopen('{url}Release', timeout=10).read().decode())\""
    release = lab3.ssh("node01", f"env -u http_proxy {fetch}").stdout
    assert "Origin: NVIDIA" in release and "Packages.gz" in release, release
    assert 'Acquire::http::Proxy::lab-bridge "DIRECT";' in lab3.ssh(
        "node01", "cat /etc/apt/apt.conf.d/90gpucheck-lab-proxy").stdout
    key = tmp_path / "key.asc"
    here = url.replace("lab-bridge", bridge)  # this machine has no name for it
    key.write_bytes(urllib.request.urlopen(f"{here}gpucheck-lab-standin.asc", timeout=10).read())
    shown = subprocess.run(["gpg", "--batch", "--homedir", str(tmp_path), "--with-colons", "--show-keys", str(key)],
                           capture_output=True, text=True, timeout=60).stdout
    assert f"fpr:::::::::{fingerprint}:" in shown, shown
