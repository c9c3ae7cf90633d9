"""Subprocesses with a timeout, whose failures become one-line LabErrors."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence

from lab.errors import LabError


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run(
    cmd: Sequence[str],
    *,
    timeout: float = 60,
    check: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run cmd (never through a shell), capture its output, raise LabError on failure or timeout."""
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, input=input,
            env=dict(env) if env is not None else None,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise LabError(f"{cmd[0]}: command not found (install the packages in lab/apt-packages.txt)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{shlex.join(cmd)}` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        why = _last_line(proc.stderr) or _last_line(proc.stdout) or "no output"
        raise LabError(f"`{shlex.join(cmd)}` failed (exit {proc.returncode}): {why}")
    return proc
