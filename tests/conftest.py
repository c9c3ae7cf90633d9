"""Shared fixtures: the repo on sys.path and fake tools on PATH. Helpers live in support.py."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for path in (str(Path(__file__).resolve().parent), str(ROOT / "agent"), str(ROOT)):
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
