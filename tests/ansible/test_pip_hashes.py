"""pip installs in the roles are hash-checked, or local-only, or listed here with the reason they are not.

The locks (written by docs/pip_locks.py, which resolves them on PyPI) are checked for their shape and
against what they lock: the stacks' pins in versions.yml, Horovod's version, the agent's dependencies
in pyproject.toml. No test here reaches PyPI: `python docs/pip_locks.py --verify` does that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from labkit import debian12_with_apt_bindings

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "roles" / "frameworks" / "files" / "locks"
AGENT_LOCK = REPO / "roles" / "gpucheck_agent" / "files" / "requirements.lock"
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})$")

# pip uses that fetch from an index without a hash check, and why. (role, tasks file, task name start)
UNHASHED = {
    ("frameworks", "stack.yml", "Install the packages of stack"):
        "a stack without pip_lock: pins only. The torch stack's wheels come from download.pytorch.org (~15 CUDA "
        "wheels of GBs each, an index this project cannot reach to hash), so no lock covers it yet",
    ("frameworks", "horovod.yml", "Install Horovod's own requirements"):
        "only for a stack without pip_lock; a locked stack has them in its lock (installed hashed)",
    ("gpucheck_agent", "install.yml", "Install the agent and its dependencies in its own virtualenv (no lock)"):
        "only with gpucheck_agent_requirements_lock: '' (a site whose index serves other versions)",
    ("gpucheck_agent", "build.yml", "Build the agent wheel"):
        "the controller builds this checkout (--no-deps); pip fetches the build backend (setuptools) for its "
        "isolated build unhashed (pip applies no hashes to build dependencies); gpucheck_agent_build_args: "
        "[--no-build-isolation] builds with the controller's own setuptools instead",
    ("gpucheck_agent", "gpu_extra.yml", "Install the gpu extra from the index (no lock)"):
        "only with gpucheck_agent_gpu_extra_locked: false (a site whose index serves other versions)",
    ("gpucheck_agent", "gpu_extra.yml", "Remove the CuPy wheel of the other CUDA major"):
        "pip uninstall (state: absent): nothing comes from an index",
    ("gpucheck_agent", "main.yml", "Reinstall the gpucheck agent"):
        "the handler reinstalls the local wheel with --no-deps: nothing comes from an index",
}
READ_ONLY = {"check", "list", "freeze", "show"}


def tasks_in(path: Path):
    def walk(items):
        for task in items or []:
            if isinstance(task, dict):
                yield task
                for key in ("block", "rescue", "always"):
                    yield from walk(task.get(key))
    yield from walk(yaml.safe_load(path.read_text()))


def pip_uses() -> list[tuple[tuple[str, str, str], str]]:
    """((role, file, task name), how it calls pip) for every task that runs pip."""
    uses = []
    for path in sorted((REPO / "roles").glob("*/*/*.yml")):
        if path.parent.name not in ("tasks", "handlers"):
            continue
        for task in tasks_in(path):
            key = (path.parent.parent.name, path.name, task.get("name", ""))
            if "ansible.builtin.pip" in task:
                args = task["ansible.builtin.pip"]
                uses.append((key, f"pip module: extra_args={args.get('extra_args', '')!s}"))
            elif "ansible.builtin.command" in task:
                argv = task["ansible.builtin.command"].get("argv", "")
                text = argv if isinstance(argv, str) else " ".join(map(str, argv))
                if re.search(r"(/bin/pip\b|'pip'|\bpip\b)", text):
                    uses.append((key, f"command: {text}"))
    return uses


def allowed_reason(key: tuple[str, str, str]) -> str | None:
    role, file, name = key
    return next((reason for (r, f, start), reason in UNHASHED.items()
                 if r == role and f == file and name.startswith(start)), None)


def test_every_pip_install_is_hash_checked_local_or_explained() -> None:
    uses = pip_uses()
    assert len(uses) >= 8, uses
    unexplained = []
    for key, how in uses:
        words = set(re.findall(r"[\w-]+", how))
        if "--require-hashes" in how or "--no-index" in how or words & READ_ONLY and "install" not in words:
            continue
        if allowed_reason(key) is None:
            unexplained.append(f"{'/'.join(key[:2])}: {key[2]!r} ({how})")
    assert unexplained == [], "pip fetches from an index without hashes:\n" + "\n".join(unexplained)


def test_every_exception_still_exists() -> None:
    keys = [key for key, _ in pip_uses()]
    for role, file, start in UNHASHED:
        assert any(k[0] == role and k[1] == file and k[2].startswith(start) for k in keys), (role, file, start)


def test_the_hashed_paths_are_the_default_ones() -> None:
    """Locked is what runs unless a site opts out: the agent's lock is on by default, the frameworks role
    hash-checks a locked stack and the Horovod sdist of the catalog's version."""
    install = (REPO / "roles" / "gpucheck_agent" / "tasks" / "install.yml").read_text()
    assert "gpucheck_agent_requirements_lock | default('requirements.lock')" in install
    stack = (REPO / "roles" / "frameworks" / "tasks" / "stack.yml").read_text()
    assert "--require-hashes --only-binary :all:" in stack and "pip_lock" in stack
    horovod = (REPO / "roles" / "frameworks" / "tasks" / "horovod.yml").read_text()
    assert "'--require-hashes', '-r'" in horovod


# ------------------------------------------------------------------------------------------ locks
def read_lock(path: Path) -> tuple[dict[str, str], list[str], dict[str, set[str]]]:
    """(header fields, top-level requirements, {name==version[;marker]: hashes}) of a lock file."""
    text = path.read_text()
    header = dict(re.findall(r"^# ([A-Z][\w ]*?): (.*)$", text, re.MULTILINE))
    pins: dict[str, set[str]] = {}
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        body = line.rstrip(" \\").strip()
        if not line.startswith(" "):
            match = re.fullmatch(r"([a-z0-9][a-z0-9.-]*==[\w.+!-]+)( ; python_version == \"3\.\d+\"( or .*)?)?", body)
            assert match, f"{path.name}:{number}: not a pinned requirement: {line!r}"
            assert canonicalize_name(body.split("==")[0]) == body.split("==")[0], f"{path.name}:{number}: not canonical"
            current = body
            assert current not in pins, f"{path.name}:{number}: {current} twice"
            pins[current] = set()
        else:
            match = HASH.fullmatch(body)
            assert match and current, f"{path.name}:{number}: expected --hash=sha256:<64 hex>, got {line!r}"
            pins[current].add(match.group(1))
    assert pins and all(pins.values()), f"{path.name}: a requirement without a hash"
    return header, header.get("Requirements", "").split(), pins


def versions_of(pins: dict[str, set[str]]) -> dict[str, str]:
    return {pin.split("==")[0]: pin.split("==")[1].split(" ;")[0] for pin in pins}


GPU_LOCKS = sorted(AGENT_LOCK.parent.glob("gpu-*.lock"))
ALL_LOCKS = sorted(LOCKS.glob("*.txt")) + [AGENT_LOCK] + GPU_LOCKS


@pytest.mark.parametrize("path", ALL_LOCKS, ids=[p.name for p in ALL_LOCKS])
def test_a_lock_is_pins_with_hashes_and_says_how_it_was_made(path: Path) -> None:
    header, requirements, pins = read_lock(path)
    assert header.get("Generated by", "").startswith("`python docs/pip_locks.py "), header
    assert requirements, f"{path.name}: no '# Requirements:' line"
    assert "--require-hashes" in header.get("Install", "")
    for requirement in requirements:  # every top-level requirement is locked, at its pin if it has one
        req = Requirement(requirement)
        version = versions_of(pins).get(canonicalize_name(req.name))
        assert version is not None, f"{path.name}: {requirement} is not locked"
        assert req.specifier.contains(version, prereleases=True), f"{path.name}: {requirement} locked at {version}"


def catalog(site: str) -> dict:
    return yaml.safe_load((REPO / "inventory" / site / "group_vars" / "all" / "versions.yml").read_text())[
        "gpu_stack_catalog"]


def stack_requirements(stack: dict) -> list[str]:
    return list(stack["pip_packages"]) + list((stack.get("horovod") or {}).get("requirements") or [])


@pytest.mark.parametrize(("site", "name", "lock"), [("prod", "tf-horovod", "tf-horovod.txt"),
                                                    ("lab", "tf-horovod", "tf-horovod-cpu.txt")])
def test_a_stack_lock_locks_exactly_the_stacks_pins(site: str, name: str, lock: str) -> None:
    """The lock was made from the catalog as it is: regenerate it (docs/pip_locks.py) when a pin changes."""
    stack = catalog(site)[name]
    _, requirements, pins = read_lock(LOCKS / lock)
    assert requirements == stack_requirements(stack)
    versions = versions_of(pins)
    for pin in stack["pip_packages"]:
        package, version = pin.split("==")
        assert versions[canonicalize_name(package)] == version, pin
    assert stack.get("pip_lock", lock) == lock, f"{site}/{name} names another lock"


@pytest.mark.parametrize("site", ["prod", "lab"])
def test_every_lock_a_catalog_names_exists_and_matches(site: str) -> None:
    for name, stack in catalog(site).items():
        if not stack.get("pip_lock"):
            continue
        _, requirements, _ = read_lock(LOCKS / stack["pip_lock"])
        assert requirements == stack_requirements(stack), f"{site}/{name}: {stack['pip_lock']} is for other pins"


def test_the_horovod_source_is_hash_locked_for_the_catalogs_version() -> None:
    versions = {stack["horovod"]["version"] for site in ("prod", "lab") for stack in catalog(site).values()
                if stack.get("horovod")}
    for version in versions:
        _, requirements, pins = read_lock(LOCKS / f"horovod-{version}.txt")
        assert requirements == [f"horovod=={version}"]
        assert list(pins) == [f"horovod=={version}"] and len(pins[f"horovod=={version}"]) == 1  # the one sdist


def test_the_agent_lock_covers_pyproject_dependencies() -> None:
    block = re.search(r"^dependencies = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.M | re.S).group(1)
    dependencies = re.findall(r'^\s*"([^"]+)"', block, re.M)
    _, requirements, pins = read_lock(AGENT_LOCK)
    assert [canonicalize_name(Requirement(r).name) for r in requirements] == \
        [canonicalize_name(Requirement(d).name) for d in dependencies], "regenerate: python docs/pip_locks.py agent"
    versions = versions_of(pins)
    for dependency in map(Requirement, dependencies):
        assert dependency.specifier.contains(versions[canonicalize_name(dependency.name)]), dependency
    assert not any(" ; " in pin for pin in pins)  # one set for python 3.10-3.12


def test_the_gpu_extra_has_a_lock_per_cupy_wheel_at_the_roles_version() -> None:
    """One lock per wheel the role can choose, each pinning CuPy at gpucheck_agent_cupy_version, for every
    python an agent virtualenv has (Ubuntu 22.04 3.10, Debian 12 and RHEL 9 3.11, Ubuntu 24.04 3.12)."""
    defaults = yaml.safe_load((REPO / "roles" / "gpucheck_agent" / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((REPO / "roles" / "gpucheck_agent" / "meta" / "argument_specs.yml").read_text())
    wheels = [c for c in spec["argument_specs"]["main"]["options"]["gpucheck_agent_gpu_extra"]["choices"]
              if c.startswith("cupy-")]
    assert [p.name for p in GPU_LOCKS] == [f"gpu-{wheel}.lock" for wheel in sorted(wheels)]
    for wheel in wheels:
        header, requirements, pins = read_lock(AGENT_LOCK.parent / f"gpu-{wheel}.lock")
        assert requirements == [f"{wheel}=={defaults['gpucheck_agent_cupy_version']}"], "regenerate: docs/pip_locks.py"
        assert versions_of(pins)[wheel] == defaults["gpucheck_agent_cupy_version"]
        assert "CPython 3.10, 3.11, 3.12 on manylinux x86_64" in header["Resolved"]
        assert len(pins[f"{wheel}=={defaults['gpucheck_agent_cupy_version']}"]) == 3  # cp310, cp311, cp312
    assert defaults["gpucheck_agent_gpu_extra_locked"] is True


def test_the_lab_installs_what_its_lock_was_made_for() -> None:
    """Lab hosts: Debian 12, CPython 3.11, x86_64 (DESIGN.md); the lab's lock was resolved for it."""
    header, _, _ = read_lock(LOCKS / "tf-horovod-cpu.txt")
    pythons = re.match(r"CPython ([\d., ]+) on manylinux x86_64", header["Resolved"]).group(1)
    assert "3.11" in [p.strip() for p in pythons.split(",")]


# ----------------------------------------------------------------------------- the role, for real
@pytest.mark.skipif(not debian12_with_apt_bindings(), reason="needs root, Debian 12, python3-apt, python3-packaging")
def test_frameworks_role_checks_a_stacks_lock_against_its_pins(ansible_repo) -> None:
    """--check on this host with the lab's catalog: a lock with the stack's pins is copied and installed with
    --require-hashes; a lock that lacks a pin stops the role naming it, before anything is installed."""
    lab = catalog("lab")
    bad_lock = ansible_repo.tmp_path / "stale.txt"
    bad_lock.write_text(re.sub(r"(?m)^wheel==.*\n(    --hash.*\n)*", "", (LOCKS / "tf-horovod-cpu.txt").read_text()))
    runs = {}
    for label, lock in (("good", "tf-horovod-cpu.txt"), ("stale", str(bad_lock))):
        stacks = {"tf-horovod": {**lab["tf-horovod"], "pip_lock": lock}}
        playbook = ansible_repo.tmp_path / f"{label}.yml"
        playbook.write_text(yaml.safe_dump([{"name": "Frameworks", "hosts": "localhost", "gather_facts": True,
                                             "roles": [{"role": "frameworks"}]}]))
        inventory = ansible_repo.tmp_path / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
            "controller_cache_dir": str(ansible_repo.tmp_path / "cache")}}}}))
        extra = {"gpu_stack_catalog": stacks, "gpu_stacks": ["tf-horovod"], "frameworks_verify": False,
                 "frameworks_prefix": str(ansible_repo.tmp_path / "stacks")}
        done = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), str(playbook),
                                "-e", json.dumps(extra), timeout=600)
        runs[label] = (done.returncode, " ".join((done.stdout + done.stderr).split()))
    code, output = runs["good"]
    assert code == 0, output[-4000:]
    assert "TASK [frameworks : Install from its lock, hash-checked, stack tf-horovod]" in output
    assert re.search(r"TASK \[frameworks : Install the packages of stack tf-horovod\] \**\s*skipping", output)
    assert "TASK [frameworks : Install Horovod's own requirements from the package index] " in output
    assert re.search(r"Install Horovod's own requirements from the package index\] \**\s*skipping", output)
    code, output = runs["stale"]
    assert code != 0
    assert f"Stack tf-horovod: its pip_lock {bad_lock} lacks wheel==0.45.1" in output, output[-4000:]
