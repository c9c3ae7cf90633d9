"""What the burn-in's provisioning does: DCGM (roles/dcgm), nccl-tests (roles/nccl_tests) and the agent's gpu
extra (roles/gpucheck_agent, tasks/gpu_extra.yml), in check mode against this machine: the packages, versions,
build and wheel each would install, the switches the lab uses, and the stops before anything unchecked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from labkit import debian12_with_apt_bindings

PROD_VERSIONS = "@inventory/prod/group_vars/all/versions.yml"
needs_apt = pytest.mark.skipif(not debian12_with_apt_bindings(),
                               reason="needs root, Debian 12, python3-apt, python3-packaging")


def play(ansible_repo, name: str, plays: list[dict], hosts: dict[str, dict], *extra: str):
    """ansible-playbook --check of these plays on local-connection hosts (inventory groups: gpu_nodes, admin)."""
    playbook = ansible_repo.tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    groups: dict[str, dict] = {"gpu_nodes": {"hosts": {}}, "admin": {"hosts": {}}}
    for host, variables in hosts.items():
        group = variables.pop("group", "gpu_nodes")
        groups[group]["hosts"][host] = {"ansible_connection": "local",
                                        "ansible_python_interpreter": "/usr/bin/python3", **variables}
    inventory = ansible_repo.tmp_path / f"{name}-hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
    done = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), str(playbook), *extra, timeout=900)
    return done.returncode, done.stdout + done.stderr


def flat(text: str) -> str:
    return " ".join(text.split())


def tasks_run(output: str, role: str) -> list[str]:
    """The role's tasks that ran on some host (not only skipped), argument validation aside."""
    ran = []
    for name, body in re.findall(rf"TASK \[{role} : ([^\]]*)\] \**\n(.*?)(?=\nTASK |\nPLAY RECAP)", output, re.S):
        if not name.startswith("Validating arguments") and re.search(r"^(ok|changed|fatal):", body, re.M):
            ran.append(name)
    return ran


def role_play(role: str, facts: bool = True, **options) -> list[dict]:
    return [{"name": f"Run {role}", "hosts": "all", "gather_facts": facts, "become": False,
             "roles": [{"role": role, "vars": options}]}]


# ------------------------------------------------------------------------------------------------- dcgm
@needs_apt
def test_dcgm_check_mode_names_the_pinned_packages_for_the_drivers_cuda(ansible_repo) -> None:
    """NVIDIA's repository path with the prod pins: DCGM 4.5.2's core and cuda13 packages for an R580 stack (the
    R535 stack's cuda12 package: site.yml's production path in test_check_mode.py); nothing on this host changes
    (the repository is not configured yet)."""
    sources = Path("/etc/apt/sources.list.d/nvidia-cuda.sources")
    existed = sources.exists()
    hosts = {"r580": {"gpu_burnin_versions": {"dcgm_version": "4.5.2"}, **stack("580", "13.0")}}
    code, output = play(ansible_repo, "dcgm", role_play("dcgm"), hosts, "--diff")
    text = flat(output)
    assert code == 0, output[-4000:]
    assert ("A real run installs datacenter-gpu-manager-4-core=1:4.5.2-*, datacenter-gpu-manager-4-cuda13=1:4.5.2-* "
            "(with their recommended packages), removes datacenter-gpu-manager, datacenter-gpu-manager-config and "
            "enables nvidia-dcgm") in text
    assert "datacenter-gpu-manager-4-cuda12" not in text
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in output
    assert sources.exists() == existed


def test_dcgm_switched_off_does_nothing_but_say_so(ansible_repo) -> None:
    code, output = play(ansible_repo, "dcgm-off", role_play("dcgm", facts=False, dcgm_enabled=False),
                        {"node": {}}, "-e", PROD_VERSIONS)
    assert code == 0, output[-4000:]
    assert "dcgm_enabled is false: DCGM is not installed" in flat(output)
    assert tasks_run(output, "dcgm") == ["Say that DCGM is switched off"]  # not even the repository


# ------------------------------------------------------------------------------------------- nccl_tests
def test_nccl_tests_check_mode_names_the_build_against_the_stack(ansible_repo) -> None:
    """No toolkit at /usr/local/cuda-12.2 here: check mode says what a real run downloads (the pinned release
    and sha256), the make arguments (MPI, the stack's CUDA, NCCL, Debian's OpenMPI) and the link, and touches
    nothing."""
    prefix = ansible_repo.tmp_path / "nccl-tests"
    code, output = play(ansible_repo, "nccl", role_play("nccl_tests", nccl_tests_prefix=str(prefix)),
                        {"node": {}}, "-e", PROD_VERSIONS)
    text = flat(output)
    assert code == 0, output[-4000:]
    assert re.search(r"Check mode: /usr/local/cuda-12\.2/bin/nvcc (and /usr/include/nccl\.h )?not installed yet", text)
    assert ("A real run downloads https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.6.tar.gz (sha256 "
            "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0)") in text
    assert ("`make MPI=1 CUDA_HOME=/usr/local/cuda-12.2 NCCL_HOME=/usr CUDARTLIB=cudart_static "
            "MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi`") in text
    assert "links all_reduce_perf into /usr/local/bin" in text
    assert not prefix.exists()


def test_nccl_tests_without_a_checksum_stops_before_downloading(ansible_repo) -> None:
    prefix = ansible_repo.tmp_path / "nccl-tests"
    versions = {"gpu_burnin_versions": {"dcgm_version": "4.5.2", "nccl_tests_version": "2.17.6"}}
    code, output = play(ansible_repo, "nccl-nosum", role_play("nccl_tests", nccl_tests_prefix=str(prefix)),
                        {"node": {}}, "-e", PROD_VERSIONS, "-e", json.dumps(versions))
    assert code != 0
    assert "nccl_tests_sha256 must be the sha256 (64 hex digits)" in flat(output), output[-3000:]
    assert "Download the nccl-tests release" not in output and not prefix.exists()


def test_nccl_tests_switched_off_does_nothing_but_say_so(ansible_repo) -> None:
    code, output = play(ansible_repo, "nccl-off", role_play("nccl_tests", facts=False, nccl_tests_enabled=False),
                        {"node": {}}, "-e", PROD_VERSIONS)
    assert code == 0, output[-4000:]
    assert "nccl_tests_enabled is false: nccl-tests is not built" in flat(output)
    assert tasks_run(output, "nccl_tests") == ["Say that nccl-tests is switched off"]


# --------------------------------------------------------------------------------- the agent's gpu extra
GPU_EXTRA_PLAY = [{"name": "The gpu extra alone", "hosts": "all", "gather_facts": False, "become": False,
                   "tasks": [{"name": "Run it", "ansible.builtin.include_role": {
                       "name": "gpucheck_agent", "tasks_from": "gpu_extra"}}]}]


def stack(branch: str, cuda: str) -> dict:
    return {"gpu_stack_versions": {"driver_branch": branch, "cuda_version": cuda}}


def chosen(output: str) -> dict[str, str]:
    """host -> the wheel its check-mode message says a real run installs ('none' when it says nothing)."""
    pattern = (r"ok: \[(\w+)\] => msg: 'Check mode: the agent''s virtualenv \S+ does not exist yet; "
               r"a real run installs (\S+)==")
    return dict(re.findall(pattern, flat(output)))


def test_gpu_extra_wheel_follows_the_driver_and_the_toolkit(ansible_repo) -> None:
    """auto: R580 runs CUDA 13, R525-R575 CUDA 12, older none (with a warning); an older toolkit from the cuda role
    decides (CuPy loads its cuBLAS and NVRTC); hosts outside gpu_nodes get none; an explicit wheel wins."""
    venv = str(ansible_repo.tmp_path / "no-venv")
    hosts = {
        "r535": {**stack("535", "12.2")},
        "r580": {**stack("580", "13.0")},
        "r580tk12": {**stack("580", "12.8")},
        "r580notk": {**stack("580", "12.8"), "cuda_install_toolkit": False},
        "r470": {**stack("470", "11.4")},
        "admin": {**stack("535", "12.2"), "group": "admin"},
        "forced": {**stack("535", "12.2"), "gpucheck_agent_gpu_extra": "cupy-cuda13x"},
    }
    code, output = play(ansible_repo, "gpu-extra", GPU_EXTRA_PLAY, hosts, "-e",
                        json.dumps({"gpucheck_agent_venv": venv}))
    assert code == 0, output[-4000:]
    assert chosen(output) == {"r535": "cupy-cuda12x", "r580": "cupy-cuda13x", "r580tk12": "cupy-cuda12x",
                              "r580notk": "cupy-cuda13x", "forced": "cupy-cuda13x"}
    assert "from files/gpu-cupy-cuda12x.lock (hash-checked)" in flat(output)
    warnings = re.findall(r"ok: \[(\w+)\] => msg: 'WARNING: driver branch", flat(output))
    assert warnings == ["r470"]


def test_gpu_extra_lab_gets_the_cuda12_wheel(ansible_repo) -> None:
    """The lab's own settings (lab-shaped inventory, the repository's lab group_vars): the 535 branch without a
    toolkit, so cupy-cuda12x, installed for real there."""
    inventory = ansible_repo.lab_inventory({"node01": {"ansible_connection": "local",
                                                       "ansible_python_interpreter": "/usr/bin/python3"}})
    playbook = ansible_repo.tmp_path / "lab-gpu-extra.yml"
    playbook.write_text(yaml.safe_dump(GPU_EXTRA_PLAY))
    venv = json.dumps({"gpucheck_agent_venv": str(ansible_repo.tmp_path / "no-venv")})
    done = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), str(playbook), "-e", venv)
    assert done.returncode == 0, done.stdout[-4000:]
    assert chosen(done.stdout) == {"node01": "cupy-cuda12x"}


def test_gpu_extra_stops_when_its_lock_is_for_another_cupy(ansible_repo) -> None:
    extra = {"gpucheck_agent_venv": str(ansible_repo.tmp_path / "no-venv"), "gpucheck_agent_cupy_version": "14.1.0"}
    code, output = play(ansible_repo, "gpu-extra-stale", GPU_EXTRA_PLAY, {"r535": stack("535", "12.2")},
                        "-e", json.dumps(extra))
    assert code != 0
    assert ("files/gpu-cupy-cuda12x.lock does not pin cupy-cuda12x==14.1.0 (gpucheck_agent_cupy_version): "
            "regenerate it with `python docs/pip_locks.py gpu-cupy-cuda12x`") in flat(output), output[-3000:]
    extra["gpucheck_agent_gpu_extra_locked"] = False
    code, output = play(ansible_repo, "gpu-extra-unlocked", GPU_EXTRA_PLAY, {"r535": stack("535", "12.2")},
                        "-e", json.dumps(extra))
    assert code == 0, output[-3000:]
    assert "a real run installs cupy-cuda12x==14.1.0 into it from the index" in flat(output)
