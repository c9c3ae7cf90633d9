"""site.yml for real on lab hosts (Debian 12 in network namespaces, packages through the lab's proxy).

The golden image is itself a real run of site.yml on a fresh host (`python -m lab build`; cached
until the playbook changes). Hosts started from it get what the image cannot hold (the agent, the
cluster's SSH keys), then site.yml whole: it must change nothing, and the result is checked on the
hosts, not taken from the run's word.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from labkit import INVENTORY, Lab, lab_cli, read_inventory, require_root

pytestmark = pytest.mark.lab
# The driver's user-space packages (roles/nvidia_driver/vars/Debian.yml) at the stand-in's R535 version.
DRIVER_PACKAGES = {"nvidia-smi", "libcuda1", "libnvidia-ml1", "libnvidia-cfg1", "nvidia-persistenced",
                   "nvidia-alternative", "libnvidia-ptxjitcompiler1", "libnvidia-pkcs11-openssl3"}
# What the cuda, fabric_manager and dcgm roles install at inventory/lab's pins (versions.yml: CUDA 12.4, cuDNN
# 8.9.7.29 and NCCL 2.18.5 in their cuda12.2 builds; R535's Fabric Manager; DCGM 4.5.2), all held.
STACK_PACKAGES = {
    "cuda-toolkit-12-4": "12.4.1-1", "libcudnn8": "8.9.7.29-1+cuda12.2", "libcudnn8-dev": "8.9.7.29-1+cuda12.2",
    "libnccl2": "2.18.5-1+cuda12.2", "libnccl-dev": "2.18.5-1+cuda12.2",
    "nvidia-fabricmanager-535": "535.261.03-1", "libnvidia-nscq-535": "535.261.03-1",
    "datacenter-gpu-manager-4-core": "1:4.5.2-1", "datacenter-gpu-manager-4-cuda12": "1:4.5.2-1",
}
# What `gpucheck node` must read back through NVML and the libraries' own version functions.
PINNED = {"driver": "535.261.03", "cuda": "12.4", "cudnn": "8.9.7", "nccl": "2.18.5"}
RECAP_RE = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(output: str) -> dict[str, int]:
    return {m[0]: int(m[2]) + 1000 * (int(m[3]) + int(m[4])) for m in RECAP_RE.findall(output)}


@pytest.fixture(scope="module")
def lab2():
    require_root()
    lab_cli("down", check=False)
    lab_cli("build", timeout=3600)  # a real site.yml run on a fresh host, unless cached
    try:
        lab_cli("up", "--hosts", "2", timeout=600)
        yield Lab(read_inventory())
    finally:
        lab_cli("down", check=False)


def lab_vars() -> dict:
    return yaml.safe_load(INVENTORY.read_text())["all"]["vars"]


def site(ansible_repo, *args: str):
    done = ansible_repo.run("ansible-playbook", "-i", str(INVENTORY), "site.yml", *args, timeout=2400)
    assert "PLAY RECAP" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    return done


def test_second_run_changes_nothing_and_validate_passes(lab2, ansible_repo):
    # What the golden image cannot hold, first: this checkout's agent (the image ignores agent changes) and the
    # cluster's SSH keys for these two hosts (their host keys are new at each start; the image was built on one).
    # The rest of site.yml ran on these hosts when the image was built: all of it runs now and must change nothing.
    first = site(ansible_repo, "--tags", "agent,mpi")
    assert first.returncode == 0, first.stdout[-4000:]
    second = site(ansible_repo)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second.stdout) == {"node01": 0, "node02": 0}, second.stdout[-4000:]


def test_result_on_the_hosts(lab2):
    for host in lab2.hosts:
        held = lab2.ssh(host, "apt-mark showhold").stdout.split()
        assert set(held) >= DRIVER_PACKAGES | set(STACK_PACKAGES), held
        query = "dpkg-query -W -f '${Package}\\t${Version}\\n' " + " ".join(sorted(STACK_PACKAGES))
        assert dict(line.split("\t") for line in lab2.ssh(host, query).stdout.splitlines()) == STACK_PACKAGES
        # NVML is the driver package's: its alternative took the link over from the lab's own library
        nvml = lab2.ssh(host, "readlink -f /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip()
        assert nvml == "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03", nvml
        assert "Driver Version: 535.261.03" in lab2.ssh(host, "nvidia-smi").stdout
        # the toolkit where NVIDIA's packages put it, found by the loader and on a login shell's PATH
        assert lab2.ssh(host, "readlink -f /usr/local/cuda").stdout.strip() == "/usr/local/cuda-12.4"
        loader = lab2.ssh(host, "ldconfig -p").stdout
        for soname in ("libcudart.so.12", "libcudnn.so.8", "libnccl.so.2"):
            assert soname in loader, loader
        assert "release 12.4, V12.4.131" in lab2.ssh(host, "bash -lc 'nvcc --version'").stdout
        # the daemons the roles enabled, started at boot: Fabric Manager at the driver's version, DCGM's host engine
        units = lab2.ssh(host, "systemctl is-active nvidia-fabricmanager nvidia-dcgm; nv-fabricmanager -v; "
                               "dcgmi -v", check=False).stdout
        assert units.startswith("active\nactive\n"), units
        assert "Fabric Manager version is : 535.261.03" in units and "Version : 4.5.2" in units, units
        query = "dpkg-query -W -f '${Package}\\t${Version}\\n' " + " ".join(sorted(DRIVER_PACKAGES))
        installed = dict(line.split("\t") for line in lab2.ssh(host, query).stdout.splitlines())
        assert installed == dict.fromkeys(DRIVER_PACKAGES, "535.261.03-1"), installed
        # from the stand-in NVIDIA repository on the lab bridge, its key trusted for the inventory's fingerprint
        policy = lab2.ssh(host, "apt-cache policy libnvidia-ml1").stdout
        served = re.escape(lab_vars()["lab_nvidia_repo_url"].rstrip("/"))  # http://lab-bridge:PORT, by its name
        assert re.search(rf"\*\*\* 535\.261\.03-1 \d+\n\s+\d+ {served} {{2}}Packages", policy), policy
        key = lab2.ssh(host, "gpg --show-keys --with-colons /etc/apt/keyrings/nvidia-cuda.asc", check=False).stdout
        assert f"fpr:::::::::{lab_vars()['lab_nvidia_repo_fingerprint']}:" in key, key
        # its daemon under systemd, restarted by the role with the drop-in's command line (persistence mode on)
        unit = lab2.ssh(host, "systemctl is-active nvidia-persistenced; ps -u nvpd -o args=").stdout
        assert unit.startswith("active\n") and "--user nvpd --persistence-mode --verbose" in unit, unit
        stand_in = lab2.ssh(host, "cat /usr/share/doc/libcuda1/STAND-IN").stdout
        assert "libcuda.so.1" in stand_in  # what the stand-in package still lacks, as its file says
        assert "blacklist nouveau" in lab2.ssh(host, "cat /etc/modprobe.d/*nouveau*.conf").stdout
        mca = lab2.ssh(host, "cat /etc/openmpi/openmpi-mca-params.conf").stdout
        network = re.escape(lab_vars()["lab_cluster_network"])  # this lab instance's subnet
        assert re.search(rf"^btl_tcp_if_include\s*=\s*{network}", mca, re.M), mca
        mpi = lab2.ssh(host, "dpkg-query -W -f '${Version}' openmpi-bin").stdout
        assert mpi.startswith("4.1.4"), mpi
        build = lab2.ssh(host, "/opt/stacks/tf-horovod/bin/horovodrun --check-build").stdout
        for line in ("[X] TensorFlow", "[X] MPI", "[X] Gloo"):
            assert line in build, build
        versions = lab2.ssh(host, "/opt/stacks/tf-horovod/bin/python -c 'import tensorflow as tf, horovod; "
                                  "print(tf.__version__, horovod.__version__)'", timeout=120).stdout.split()
        assert versions == ["2.15.1", "0.28.1"]
        node = lab2.ssh(host, "gpucheck node --format json", timeout=300, check=False)
        report = json.loads(node.stdout)
        bad = {r["check"]: r["reason"] for r in report["results"] if r["status"] not in ("pass", "skip")}
        assert node.returncode == 0 and report["profile"] == "lab", bad
        pins = next(r for r in report["results"] if r["check"] == "stack.pins")
        assert pins["status"] == "pass" and pins["measured"]["system"] == PINNED, pins
        assert report["facts"]["frameworks"]["tf-horovod"]["tensorflow"] == "2.15.1"


@pytest.mark.parametrize(("extra", "message"), [
    # a version NVIDIA never built: the role's pin reaches apt as written
    ('{"cuda_nccl_version": "2.18.3"}', "no available installation candidate for libnccl2=2.18.3-1+cuda12.2"),
    # a wrong name in the role's vars/Debian.yml (extra vars override them): the branch without its dash
    ('{"__fabric_manager_packages": ["nvidia-fabricmanager535", "libnvidia-nscq-535"]}',
     "No package matching 'nvidia-fabricmanager535' is available"),
])
def test_a_wrong_package_version_or_name_fails_the_run_for_that_reason(lab2, ansible_repo, extra, message):
    """...and leaves the node's stack as it was: every package at its pin, held (a Fabric Manager branch that cannot
    install never takes the installed one away)."""
    done = site(ansible_repo, "--tags", "gpu", "--limit", "node01", "-e", extra)
    assert done.returncode != 0 and recap(done.stdout)["node01"] >= 1000, done.stdout[-3000:]
    assert message in done.stdout, done.stdout[-3000:]
    names = " ".join(STACK_PACKAGES)
    installed = lab2.ssh("node01", f"dpkg-query -W -f='${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' {names}")
    assert {line.split()[0]: line.split()[1:] for line in installed.stdout.splitlines()} == {
        name: [version, "hi"] for name, version in STACK_PACKAGES.items()}, installed.stdout


def test_check_mode_on_a_fresh_host(ansible_repo):
    require_root()
    lab_cli("down", check=False)
    try:
        lab_cli("up", "--hosts", "1", "--no-golden", timeout=600)
        done = site(ansible_repo, "--check", "--skip-tags", "validate")
        assert done.returncode == 0, done.stdout[-4000:]
        assert recap(done.stdout)["node01"] < 1000  # no failed or unreachable task
    finally:
        lab_cli("down", check=False)
