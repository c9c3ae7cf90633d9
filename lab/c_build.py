"""Compiling the lab's C stand-ins with gcc, once per content: the fake NVML (lab/fakenvml) and the libraries and
programs of the stand-in NVIDIA packages (lab/nvidia_repo).

The output lands in CACHE/build-<hash of the source, the other inputs and the command line>/, compiled under a
temporary name and renamed into place: any change rebuilds, and two builds at once never see half a file.
Standard library only: the lab's host init and the tests import what imports it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

GCC_TIMEOUT_S = 120


class CompileError(Exception):
    """A stand-in could not be compiled. str(e) is one line; `stderr` is what the compiler said, if it ran."""

    def __init__(self, reason: str, stderr: str = "") -> None:
        super().__init__(reason)
        self.stderr = stderr


def compiler() -> str:
    found = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not found:
        raise CompileError("no C compiler found (install gcc, or set CC)")
    return found


def build_cached(source: Path, output: str, flags: Sequence[str], cache: Path, *,
                 headers: dict[str, str] | None = None, include: Sequence[Path] = (), inputs: bytes = b"",
                 libs: Sequence[str] = (), mode: int = 0o755) -> Path:
    """SOURCE compiled with FLAGS into CACHE/build-<key>/OUTPUT and that path returned; built only when it is not
    there yet. HEADERS (name -> text) are written beside the output and found first; INCLUDE are more header
    directories; INPUTS are other bytes the output depends on (a header read from elsewhere)."""
    gcc = compiler()
    key = hashlib.sha256(source.read_bytes())
    key.update(inputs)
    for name, text in sorted((headers or {}).items()):
        key.update(name.encode() + b"\0" + text.encode())
    key.update(" ".join([gcc, *flags, *libs, output]).encode())
    outdir = cache / f"build-{key.hexdigest()[:16]}"
    built = outdir / output
    if built.is_file():
        return built
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in (headers or {}).items():
        (outdir / name).write_text(text)
    fd, tmpname = tempfile.mkstemp(prefix=f".{output}.", dir=outdir)
    os.close(fd)
    dirs = [outdir] if headers else []
    cmd = [gcc, *flags, *(f"-I{d}" for d in [*dirs, *include]), "-o", tmpname, str(source), *libs]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=GCC_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(tmpname)
        raise CompileError(f"compiling {source.name} failed: {exc}") from exc
    if done.returncode != 0:
        os.unlink(tmpname)
        raise CompileError(f"compiling {source.name} failed (exit {done.returncode})", done.stderr)
    os.chmod(tmpname, mode)
    os.replace(tmpname, built)
    return built
