"""Fixtures for the fake NVML tests: the built library and pynvml run in a subprocess.

Every NVML call happens in a child process (never in the pytest process): loading a library
whose soname is libnvidia-ml.so.1 here would answer other tests' ``pynvml.nvmlInit()``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for entry in (str(ROOT), str(HERE)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from fakenvml_helpers import PROBE, ProbeResult, Watcher, parse_lines  # noqa: E402

from lab.fakenvml import build_library, env_for, scenario_path  # noqa: E402


@pytest.fixture(scope="session")
def libdir() -> Path:
    return build_library()


@pytest.fixture
def run_probe(libdir: Path):
    """``run_probe(scenario, *probe_args, trace=None, timeout=60) -> ProbeResult``."""

    def run(scenario: str | Path, *args: str, trace: Path | None = None, timeout: float = 60) -> ProbeResult:
        path = scenario if isinstance(scenario, Path) else scenario_path(scenario)
        proc = subprocess.run(
            [sys.executable, str(PROBE), *args],
            env=env_for(path, libdir, trace), capture_output=True, text=True, timeout=timeout, check=False,
        )
        assert proc.returncode == 0, f"probe failed ({proc.returncode}):\n{proc.stderr}"
        return ProbeResult(parse_lines(proc.stdout), proc.stderr)

    return run


@pytest.fixture
def run_python(libdir: Path):
    """Run a Python snippet against the fake: ``run_python(code, scenario, **kw) -> CompletedProcess``."""

    def run(code: str, scenario: str | Path, *, trace: Path | None = None, timeout: float = 60,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        path = scenario if isinstance(scenario, Path) else scenario_path(scenario)
        env = env_for(path, libdir, trace)
        env.update(extra_env or {})
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    return run


@pytest.fixture
def watch(libdir: Path, tmp_path: Path) -> Iterator:
    """``watch(scenario) -> Watcher``: a process initialised on the scenario, killed after the test."""
    started: list[Watcher] = []

    def start(scenario: Path) -> Watcher:
        started.append(Watcher(libdir, scenario, tmp_path))
        return started[-1]

    yield start
    for w in started:
        w.close()
