"""Helpers shared by the tests (imported as `support`; conftest.py puts tests/ on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"  # real tool outputs, with their provenance: tests/fixtures/README.md
REAL = FIXTURES / "real"  # published outputs (real/SOURCES.md)
MEASURED = FIXTURES / "measured"  # measured for this project on an H100 and an H200 (a README.md in each)
TEST_PROFILES = Path(__file__).resolve().parent / "profiles"


def run_gpucheck(args: list[str], env: dict[str, str] | None = None, timeout: float = 120,
                 stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the agent as a user would: a separate process, its own environment. Unless the test names one, the
    run gets a state directory of its own (empty): no test reads or writes this machine's /var/lib/gpucheck,
    and no run's remembered Xid window leaks into another test."""
    environ = dict(env if env is not None else os.environ)
    environ["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + environ.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="gpucheck-state-") as state:
        environ.setdefault("GPUCHECK_STATE_DIR", state)
        return subprocess.run([sys.executable, "-m", "gpucheck", *args], capture_output=True, text=True,
                              env=environ, timeout=timeout, input=stdin)


def report_of(done: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None


def by_check(report: dict) -> dict[str, dict]:
    return {r["check"]: r for r in report["results"]}
