"""The lab's life cycle: `down` leaves nothing (after a killed host, an interrupted or killed `up`),
and the golden image (build once, start provisioned, idempotent re-run). Needs root."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import config
from labkit import INVENTORY, REPO, Lab, leftovers, read_inventory

pytestmark = pytest.mark.lab

TINY = REPO / "tests" / "lab" / "tiny" / "site.yml"


def lab(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "lab", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def netns_dir_mounted() -> bool:
    return any(line.split()[1] == "/run/netns" for line in Path("/proc/mounts").read_text().splitlines())


def test_down_leaves_nothing_even_after_a_host_was_killed(no_lab) -> None:
    mounted_before = netns_dir_mounted()
    lab("up", "--hosts", "3", "--no-golden")
    hosts = Lab(read_inventory())
    # a stray background process inside a host, and one host killed from outside
    hosts.ssh("node01", "setsid nohup sleep 4321.5 >/dev/null 2>&1 < /dev/null &")
    assert any("4321.5" in item for item in leftovers())
    spec = str(config.host_run_dir("node02") / "spec.json").encode()  # this lab instance's node02, no other's
    victims = [int(p) for p in os.listdir("/proc") if p.isdigit() and spec in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert victims
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    status = lab("status", "--json", check=False)
    assert status.returncode == 1
    rows = {r["name"]: r for r in json.loads(status.stdout)["hosts"]}
    assert not rows["node02"]["running"] and rows["node01"]["running"] and rows["node03"]["ssh"]

    begin = time.monotonic()
    out = lab("down")
    assert out.stdout.startswith("lab is down: removed 3 hosts")
    assert time.monotonic() - begin < 30
    assert leftovers() == []
    # the /run/netns mount `ip netns add` made is gone once nobody uses it: another lab instance running beside
    # this one (the Kubernetes tests' own) may still hold it, or may have made it
    assert not netns_dir_mounted() or mounted_before or os.listdir("/run/netns")
    assert not (config.DATA_DIR / "hosts").exists()
    assert lab("down").stdout.strip() == "no lab is up; nothing to remove"


def _start_up_and_wait_for(line_start: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "lab", "up", "--hosts", "3", "--no-golden"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(line_start):
            return proc
    raise AssertionError(f"up never printed {line_start!r}:\n{''.join(seen)}")


def test_an_interrupted_up_removes_what_it_created(no_lab) -> None:
    proc = _start_up_and_wait_for("lab: hosts:")  # namespaces, bridge and proxy exist by now
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    assert "up interrupted: removing what it had created" in rest
    assert leftovers() == []


def test_down_cleans_up_after_a_killed_up(no_lab) -> None:
    proc = _start_up_and_wait_for("lab: hosts:")
    time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=30)
    assert leftovers() != []  # a killed `up` cannot clean up after itself...
    refused = lab("up", "--hosts", "1", check=False)
    assert refused.returncode == 3 and "python3 -m lab down" in refused.stderr
    lab("down")  # ...but `down` can
    assert leftovers() == []


def test_golden_image_is_built_once_and_hosts_start_provisioned(no_lab) -> None:
    begin = time.monotonic()
    built = lab("build", "--fresh", "--playbook", str(TINY), timeout=1200)
    assert re.search(r"golden image [0-9a-f]{16} .* is ready", built.stdout), built.stdout + built.stderr
    assert "changed=2" in built.stderr and time.monotonic() - begin < 600
    assert leftovers() == []  # the build host is gone

    begin = time.monotonic()
    again = lab("build", "--playbook", str(TINY))
    assert "is up to date" in again.stdout and time.monotonic() - begin < 15

    lab("up", "--hosts", "2", "--playbook", str(TINY))
    hosts = Lab(read_inventory())
    for name in hosts.hosts:
        assert hosts.ssh(name, "cat /etc/gpucheck-lab-tiny-marker").stdout == "provisioned by tests/lab/tiny/site.yml\n"
        assert hosts.ssh(name, "hello").stdout == "Hello, world!\n"
        assert hosts.ssh(name, "hostname").stdout.strip() == name  # not the build host's identity
    keys = {hosts.ssh(n, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for n in hosts.hosts}
    assert len(keys) == 2
    ansible = str(Path(sys.executable).parent / "ansible-playbook")
    rerun = subprocess.run([ansible, "-i", str(INVENTORY), str(TINY)], capture_output=True,
                           text=True, timeout=600, cwd=TINY.parent)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    recap = re.findall(r"^(node\d\d)\s+: ok=(\d+)\s+changed=(\d+)", rerun.stdout, re.M)
    assert recap == [("node01", "2", "0"), ("node02", "2", "0")], rerun.stdout


def test_demo_names_the_faulty_host_and_leaves_nothing(no_lab) -> None:
    """The demo end to end, with a stand-in playbook that installs only the gpucheck agent."""
    playbook = REPO / "tests" / "lab" / "agent-demo" / "site.yml"
    # no --fresh: a cached image is fine, stage 3 brings the agent up to date (its wheel changes with the code)
    # that playbook installs no MPI or frameworks: only the fan-out and comparison stages apply
    out = lab("demo", "--playbook", str(playbook), "--stages", "consistency,stragglers", timeout=1500, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "faulty host: node04" in lines
    assert "  node04: FAIL  <- FAULTY" in lines
    assert any("gpu.ecc_errors" in line for line in lines)
    for healthy in ("node01", "node02", "node03"):
        assert f"  {healthy}: pass" in lines  # the agent-demo playbook sets the lab profile
    report = Path(next(line for line in lines if line.startswith("demo files: ")).split()[2])
    nodes = report / "cluster" / "nodes"  # gpucheck cluster keeps each host's own report
    assert sorted(p.name for p in nodes.glob("node*.json")) == [f"node0{i}.json" for i in range(1, 5)]
    assert json.loads((nodes / "node04.json").read_text())["exit_code"] == 2
    assert json.loads((report / "cluster" / "report.json").read_text())["drain"][0]["node"] == "node04"
    for stage in ("stage 1/5", "stage 2/5", "stage 3/5", "stage 4/5", "stage 5/5"):
        assert stage in out.stderr
    assert leftovers() == []
