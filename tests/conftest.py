"""Shared fixtures: the repo on sys.path, fake tools on PATH, and this run's own temporary directory for every
process the tests start (private_tmpdir). Helpers live in support.py.

Under CI (the CI variable true) a run that collected lab tests must run them all: see LabEvidence."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for path in (str(Path(__file__).resolve().parent), str(ROOT / "agent"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)


def cuda_devices() -> int:
    """How many CUDA devices CuPy sees, asked in a child process (CUDA is never initialised in pytest's own)."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return 0
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run real CUDA kernels: skipped, saying so, where CuPy sees no CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and cuda_devices() == 0:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="no CUDA device (CuPy sees none): a `gpu` test"))


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR (and tempfile's default here) is a directory of this run's own, under pytest's base directory: what
    the programs the tests start leave in their temporary directory (TensorFlow's __autograph_generated_file*.py,
    torchrun's torchelastic_*, ansible-lint's playbooks, OpenMPI's session directory) goes with the run's other
    temporary files (removed when the run passes: pyproject.toml's tmp_path_retention_policy), never into /tmp.
    A short name: OpenMPI builds its session paths under it."""
    directory = tmp_path_factory.mktemp("tmp", numbered=False)
    before, before_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(directory)
    try:
        yield directory
    finally:
        tempfile.tempdir = before_tempdir
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


@pytest.fixture(scope="session", autouse=True)
def private_history(private_tmpdir: Path) -> Iterator[Path]:
    """GPUCHECK_HISTORY is this run's own store: every `gpucheck cluster` the tests run records its run there,
    never in the user's ~/.local/state/gpucheck/history.sqlite."""
    path = private_tmpdir / "history.sqlite"
    before = os.environ.get("GPUCHECK_HISTORY")
    os.environ["GPUCHECK_HISTORY"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("GPUCHECK_HISTORY", None)
        else:
            os.environ["GPUCHECK_HISTORY"] = before


@pytest.fixture
def fake_bin(tmp_path: Path):
    """Make executables that replay a recorded output and exit code: fake_bin.add('ibstat', text, code)."""

    class FakeBin:
        dir = tmp_path / "fakebin"

        def add(self, name: str, stdout: str = "", exit_code: int = 0, sleep: float = 0) -> Path:
            self.dir.mkdir(exist_ok=True)
            out = self.dir / f"{name}.out"
            out.write_text(stdout)
            script = self.dir / name
            pause = f"sleep {sleep}\n" if sleep else ""
            script.write_text(f"#!/bin/sh\n{pause}cat '{out}'\nexit {exit_code}\n")
            script.chmod(script.stat().st_mode | stat.S_IEXEC)
            return script

        def path(self) -> str:
            self.dir.mkdir(exist_ok=True)
            return f"{self.dir}{os.pathsep}{os.environ.get('PATH', '')}"

    return FakeBin()


class LabEvidence:
    """The lab tests are the end-to-end evidence, so under CI a run that collected any test marked `lab` and then
    skipped (xfail included) or deselected one of them fails at the end, whatever else passed, and says which
    and why. A run that collected none (`pytest tests/node`) is not concerned."""

    def __init__(self) -> None:
        self.lab: set[str] = set()
        self.not_run: dict[str, str] = {}

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if item.get_closest_marker("lab"):
            self.lab.add(item.nodeid)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.get_closest_marker("lab"):
                self.not_run[item.nodeid] = "deselected"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and report.nodeid in self.lab:
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else f"xfail {report.wasxfail}"
            self.not_run.setdefault(report.nodeid, f"skipped: {why.removeprefix('Skipped: ')}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.not_run and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.not_run:
            terminalreporter.write_sep("=", f"CI: {len(self.not_run)} lab test(s) did not run: the run fails",
                                       red=True, bold=True)
            for nodeid, why in self.not_run.items():
                terminalreporter.write_line(f"{nodeid}: {why}")


def pytest_configure(config: pytest.Config) -> None:
    from labkit import ci

    if ci():
        config.pluginmanager.register(LabEvidence(), "gpucheck-lab-evidence")


@pytest.fixture(scope="module")
def fabric_manager(tmp_path_factory):
    """A process named nv-fabricmanager, as on an NVSwitch system (the check looks for it by name)."""
    exe = tmp_path_factory.mktemp("fm") / "nv-fabricmanager"
    shutil.copy(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "600"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()
