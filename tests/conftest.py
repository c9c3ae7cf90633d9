"""Shared fixtures: the repo on sys.path, the real fixtures beside the repo, fake tools on PATH."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "fixtures" / "real"  # ../shared beside the clone, as in CI
TEST_PROFILES = Path(__file__).resolve().parent / "profiles"

for path in (str(ROOT / "agent"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)


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


def run_gpucheck(args: list[str], env: dict[str, str] | None = None, timeout: float = 120,
                 stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the agent as a user would: a separate process, its own environment."""
    environ = dict(env if env is not None else os.environ)
    environ["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "gpucheck", *args], capture_output=True, text=True,
                          env=environ, timeout=timeout, input=stdin)


def report_of(done: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None


def by_check(report: dict) -> dict[str, dict]:
    return {r["check"]: r for r in report["results"]}
