"""site.yml for real on the cluster lab's hosts (Debian 12 in network namespaces, packages through the lab's proxy
and the stand-in NVIDIA repository): the run that provisioned the lab (conftest `lab4`: `provision`) read as its
user reads it, then the result checked on a host, not taken from the run's word. First in the cluster lab: the
later modules change the hosts (a drifted framework, faults, an upgrade).

The golden image is itself a real run of site.yml on a fresh host (`python3 -m lab build`; cached until the
playbook tree changes), so the lab's run is site.yml's second on these hosts: it may install only what the image
cannot hold, and everything else must report no change.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from cluster_lab_helpers import FAULTY, HEALTHY, VALIDATE_VERDICT, LabState, ansible_playbook, changed, tasks_with

from labkit import INVENTORY, Lab, read_inventory

pytestmark = pytest.mark.lab
# What a run on hosts from the golden image may install: this checkout's agent (the image's key leaves the agent
# out), this lab's cluster SSH keys and OpenMPI's subnet (the image was built on one host of some lab instance),
# Slurm around admin01 (the image has no controller). Every other role must change nothing.
IMAGE_CANNOT_HOLD = {"gpucheck_agent", "cluster_ssh", "openmpi", "slurm"}
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
EVERY_HOST = {"admin01", *HEALTHY, FAULTY}


def lab_vars() -> dict:
    return yaml.safe_load(INVENTORY.read_text())["all"]["vars"]


def role_of(task: str) -> str:
    return task.split(" : ")[0]


def test_site_yml_on_hosts_from_the_golden_image_changes_only_what_the_image_cannot_hold(lab4: LabState) -> None:
    output = lab4.provisioned.stdout
    changes = tasks_with(output, "changed")
    assert {role_of(task) for task in changes} <= IMAGE_CANNOT_HOLD, {
        task: hosts for task, hosts in changes.items() if role_of(task) not in IMAGE_CANNOT_HOLD}
    # what differs from the image on every start did change on every host: the host keys (new at each start) and
    # Slurm (the agent and OpenMPI's subnet are the image's when this checkout and lab instance built it)
    for role in ("cluster_ssh", "slurm"):
        assert set().union(*(hosts for task, hosts in changes.items() if role_of(task) == role)) == EVERY_HOST, role
    # the validate stage ran gpucheck node everywhere; its verdict fails the run naming the faulty node alone
    assert tasks_with(output, "fatal") == {VALIDATE_VERDICT: {"node01"}}, output[-4000:]
    assert re.search(rf"1 node\(s\) did not pass\. Reports: \S+\n{FAULTY}: fail \(exit 2\)\n  gpu\.ecc_errors \[fail\]",
                     output), output[-4000:]
    lab4.figures["site_yml_changed"] = changed(output)


def test_a_second_run_of_the_agent_and_mpi_stages_changes_nothing(lab4: LabState) -> None:
    # the stages the lab's run changed, again: idempotent themselves (on every host: the mpi stage's known_hosts
    # holds the hosts of its run, roles/cluster_ssh/README.md)
    done = ansible_playbook("site.yml", "--tags", "agent,mpi", timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert changed(done.stdout) == dict.fromkeys(EVERY_HOST, 0), tasks_with(done.stdout, "changed")


def test_result_on_a_host(lab4: LabState) -> None:
    host, lab = "node01", Lab(read_inventory())
    held = lab.ssh(host, "apt-mark showhold").stdout.split()
    assert set(held) >= DRIVER_PACKAGES | set(STACK_PACKAGES), held
    query = "dpkg-query -W -f '${Package}\\t${Version}\\n' " + " ".join(sorted(STACK_PACKAGES))
    assert dict(line.split("\t") for line in lab.ssh(host, query).stdout.splitlines()) == STACK_PACKAGES
    # NVML is the driver package's: its alternative took the link over from the lab's own library
    nvml = lab.ssh(host, "readlink -f /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip()
    assert nvml == "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03", nvml
    assert "Driver Version: 535.261.03" in lab.ssh(host, "nvidia-smi").stdout
    # the toolkit where NVIDIA's packages put it, found by the loader and on a login shell's PATH
    assert lab.ssh(host, "readlink -f /usr/local/cuda").stdout.strip() == "/usr/local/cuda-12.4"
    loader = lab.ssh(host, "ldconfig -p").stdout
    for soname in ("libcudart.so.12", "libcudnn.so.8", "libnccl.so.2"):
        assert soname in loader, loader
    assert "release 12.4, V12.4.131" in lab.ssh(host, "bash -lc 'nvcc --version'").stdout
    # the daemons the roles enabled, started at boot: Fabric Manager at the driver's version, DCGM's host engine
    units = lab.ssh(host, "systemctl is-active nvidia-fabricmanager nvidia-dcgm; nv-fabricmanager -v; dcgmi -v",
                    check=False).stdout
    assert units.startswith("active\nactive\n"), units
    assert "Fabric Manager version is : 535.261.03" in units and "Version : 4.5.2" in units, units
    query = "dpkg-query -W -f '${Package}\\t${Version}\\n' " + " ".join(sorted(DRIVER_PACKAGES))
    installed = dict(line.split("\t") for line in lab.ssh(host, query).stdout.splitlines())
    assert installed == dict.fromkeys(DRIVER_PACKAGES, "535.261.03-1"), installed
    # from the stand-in NVIDIA repository on the lab bridge, its key trusted for the inventory's fingerprint
    policy = lab.ssh(host, "apt-cache policy libnvidia-ml1").stdout
    served = re.escape(lab_vars()["lab_nvidia_repo_url"].rstrip("/"))  # http://lab-bridge:PORT, by its name
    assert re.search(rf"\*\*\* 535\.261\.03-1 \d+\n\s+\d+ {served} {{2}}Packages", policy), policy
    key = lab.ssh(host, "gpg --show-keys --with-colons /etc/apt/keyrings/nvidia-cuda.asc", check=False).stdout
    assert f"fpr:::::::::{lab_vars()['lab_nvidia_repo_fingerprint']}:" in key, key
    # its daemon under systemd, restarted by the role with the drop-in's command line (persistence mode on)
    unit = lab.ssh(host, "systemctl is-active nvidia-persistenced; ps -u nvpd -o args=").stdout
    assert unit.startswith("active\n") and "--user nvpd --persistence-mode --verbose" in unit, unit
    stand_in = lab.ssh(host, "cat /usr/share/doc/libcuda1/STAND-IN").stdout
    assert "libcuda.so.1" in stand_in  # what the stand-in package still lacks, as its file says
    assert "blacklist nouveau" in lab.ssh(host, "cat /etc/modprobe.d/*nouveau*.conf").stdout
    mca = lab.ssh(host, "cat /etc/openmpi/openmpi-mca-params.conf").stdout
    network = re.escape(lab_vars()["lab_cluster_network"])  # this lab instance's subnet
    assert re.search(rf"^btl_tcp_if_include\s*=\s*{network}", mca, re.M), mca
    mpi = lab.ssh(host, "dpkg-query -W -f '${Version}' openmpi-bin").stdout
    assert mpi.startswith("4.1.4"), mpi
    build = lab.ssh(host, "/opt/stacks/tf-horovod/bin/horovodrun --check-build").stdout
    for line in ("[X] TensorFlow", "[X] MPI", "[X] Gloo"):
        assert line in build, build
    versions = lab.ssh(host, "/opt/stacks/tf-horovod/bin/python -c 'import tensorflow as tf, horovod; "
                             "print(tf.__version__, horovod.__version__)'", timeout=120).stdout.split()
    assert versions == ["2.15.1", "0.28.1"]
    node = lab.ssh(host, "gpucheck node --format json", timeout=300, check=False)
    report = json.loads(node.stdout)
    bad = {r["check"]: r["reason"] for r in report["results"] if r["status"] not in ("pass", "skip")}
    assert node.returncode == 0 and report["profile"] == "lab", bad
    pins = next(r for r in report["results"] if r["check"] == "stack.pins")
    assert pins["status"] == "pass" and pins["measured"]["system"] == PINNED, pins
    assert report["facts"]["frameworks"]["tf-horovod"]["tensorflow"] == "2.15.1"


def gpu_stage_on_node01(*extra: str):
    return ansible_playbook("site.yml", "--tags", "gpu", "--limit", "node01", *extra, timeout=900)


def test_a_version_nvidia_never_built_fails_the_run_for_that_reason_and_changes_nothing(lab4: LabState) -> None:
    # the role's pin reaches apt as written
    done = gpu_stage_on_node01("-e", '{"cuda_nccl_version": "2.18.3"}')
    assert done.returncode != 0, done.stdout[-3000:]
    assert set().union(*tasks_with(done.stdout, "fatal").values()) == {"node01"}, done.stdout[-3000:]
    assert "no available installation candidate for libnccl2=2.18.3-1+cuda12.2" in done.stdout, done.stdout[-3000:]
    assert not tasks_with(done.stdout, "changed"), done.stdout[-3000:]  # nothing done to the node before it


def test_a_wrong_package_name_fails_the_run_for_that_reason(lab4: LabState) -> None:
    # a wrong name in the role's vars/Debian.yml (extra vars override them): the branch without its dash
    done = gpu_stage_on_node01("-e", '{"__fabric_manager_packages": ["nvidia-fabricmanager535", "libnvidia-nscq-535"]}')
    assert done.returncode != 0, done.stdout[-3000:]
    assert "No package matching 'nvidia-fabricmanager535' is available" in done.stdout, done.stdout[-3000:]
    # Before it failed, the role released and removed the installed Fabric Manager as another branch's (NVIDIA's
    # branches conflict: roles/fabric_manager), so the node is left without one: the stage with the right names
    # puts it back. (One apt transaction, the new branch in and the old out, would leave it as it was: not yet.)
    assert set(tasks_with(done.stdout, "changed")) == {"fabric_manager : Release the other branch's packages from "
                                                       "their hold", "fabric_manager : Remove the other branch's "
                                                       "packages"}, done.stdout[-3000:]
    again = gpu_stage_on_node01()
    assert again.returncode == 0, again.stdout[-3000:]
    unit = Lab(read_inventory()).ssh("node01", "systemctl is-active nvidia-fabricmanager; apt-mark showhold").stdout
    assert unit.startswith("active\n") and "nvidia-fabricmanager-535" in unit.split(), unit
