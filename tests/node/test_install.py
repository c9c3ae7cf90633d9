"""Packaging as a user meets it: the wheel carries the repository's profiles, and `pip install .` in a fresh
virtualenv gives a working `gpucheck` that finds them in the installed package (not in the checkout, not in
/etc/gpucheck).

Both tests build from a copy of the checkout without its build leftovers: setuptools reuses build/lib, so a
wheel built in place could carry a stale file that the source no longer has (or hide one it lacks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gpucheck import __version__
from gpucheck.profiles import SKU_TABLE_FILE
from support import ROOT, run_gpucheck

# What .gitignore keeps out of a clone (plus the repository itself): a copy without them is what CI builds from.
NOT_IN_A_CLONE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                        ".pytest_cache", ".ruff_cache", "reports")
SYSTEM_PROFILES = Path("/etc/gpucheck/checks")  # searched before the package's own (profiles.search_dirs)
PROFILE_LINE = re.compile(r"^\s*(\S+)\s.*\[(.+)\]\s*$")  # `gpucheck profiles`: name, description, [path]


def repository_profiles() -> dict[str, bytes]:
    """checks/*.yaml: the profiles and the GPU SKU table (SKU_TABLE_FILE), all of them shipped in the wheel."""
    profiles = {p.name: p.read_bytes() for p in sorted((ROOT / "checks").glob("*.yaml"))}
    assert len(profiles) >= 8 and SKU_TABLE_FILE in profiles, f"checks/ holds only {sorted(profiles)}"
    return profiles


def clean_source(dst: Path) -> Path:
    """The checkout as a clone has it; agent/gpucheck/checks stays a link to ../../checks."""
    shutil.copytree(ROOT, dst, symlinks=True, ignore=NOT_IN_A_CLONE)
    return dst


def pip_env() -> dict[str, str]:
    """The caller's pip settings (index, find-links, cache) but nothing that would import the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(argv: list, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`pip wheel .` of a clean copy of the checkout, the way `pip install .` builds it (isolated build): the
    wheel, and what the build backend said (-v: pip shows the backend's own output only then)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = clean_source(tmp / "src")
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", tmp / "dist", source], env=pip_env())
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    [found] = (tmp / "dist").glob("gpucheck-*.whl")
    return found, built.stdout + built.stderr


@pytest.fixture(scope="module")
def wheel(wheel_build: tuple[Path, str]) -> Path:
    return wheel_build[0]


def test_the_build_warns_of_nothing_deprecated(wheel_build: tuple[Path, str]) -> None:
    """pyproject.toml as the build backend wants it now (e.g. `license` an SPDX string, not a table)."""
    warnings = [line.strip() for line in wheel_build[1].splitlines()
                if "DeprecationWarning" in line or "BuildBackendWarning" in line or "is deprecated" in line]
    assert warnings == [], "\n".join(warnings)


def test_package_ships_its_profiles(wheel: Path) -> None:
    """Every checks/*.yaml is in the built wheel under gpucheck/checks/, byte for byte, and nothing else is."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name.removeprefix("gpucheck/checks/"): archive.read(name) for name in archive.namelist()
                   if name.startswith("gpucheck/checks/")}
    repo = repository_profiles()
    assert sorted(shipped) == sorted(repo), f"wheel {wheel.name} has gpucheck/checks/ = {sorted(shipped)}"
    for name, data in repo.items():
        assert shipped[name] == data, f"gpucheck/checks/{name} in the wheel differs from checks/{name}"


def test_pip_install_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    """A full, non-editable `pip install` of the checkout's wheel (dependencies included, from pip's index) into a
    new venv; the installed `gpucheck` run from outside the checkout, with no PYTHONPATH and no
    GPUCHECK_PROFILES_DIR, lists every repository profile from the installed package and every check the
    checkout has."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)  # this venv's pip installs into it (`--python`): no ensurepip run
    python, gpucheck = env_dir / "bin" / "python", env_dir / "bin" / "gpucheck"
    installed = run([sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel], env=pip_env(),
                    cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]

    away = tmp_path / "elsewhere"  # neither the checkout nor the copy it was installed from
    away.mkdir()
    env = {"PATH": f"{env_dir / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(away), "LANG": "C.UTF-8"}
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       env=env, cwd=away).stdout.strip()).resolve()
    assert purelib.is_relative_to(env_dir.resolve()), purelib
    package = purelib / "gpucheck"
    assert not (package / "checks").is_symlink(), "the installed package links back to the checkout"

    version = run([gpucheck, "--version"], env=env, cwd=away, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"gpucheck {__version__}", version

    listing = run([gpucheck, "profiles", "--no-detect"], env=env, cwd=away, timeout=60)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    listed = {m[1]: Path(m[2]) for m in map(PROFILE_LINE.match, listing.stdout.splitlines()) if m}
    for name, data in repository_profiles().items():
        if name == SKU_TABLE_FILE:
            continue  # not a profile: found below
        profile = name.removesuffix(".yaml")
        assert profile in listed, f"{profile} not listed by the installed gpucheck:\n{listing.stdout}"
        path = listed[profile].resolve()
        shadow = f" ({SYSTEM_PROFILES} exists on this machine and shadows it)" if SYSTEM_PROFILES.is_dir() else ""
        assert path == package / "checks" / name, f"{profile} found at {path}, not in the installed package{shadow}"
        assert path.read_bytes() == data, f"installed {path} differs from checks/{name}"

    assert "gpus" not in listed, listing.stdout
    table = run([python, "-c", "from gpucheck import skus; print(skus.load().path)"], env=env, cwd=away, timeout=60)
    assert table.returncode == 0, table.stdout + table.stderr
    shadow = f" ({SYSTEM_PROFILES} exists on this machine)" if (SYSTEM_PROFILES / SKU_TABLE_FILE).is_file() else ""
    assert Path(table.stdout.strip()).resolve() == package / "checks" / SKU_TABLE_FILE, table.stdout + shadow

    checks = run([gpucheck, "checks"], env=env, cwd=away, timeout=60)
    assert checks.returncode == 0, checks.stdout + checks.stderr
    from_checkout = run_gpucheck(["checks"])
    assert from_checkout.returncode == 0 and from_checkout.stdout.count("\n") > 20, from_checkout
    assert checks.stdout == from_checkout.stdout, "the installed package lists other checks than the checkout"

    node = run([gpucheck, "node", "--only", "host", "--profile", "dgx-h100", "--format", "json"], env=env,
               cwd=away, timeout=120)
    assert node.returncode in (0, 1, 2), node.stdout[-2000:] + node.stderr[-2000:]
    report = json.loads(node.stdout)
    assert report["profile"] == "dgx-h100"
    assert report["results"] and all(r["check"].startswith("host.") for r in report["results"]), report["results"]


def test_no_ansible_core_that_can_template_data_is_allowed() -> None:
    """CVE-2023-5764 (data templated as code, fixed in 2.16.1) and CVE-2024-11079 (hostvars, fixed in 2.16.14,
    2.17.7, 2.18.1); 2.17 left out whole (its end came before its last fix). `cluster` and `test` agree."""
    extras = dict(re.findall(r'^(cluster|test) = \[.*"(ansible-core[^"]*)"', (ROOT / "pyproject.toml").read_text(),
                             re.M))
    assert set(extras) == {"cluster", "test"} and extras["cluster"] == extras["test"], extras
    spec = Requirement(extras["cluster"]).specifier
    for unsafe in ("2.16.0", "2.16.13", "2.17.7", "2.17.14", "2.18.0"):
        assert not spec.contains(unsafe), unsafe
    for fixed in ("2.16.14", "2.18.1", "2.19.14"):
        assert spec.contains(fixed), fixed
