"""`site.yml --check` on this Debian 12 machine, with the lab's settings: it completes, says what it
would do, and changes nothing (every task that runs for real in check mode only reads)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from labkit import debian12_with_apt_bindings

# Paths a real run would create; check mode must leave each exactly as it found it.
WATCHED = [
    "/etc/apt/sources.list.d/debian-contrib.sources",
    "/etc/apt/sources.list.d/debian-nonfree.sources",
    "/etc/apt/preferences.d/nvidia-driver.pref",
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/openmpi/openmpi-mca-params.conf",
    "/etc/ssh/ssh_known_hosts.d/gpucheck",
    "/etc/ssh/ssh_config.d/gpucheck-cluster.conf",
    "/opt/stacks",
    "/opt/gpucheck",
    "/etc/gpucheck",
    "/var/lib/gpucheck",
    "/usr/local/bin/gpucheck",
]


def _snapshot() -> dict[str, tuple[bool, float | None]]:
    state = {}
    for path in WATCHED:
        p = Path(path)
        state[path] = (p.exists() or p.is_symlink(), p.lstat().st_mtime if p.is_symlink() or p.exists() else None)
    return state


@pytest.mark.skipif(not debian12_with_apt_bindings(), reason="needs root, Debian 12, python3-apt, python3-packaging")
@pytest.mark.skipif(os.environ.get("GPUCHECK_SKIP_CHECK_MODE") == "1", reason="GPUCHECK_SKIP_CHECK_MODE=1")
def test_check_mode_completes_on_this_host_and_changes_nothing(ansible_repo) -> None:
    inventory = ansible_repo.lab_inventory(
        {
            "localhost": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "controller_cache_dir": str(ansible_repo.tmp_path / "cache"),
                # Fail rather than install python3-apt / fill an index if this host lacked them.
                "preflight_check_mode_bootstrap": False,
            }
        }
    )
    before = _snapshot()
    result = ansible_repo.run("ansible-playbook", "site.yml", "-i", str(inventory), "--check", "--diff", timeout=1800)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert ansible_repo.recap(output)["localhost"]["failed"] == 0
    assert _snapshot() == before, "check mode changed this host"
    assert not (ansible_repo.tmp_path / "cache").exists(), "check mode wrote to the controller cache"

    # What it would do, from the messages and diffs.
    assert ("nvidia-smi, libcuda1, libnvidia-ml1, libnvidia-cfg1, nvidia-persistenced, nvidia-alternative, "
            "libnvidia-ptxjitcompiler1, libnvidia-pkcs11-openssl3 at version 535.261.03*") in " ".join(output.split())
    assert "Components: contrib\n" in output and "debian-nonfree.sources" not in output
    assert "Pin: version 535.261.03*" in output
    assert "blacklist nouveau" in output
    assert "btl_tcp_if_include = 10.77.0.0/24" in output
    assert "oob_tcp_if_include = 10.77.0.0/24" in output
    assert "python: /opt/stacks/tf-horovod/bin/python" in output
    assert "profile: lab" in output
    assert "no Horovod 0.28.1 wheel on the controller yet" in output
    # The rest of the GPU stack at the lab's pins (CUDA 12.4; cuDNN and NCCL in their cuda12.2 builds), Fabric
    # Manager without an NVSwitch (fabric_manager_mode: always), DCGM; no nccl-tests; the CUDA 12 CuPy wheel.
    flat = " ".join(output.split())
    assert ("cuda-toolkit-12-4, libcudnn8=8.9.7.29-1+cuda12.2, libcudnn8-dev=8.9.7.29-1+cuda12.2, "
            "libnccl2=2.18.5-1+cuda12.2, libnccl-dev=2.18.5-1+cuda12.2") in flat
    assert "export CUDA_HOME=/usr/local/cuda-12.4" in output
    assert "nvidia-fabricmanager-535, libnvidia-nscq-535 at 535.261.03*" in flat
    assert "datacenter-gpu-manager-4-core=1:4.5.2-*, datacenter-gpu-manager-4-cuda12=1:4.5.2-*" in flat
    assert "nccl_tests_enabled is false: nccl-tests is not built" in flat
    # four GPU roles include nvidia_repo: the repository is configured once per host and run
    assert output.count("TASK [nvidia_repo : Add NVIDIA's CUDA repository]") == 1, output.count("nvidia_repo : Add")
    assert "a real run installs cupy-cuda12x==14.2.0 into it from files/gpu-cupy-cuda12x.lock (hash-checked)" in flat


@pytest.mark.skipif(not debian12_with_apt_bindings(), reason="needs root, Debian 12, python3-apt, python3-packaging")
@pytest.mark.skipif(os.environ.get("GPUCHECK_SKIP_CHECK_MODE") == "1", reason="GPUCHECK_SKIP_CHECK_MODE=1")
def test_check_mode_shows_the_nvidia_repository_path(ansible_repo) -> None:
    """The production path (NVIDIA's repository, prod pins), which cannot run for real here: check mode
    must name the repository, the packages and the exact versions a real run would install."""
    inventory = ansible_repo.lab_inventory(
        {
            "localhost": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "preflight_check_mode_bootstrap": False,
            }
        }
    )
    prod = {
        "nvidia_driver_source": "nvidia",
        "nvidia_driver_build_module": True,
        "nvidia_driver_packages": [],
        "cuda_source": "nvidia",
        "cuda_install_toolkit": True,
        "cuda_install_cudnn": True,
        "cuda_install_nccl": True,
        "fabric_manager_mode": "always",
        "dcgm_enabled": True,
    }
    before = _snapshot()
    result = ansible_repo.run(
        "ansible-playbook",
        "site.yml",
        "-i",
        str(inventory),
        "--check",
        "--diff",
        "--tags",
        "gpu",
        "-e",
        "@inventory/prod/group_vars/all/versions.yml",
        "-e",
        json.dumps(prod),
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert _snapshot() == before, "check mode changed this host"
    flat = " ".join(output.split())
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in output
    assert "Components: contrib\n" in output  # NVIDIA's Debian driver packages depend on contrib's
    assert "debian-nonfree.sources" not in output  # nothing of Debian's own driver
    assert (
        "nvidia-kernel-dkms, nvidia-kernel-support, firmware-nvidia-gsp, nvidia-smi, libcuda1, libnvidia-ml1, "
        "libnvidia-cfg1, nvidia-persistenced, nvidia-alternative, libnvidia-ptxjitcompiler1, "
        "libnvidia-pkcs11-openssl3 at version 535.261.03*"
    ) in flat
    assert "Pin: version 535.261.03*" in output
    assert (
        "cuda-toolkit-12-2, libcudnn8=8.9.7.29-1+cuda12.2, libcudnn8-dev=8.9.7.29-1+cuda12.2, "
        "libnccl2=2.18.5-1+cuda12.2, libnccl-dev=2.18.5-1+cuda12.2"
    ) in flat
    assert "export CUDA_HOME=/usr/local/cuda-12.2" in output
    assert "nvidia-fabricmanager-535, libnvidia-nscq-535 at 535.261.03*" in flat
    assert "datacenter-gpu-manager-4-core=1:4.5.2-*, datacenter-gpu-manager-4-cuda12=1:4.5.2-*" in flat
    assert "REBOOT REQUIRED" in output and "gpu_reboot_ok (nvidia_driver_reboot_ok) is false" in flat
