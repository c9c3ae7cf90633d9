"""How a stand-in's files are made from standins/: templates rendered, C compiled with gcc (cached), and the
`Entry` each file becomes in a package.

Compiled outputs are cached under ~/.cache/gpucheck/nvidia-repo (keyed by source, headers and flags, as
lab/fakenvml caches its library), so a build compiles each stand-in once per content.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .model import NvidiaRepoError

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucheck" / "nvidia-repo"
WARNINGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Werror=missing-prototypes"]
LIBRARY_FLAGS = [*WARNINGS, "-fPIC", "-shared", "-Wl,--no-undefined"]
PROGRAM_FLAGS = [*WARNINGS, "-fPIE", "-pie"]
GCC_TIMEOUT_S = 120
TEMPLATE_KEY = re.compile(r"@[A-Z_]+@")


@dataclass(frozen=True)
class Entry:
    """One file (DATA) or symbolic link (LINK) at PATH, relative to the root of the installed system."""
    path: str
    data: bytes | None = None
    link: str | None = None
    mode: int = 0o644


def render(template: str, values: dict[str, object]) -> str:
    """standins/TEMPLATE with each @KEY@ replaced; a key left over is a bug in the template or the caller."""
    text = (STANDINS / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    left = sorted(set(TEMPLATE_KEY.findall(text)))
    if left:
        raise NvidiaRepoError(f"{template}: nothing given for {', '.join(left)}")
    return text


def compile_standin(source: str, output: str, flags: list[str], headers: dict[str, str],
                    defines: dict[str, object], cache: Path, libs: tuple[str, ...] = ()) -> Path:
    """standins/SOURCE compiled by gcc with FLAGS into CACHE/build-<key>/OUTPUT, HEADERS (name -> text) beside
    it and -D DEFINES; built once per content."""
    gcc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise NvidiaRepoError("no C compiler found (install gcc, or set CC)")
    flags = [*flags, *(f"-D{k}={v}" for k, v in sorted(defines.items()))]
    key = hashlib.sha256()
    key.update((STANDINS / source).read_bytes())
    for name, text in sorted(headers.items()):
        key.update(name.encode() + b"\0" + text.encode())
    key.update(" ".join([gcc, *flags, *libs, output]).encode())
    outdir = cache / f"build-{key.hexdigest()[:16]}"
    built = outdir / output
    if built.is_file():
        return built
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in headers.items():
        (outdir / name).write_text(text)
    fd, tmpname = tempfile.mkstemp(prefix=f".{output}.", dir=outdir)
    os.close(fd)
    cmd = [gcc, *flags, f"-I{outdir}", "-o", tmpname, str(STANDINS / source), *libs]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=GCC_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(tmpname)
        raise NvidiaRepoError(f"compiling {source} failed: {exc}") from exc
    if done.returncode != 0:
        os.unlink(tmpname)
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise NvidiaRepoError(f"compiling {source} failed (exit {done.returncode}): {first}")
    os.chmod(tmpname, 0o755 if "-shared" not in flags else 0o644)
    os.replace(tmpname, built)
    return built


def compile_library(source: str, soname: str, headers: dict[str, str], defines: dict[str, object],
                    cache: Path) -> Path:
    """standins/SOURCE compiled into a shared library named SONAME (see compile_standin)."""
    return compile_standin(source, soname, [*LIBRARY_FLAGS, f"-Wl,-soname,{soname}"], headers, defines, cache)


def compile_program(source: str, name: str, defines: dict[str, object], cache: Path,
                    libs: tuple[str, ...] = ()) -> Path:
    """standins/SOURCE compiled into the executable NAME, linked with LIBS (see compile_standin)."""
    return compile_standin(source, name, PROGRAM_FLAGS, {}, defines, cache, libs)
