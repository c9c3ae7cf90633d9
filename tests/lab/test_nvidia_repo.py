"""The stand-in for NVIDIA's debian12 repository (lab/nvidia_repo), built once for the module: real apt, in a
configuration of its own (file: sources, its own lists and cache, the machine's dpkg status read-only, nothing
ever installed), checks the signature and resolves exactly what the roles ask for, read from the roles
themselves by Ansible's templating with inventory/prod's pins; the stand-ins answer the agent's own probes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucheck.node.stack.library_probe import probe_version
from lab.nvidia_repo import IsolatedApt, NvidiaRepoError, RepoBuild, build, load, resign, status_with

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("dpkg-deb", "apt-get", "gpg", "gcc")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                reason=f"needs {', '.join(TOOLS)} (make deps)")

# The task of each role that installs its packages on Debian, by its name (a renamed task fails loudly here).
INSTALL_TASKS = {
    "nvidia_driver": "Install the driver packages at the pinned version",
    "cuda": "Install CUDA, cuDNN and NCCL at the stack's versions",
    "fabric_manager": "Install Fabric Manager at the driver's version",
    "dcgm": "Install DCGM at the pinned version",
}
CUDA_FINDING = ("issue 20 finding: NVIDIA's debian12 repository starts at CUDA 12.3 (packages.yaml "
                "nvidia-debian12-listing): roles/cuda's cuda-toolkit-12-2 cannot be installed on Debian 12")


# ------------------------------------------------------------------------------------------------ helpers
def trusted(value):
    """VALUE with its strings marked as templates (ansible-core 2.19 templates only trusted text: the roles')."""
    try:
        from ansible.template import trust_as_template
    except ImportError:  # older ansible-core trusts every string
        return value
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trusted(v) for v in value]
    return value


def role_variables(role: str, stack: str) -> dict:
    """What a play has for ROLE on a Debian 12 host of inventory/prod with gpu_stack STACK: role defaults,
    the inventory, the role's vars, then its set_fact tasks (by Ansible's precedence)."""
    variables: dict = {}
    base = REPO / "roles" / role
    for path in [base / "defaults" / "main.yml", *sorted((REPO / "inventory/prod/group_vars/all").glob("*.yml")),
                 base / "vars" / "main.yml", base / "vars" / "Debian.yml"]:
        if path.is_file():
            variables.update(yaml.safe_load(path.read_text()) or {})
    variables["gpu_stack"] = stack
    variables["ansible_managed"] = "Ansible managed"
    return trusted(variables)


def role_tasks(role: str):
    for name in ("main.yml", "setup-Debian.yml"):
        for task in yaml.safe_load((REPO / "roles" / role / "tasks" / name).read_text()) or []:
            yield task
            yield from task.get("block", [])


def role_install(role: str, stack: str = "tf-horovod") -> tuple[list[str], dict]:
    """The `name:` of ROLE's Debian install task, templated by Ansible as the play would: the package specs it
    hands to apt. -> (specs, the variables, for templating more of the role)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    variables = role_variables(role, stack)
    spec = None
    for task in role_tasks(role):
        if "ansible.builtin.set_fact" in task:
            variables.update(trusted(dict(task["ansible.builtin.set_fact"])))
        if task.get("name") == INSTALL_TASKS[role]:
            spec = task["ansible.builtin.apt"]["name"]
    assert spec is not None, f"roles/{role} has no task named {INSTALL_TASKS[role]!r}"
    specs = Templar(loader=DataLoader(), variables=variables).template(trusted(spec))
    return [str(s) for s in specs], variables


def driver_pin_file(stack: str) -> str:
    """roles/nvidia_driver/templates/apt-preferences.j2 as the role writes it to /etc/apt/preferences.d."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    _, variables = role_install("nvidia_driver", stack)  # its set_fact chose nvidia_driver_selected_packages
    template = (REPO / "roles/nvidia_driver/templates/apt-preferences.j2").read_text()
    return str(Templar(loader=DataLoader(), variables=variables).template(trusted(template)))


def wanted(specs: list[str]) -> dict[str, str]:
    """name -> version pattern of NAME=VERSION specs (no pattern: any version)."""
    return dict(s.split("=", 1) if "=" in s else (s, "*") for s in specs)


def matches(version: str, pattern: str) -> bool:
    return version == pattern or (pattern.endswith("*") and version.startswith(pattern[:-1]))


def apt_for(repo: RepoBuild, workdir: Path, preferences: str = "", status: Path | None = None,
            nvidia: Path | None = None) -> IsolatedApt:
    """apt with the stand-in NVIDIA repository (or NVIDIA) and the Debian-archive stand-ins, updated."""
    apt = IsolatedApt(workdir, [repo.source_line(nvidia), repo.source_line(repo.debian)], preferences,
                      **({"status": status} if status else {}))
    done = apt.update()
    assert done.returncode == 0, done.stdout + done.stderr
    return apt


def copy_indexes(repo: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("Packages", "Packages.gz", "Release", "Release.gpg", "InRelease"):
        shutil.copy(repo / name, dest / name)
    return dest


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> RepoBuild:
    return build(tmp_path_factory.mktemp("nvidia-repo"))


@pytest.fixture(scope="module")
def apt(repo, tmp_path_factory) -> IsolatedApt:
    return apt_for(repo, tmp_path_factory.mktemp("apt"))


# ------------------------------------------------------------------------------------------------ the model
def test_every_entry_cites_its_source_and_says_what_is_known_in_debian12() -> None:
    model = load()
    for pkg in model.packages:
        assert pkg.source and all(model.sources[s] for s in pkg.source), pkg.name
        assert pkg.status in ("seen", "not seen", "contradicted"), pkg.name
    names = {p.name for p in model.packages}
    for role in INSTALL_TASKS:  # every package a role names is modelled, for both stacks
        for stack in ("tf-horovod", "tf-horovod-r550"):
            assert set(wanted(role_install(role, stack)[0])) <= names, (role, stack)


def test_an_entry_citing_an_unknown_source_is_refused(tmp_path) -> None:
    text = (REPO / "lab/nvidia_repo/packages.yaml").read_text().replace("source: [cudnn-897]", "source: [my-memory]")
    (tmp_path / "packages.yaml").write_text(text)
    with pytest.raises(NvidiaRepoError, match="libcudnn8 .*my-memory"):
        load(tmp_path / "packages.yaml")


# ------------------------------------------------------------------------------------------------ signed, flat
def test_the_repository_is_flat_and_signed_as_nvidias(repo) -> None:
    for name in ("Packages", "Packages.gz", "Release", "Release.gpg", "InRelease"):
        assert (repo.nvidia / name).is_file(), name
    release = (repo.nvidia / "Release").read_text()
    assert "Origin: NVIDIA\nLabel: NVIDIA CUDA\nArchitecture: x86_64\n" in release
    assert (repo.root / "fingerprint").read_text().strip() == repo.fingerprint
    assert len(list(repo.nvidia.glob("*.deb"))) == len(repo.packages)
    listed = subprocess.run(["gpg", "--show-keys", "--with-colons", str(repo.key)], capture_output=True,
                            text=True, timeout=30, check=True).stdout
    assert f":{repo.fingerprint}:" in listed


def test_apt_update_verifies_the_signature(apt) -> None:
    assert list((apt.root / "state" / "lists").glob("*InRelease")), "apt kept no verified InRelease"


def test_apt_refuses_the_repository_signed_by_another_key(repo, tmp_path) -> None:
    other = copy_indexes(repo.nvidia, tmp_path / "resigned")
    home = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpg-other-{os.getpid()}"
    try:
        assert resign(other, home) != repo.fingerprint
    finally:
        shutil.rmtree(home, ignore_errors=True)
    done = IsolatedApt(tmp_path / "apt", [repo.source_line(other)]).update()
    assert done.returncode != 0
    assert "NO_PUBKEY" in done.stdout + done.stderr or "not signed" in done.stdout + done.stderr


def test_apt_refuses_a_tampered_packages_file(repo, tmp_path) -> None:
    tampered = copy_indexes(repo.nvidia, tmp_path / "tampered")
    packages = tampered / "Packages"
    packages.write_text(packages.read_text().replace("Version: 2.18.5-1+cuda12.2", "Version: 2.18.6-1+cuda12.2"))
    (tampered / "Packages.gz").unlink()
    done = IsolatedApt(tmp_path / "apt", [repo.source_line(tampered)]).update()
    assert done.returncode != 0
    assert "Hash Sum mismatch" in done.stdout + done.stderr or "unexpected size" in done.stdout + done.stderr


# ------------------------------------------------------------------------------------------------ the roles' specs
def assert_installs(sim, specs: list[str]) -> None:
    assert sim.ok, sim.output
    for name, pattern in wanted(specs).items():
        assert name in sim.installs, f"apt would not install {name}:\n{sim.output}"
        assert matches(sim.installs[name], pattern), f"{name} {sim.installs[name]} is not {pattern}"


def test_the_cuda_roles_pins_install_at_the_stacks_versions(apt) -> None:
    specs, _ = role_install("cuda")
    assert "cuda-toolkit-12-2" in specs
    sim = apt.simulate("install", *specs)
    assert_installs(sim, specs)
    assert sim.installs["cuda-toolkit-12-2"] == "12.2.2-1" and sim.installs["cuda-cudart-12-2"] == "12.2.140-1"


@pytest.mark.parametrize("role", ["fabric_manager", "dcgm"])
@pytest.mark.parametrize("stack", ["tf-horovod", "tf-horovod-r550"])
def test_fabric_manager_and_dcgm_pins_install(apt, role, stack) -> None:
    specs, _ = role_install(role, stack)
    assert_installs(apt.simulate("install", *specs, recommends=role == "dcgm"), specs)


@pytest.mark.parametrize("stack", [
    # failed before the role named nvidia-alternative, libnvidia-ptxjitcompiler1, libnvidia-pkcs11-openssl3 and
    # nvidia-kernel-support, which its packages need at exactly their own version: apt took R550's
    "tf-horovod",
    "tf-horovod-r550",
])
def test_the_driver_roles_pins_install_with_its_pin_file(repo, tmp_path, stack) -> None:
    specs, _ = role_install("nvidia_driver", stack)
    apt = apt_for(repo, tmp_path / "apt", preferences=driver_pin_file(stack))
    assert_installs(apt.simulate("install", *specs), specs)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=CUDA_FINDING)
def test_the_cuda_roles_pins_install_from_what_nvidias_debian12_repository_carries(tmp_path) -> None:
    strict = build(tmp_path / "strict", strict=True)
    assert {p.name for p in strict.left_out} >= {"cuda-toolkit-12-2", "cuda-cudart-12-2"}
    specs, _ = role_install("cuda")
    assert_installs(apt_for(strict, tmp_path / "apt").simulate("install", *specs), specs)


@pytest.mark.parametrize("spec", [
    "libnccl2=2.18.5-1+cuda12.3",               # another CUDA's build of the right NCCL
    "libcudnn8=8.9.7.29-1+cuda12.4",
    "nvidia-fabricmanager535=535.261.03*",      # the branch without its dash
    "datacenter-gpu-manager-4-core=4.5.2-*",    # DCGM's version without its epoch 1:
    "nvidia-smi=535.261.03",                     # a driver version without the "*" the role appends
    "cuda-toolkit-12-3",                         # a toolkit the model does not carry
])
def test_a_wrong_package_spec_makes_apt_fail(apt, spec) -> None:
    sim = apt.simulate("install", spec)
    assert not sim.ok and not sim.installs, sim.output


def test_550_is_an_upgrade_of_535_and_the_roles_hold_keeps_it(repo, apt, tmp_path) -> None:
    specs, _ = role_install("nvidia_driver")
    at_535 = apt.simulate("install", *specs).installs
    indexes = [repo.nvidia / "Packages", repo.debian / "Packages"]
    for held in (set(), set(wanted(specs))):  # the role holds exactly the packages it names
        status = status_with(tmp_path / f"status-{len(held)}", indexes, at_535, held=held)
        upgrade = apt_for(repo, tmp_path / f"apt-{len(held)}", status=status).simulate("dist-upgrade")
        assert upgrade.ok, upgrade.output
        if held:
            assert not set(upgrade.installs) & set(wanted(specs)), upgrade.output
        else:
            assert upgrade.upgrades["nvidia-smi"] == "535.261.03-1"
            assert upgrade.installs["nvidia-smi"] == upgrade.installs["libnvidia-ml1"] == "550.163.01-1"


def test_one_fabric_manager_branch_at_a_time(repo, apt, tmp_path) -> None:
    """NVIDIA's packaging: every branch's package provides, replaces and conflicts with nvidia-fabricmanager, so
    installing the 550 one removes the 535 one (both ship /usr/bin/nv-fabricmanager); without those relations apt
    would keep both and dpkg would refuse the second's files."""
    specs, _ = role_install("fabric_manager")
    at_535 = apt.simulate("install", *specs).installs
    status = status_with(tmp_path / "status", [repo.nvidia / "Packages", repo.debian / "Packages"], at_535)
    specs_550, _ = role_install("fabric_manager", "tf-horovod-r550")
    move = apt_for(repo, tmp_path / "apt-550", status=status).simulate("install", *specs_550)
    assert move.ok and move.installs["nvidia-fabricmanager-550"] == "550.163.01-1", move.output
    assert "Remv nvidia-fabricmanager-535 [535.261.03-1]" in move.output, move.output


# ------------------------------------------------------------------------------------------------ the stand-ins
@pytest.mark.parametrize("name,version,key,path", [
    ("cuda-cudart-12-2", "12.2.140-1", "cudart", "usr/local/cuda-12.2/targets/x86_64-linux/lib/libcudart.so.12"),
    ("cuda-cudart-12-4", "12.4.127-1", "cudart", "usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12"),
    ("libcudnn8", "8.9.7.29-1+cuda12.2", "cudnn", "usr/lib/x86_64-linux-gnu/libcudnn.so.8"),
    ("libnccl2", "2.18.5-1+cuda12.2", "nccl", "usr/lib/x86_64-linux-gnu/libnccl.so.2"),
])
def test_the_agents_probe_reads_each_librarys_package_version(repo, tmp_path, name, version, key, path) -> None:
    root = repo.unpack(name, version, tmp_path)
    # what the agent reports: CUDA as major.minor, cuDNN and NCCL as major.minor.patch, of the package's version
    expected = ".".join(version.split("-")[0].split(".")[:2 if key == "cudart" else 3])
    assert probe_version(str(root / path), key, timeout=30)["version"] == expected


def test_nccl_h_declares_what_libnccl_exports(repo, tmp_path) -> None:
    root = repo.unpack("libnccl2", "2.18.5-1+cuda12.2", tmp_path)
    repo.unpack("libnccl-dev", "2.18.5-1+cuda12.2", tmp_path)
    program = tmp_path / "version.c"
    program.write_text('#include <nccl.h>\n#include <stdio.h>\nint main(void) { int v = 0;\n'
                       '  if (ncclGetVersion(&v) != ncclSuccess) return 2;\n'
                       '  printf("%d %d\\n", v, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));\n'
                       '  return v != NCCL_VERSION_CODE; }\n')
    lib = root / "usr/lib/x86_64-linux-gnu"
    subprocess.run(["gcc", f"-I{root / 'usr/include'}", str(program), f"-L{lib}", "-lnccl", "-o",
                    str(tmp_path / "version")], check=True, timeout=60)
    done = subprocess.run([str(tmp_path / "version")], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, LD_LIBRARY_PATH=str(lib)))
    assert done.returncode == 0 and done.stdout.split() == ["21805", "21805"], done.stdout + done.stderr


@pytest.mark.parametrize("dash,release", [("12-2", "release 12.2, V12.2.140"), ("12-4", "release 12.4, V12.4.131")])
def test_nvcc_prints_its_release_as_nvidias_does(repo, tmp_path, dash, release) -> None:
    pkg = next(p for p in repo.packages if p.name == f"cuda-nvcc-{dash}")
    root = repo.unpack(pkg.name, pkg.version, tmp_path)
    dot = dash.replace("-", ".")
    done = subprocess.run([str(root / f"usr/local/cuda-{dot}/bin/nvcc"), "--version"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and f"Cuda compilation tools, {release}\n" in done.stdout
    assert f"release {dot}," in done.stdout  # what roles/cuda's nvcc check looks for


NVML_QUERY = ("import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlSystemGetDriverVersion(), "
              "pynvml.nvmlSystemGetCudaDriverVersion(), pynvml.nvmlDeviceGetCount())")


@pytest.mark.parametrize("version,cuda", [("535.261.03", "12020"), ("550.163.01", "12040")])
def test_the_driver_packages_nvml_answers_the_packages_own_version(repo, tmp_path, version, cuda) -> None:
    root = repo.unpack("libnvidia-ml1", f"{version}-1", tmp_path / "root")
    current = root / "usr/lib/x86_64-linux-gnu/nvidia/current"
    scenario = tmp_path / "host.scn"  # a host's GPUs, then what the installed driver package says it is
    scenario.write_text(f"include = {REPO / 'lab/scenarios/h100-1gpu.scn'}\n"
                        f"include = {current / 'gpucheck-fakenvml-driver.scn'}\n")
    env = dict(os.environ, LD_LIBRARY_PATH=str(current), FAKENVML_SCENARIO=str(scenario))
    done = subprocess.run([sys.executable, "-c", NVML_QUERY], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [version, cuda, "1"]
    smi = repo.unpack("nvidia-smi", f"{version}-1", tmp_path / "smi") / "usr/lib/nvidia/current/nvidia-smi"
    header = subprocess.run([str(smi)], capture_output=True, text=True, timeout=30).stdout.splitlines()[1]
    assert f"Driver Version: {version}" in header and len(header) == 89


def test_every_package_says_what_it_stands_in_for_and_what_is_missing(repo, tmp_path) -> None:
    for pkg in repo.packages:
        listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(repo.nvidia / pkg.filename)],
                                 capture_output=True, timeout=60, check=True).stdout
        assert f"./usr/share/doc/{pkg.name}/STAND-IN".encode() in listing, pkg.name
        if pkg.payload["kind"] == "placeholder":
            assert b"Still missing (a later step of issue 20): " + pkg.payload["missing"].encode() in listing
