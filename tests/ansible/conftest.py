"""Fixtures for the Ansible tests: the tools, and how to run them against this repository."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab import module_bytecode

REPO = Path(__file__).resolve().parents[2]
# apt's binary cache (pkgcache.bin), which a Debian image built for containers switches off
# (/etc/apt/apt.conf.d/docker-clean: `Dir::Cache::pkgcache "";`): then every apt task of a check-mode run rebuilds it
# from the package lists, ~0.5 CPU-s each (measured: 72 -> 61 CPU-s for site.yml --check on this host). A plain Debian
# keeps it; the tests give it back to the Ansible runs they start.
APT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucheck" / "apt"
# Compiled module_utils for the modules Ansible runs on this machine (lab/module_bytecode/usercustomize.py says why).
MODULE_BYTECODE = APT_CACHE.parent / "ansible-module-bytecode"


@functools.cache
def apt_config_with_binary_cache() -> str | None:
    """An APT_CONFIG file: this machine's apt settings, then the binary cache kept in APT_CACHE. None where apt
    already keeps it (or there is no apt): the tests then leave apt as it is."""
    if not shutil.which("apt-config"):
        return None
    dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, timeout=60, check=False).stdout
    if 'Dir::Cache::pkgcache "";' not in dump.splitlines():
        return None
    parts = Path(next((line.split('"')[1] for line in dump.splitlines()
                       if line.startswith("Dir::Etc::parts ")), "apt.conf.d"))
    parts = parts if parts.is_absolute() else Path("/etc/apt") / parts
    files = sorted(f for f in parts.iterdir() if f.is_file()) if parts.is_dir() else []
    key = hashlib.sha256(b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files)).hexdigest()[:16]
    copy = APT_CACHE / f"parts-{key}"
    conf = APT_CACHE / f"apt-{key}.conf"
    if not conf.exists():  # several workers may get here at once: each writes its own copy, then renames it in
        staging = APT_CACHE / f".parts-{key}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for f in files:
            shutil.copyfile(f, staging / f.name)
        # read after every part (their names sort before it): the binary caches back, in a directory of their own
        (staging / "zz-gpucheck-tests-binary-cache").write_text(
            f'Dir::Cache::pkgcache "{APT_CACHE}/pkgcache.bin";\n'
            f'Dir::Cache::srcpkgcache "{APT_CACHE}/srcpkgcache.bin";\n')
        try:
            staging.rename(copy)
        except OSError:  # another worker's copy is there: the same files
            shutil.rmtree(staging, ignore_errors=True)
        written = APT_CACHE / f".apt-{key}.conf.{os.getpid()}"
        written.write_text(f'Dir::Etc::parts "{copy}";\n')
        written.replace(conf)
    return str(conf)


RECAP_RE = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


class AnsibleRepo:
    """Runs ansible-playbook, ansible and ansible-lint from this venv against the repository."""

    repo = REPO
    # Everything this repository's Ansible content is made of (other paths belong to other tools).
    content = ["site.yml", "playbooks", "roles", "inventory/prod", "inventory/lab/group_vars"]

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    @staticmethod
    def tool(name: str) -> str:
        beside = Path(sys.executable).parent / name
        if beside.exists():
            return str(beside)
        found = shutil.which(name)
        if not found:
            pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
        return found

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_LOCAL_TEMP=str(self.tmp_path / "ansible-local"),
            ANSIBLE_LOCALHOST_WARNING="0",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        )
        MODULE_BYTECODE.mkdir(parents=True, exist_ok=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(module_bytecode.SOURCE.parent), env.get("PYTHONPATH")]))
        env["GPUCHECK_TESTS_MODULE_BYTECODE"] = str(MODULE_BYTECODE)
        apt_config = apt_config_with_binary_cache()
        if apt_config:
            env["APT_CONFIG"] = apt_config
        return env

    def run(self, tool: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.tool(tool), *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    @staticmethod
    def recap(output: str) -> dict[str, dict[str, int]]:
        """PLAY RECAP lines as {host: {ok, changed, unreachable, failed}} (idempotency checks)."""
        return {
            m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
            for m in RECAP_RE.findall(output)
        }

    def lab_inventory(self, hosts: dict[str, dict], **extra_vars: object) -> Path:
        """A lab-shaped inventory (the shape lab/inventory.py writes) with the repo's lab group_vars."""
        directory = self.tmp_path / "lab-inventory"
        directory.mkdir(parents=True, exist_ok=True)
        doc = {
            "all": {
                "vars": {"lab_proxy_url": "http://10.77.0.1:3128", "lab_cluster_network": "10.77.0.0/24", **extra_vars},
                "children": {"admin": {"hosts": {}}, "gpu_nodes": {"hosts": hosts}},
            }
        }
        (directory / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
        shutil.copytree(REPO / "inventory" / "lab" / "group_vars", directory / "group_vars", dirs_exist_ok=True)
        return directory


@pytest.fixture
def ansible_repo(tmp_path: Path) -> AnsibleRepo:
    return AnsibleRepo(tmp_path)


@pytest.fixture(scope="module")
def shared_ansible_repo(tmp_path_factory) -> AnsibleRepo:
    """For a module fixture whose one ansible-playbook run several tests read."""
    return AnsibleRepo(tmp_path_factory.mktemp("ansible"))
