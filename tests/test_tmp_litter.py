"""The test suite leaves nothing in /tmp: every process it starts gets this run's own temporary directory
(tests/conftest.py private_tmpdir), and a run that passes removes it (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# What TensorFlow's autograph and torchrun do: a file or directory in the temporary directory, never removed.
LEAVE_A_FILE = ("import tempfile\n"
                "fd, path = tempfile.mkstemp(prefix='__autograph_generated_file', suffix='.py')\n"
                "print(path)\n")


def test_a_child_process_leaves_its_temporary_files_in_the_runs_own_directory(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp().resolve()
    done = subprocess.run([sys.executable, "-c", LEAVE_A_FILE], capture_output=True, text=True, timeout=60)
    left = Path(done.stdout.strip()).resolve()
    assert done.returncode == 0 and left.is_file(), done.stderr
    assert left.is_relative_to(base), f"{left} is outside this run's {base}"
    assert Path(tempfile.gettempdir()).resolve().is_relative_to(base)  # this process's own temporary files too


def test_a_passing_run_removes_its_temporary_directories(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"
