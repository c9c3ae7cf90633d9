"""Helpers shared by the tests (imported as `support`; conftest.py puts tests/ on sys.path)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"  # real tool outputs, with their provenance: tests/fixtures/README.md
REAL = FIXTURES / "real"  # published outputs (real/SOURCES.md)
MEASURED = FIXTURES / "measured"  # measured for this project on an H100 and an H200 (a README.md in each)
TEST_PROFILES = Path(__file__).resolve().parent / "profiles"
# Set by `make check`, the loop that runs only the tests needing no lab, sshd, Slurm or Kubernetes (`-m "not lab and
# not sshd and not slurm and not kubernetes"`): a test that starts one of them without carrying its mark fails there.
NO_DAEMONS = "GPUCHECK_TESTS_NO_DAEMONS"
# Steps of nice the workers running other tests take while a run holds the lab chain (tests/conftest.py).
GIVE_WAY = 10


def starting(what: str, mark: str) -> None:
    """Called where the tests start the lab, an sshd or a Slurm: refused under `make check` (a test that gets
    here there lacks its mark; conftest.py's DAEMON_FIXTURES gives it to the tests that use the usual fixture)."""
    if os.environ.get(NO_DAEMONS):
        raise AssertionError(f"this test starts {what} but is not marked `{mark}`: `make check` ({NO_DAEMONS} set) "
                             "runs only the tests that need no lab, sshd, Slurm or Kubernetes; mark it "
                             f"(pytest.mark.{mark}) or use the usual fixture")


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


T = TypeVar("T")


def wait_for(probe: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """probe() until it returns something true, then that value: a test waits for the event, never a fixed time
    (a loaded machine makes any fixed time too short). AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(every)


def default_sigint() -> None:
    """preexec_fn for a child the test will Ctrl-C: SIGINT back to its default. A suite started in the
    background of a non-interactive shell ignores SIGINT, and its children inherit that (Python then installs
    no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
