"""How a stand-in's files are made from standins/: templates rendered, C compiled with gcc (cached), and the
`Entry` each file becomes in a package.

Compiled outputs are cached under ~/.cache/gpucheck/nvidia-repo (keyed by source, headers and flags: lab/c_build.py,
as for the fake NVML), so a build compiles each stand-in once per content.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lab.c_build import CompileError, build_cached

from .model import NvidiaRepoError

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucheck" / "nvidia-repo"
WARNINGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Werror=missing-prototypes"]
LIBRARY_FLAGS = [*WARNINGS, "-fPIC", "-shared", "-Wl,--no-undefined"]
PROGRAM_FLAGS = [*WARNINGS, "-fPIE", "-pie"]
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
    flags = [*flags, *(f"-D{k}={v}" for k, v in sorted(defines.items()))]
    try:
        return build_cached(STANDINS / source, output, flags, cache, headers=headers, libs=libs,
                            mode=0o644 if "-shared" in flags else 0o755)
    except CompileError as exc:
        first = (exc.stderr.strip().splitlines() or ["no message"])[0]
        raise NvidiaRepoError(f"{exc}: {first}" if exc.stderr else str(exc)) from exc


def compile_library(source: str, soname: str, headers: dict[str, str], defines: dict[str, object],
                    cache: Path) -> Path:
    """standins/SOURCE compiled into a shared library named SONAME (see compile_standin)."""
    return compile_standin(source, soname, [*LIBRARY_FLAGS, f"-Wl,-soname,{soname}"], headers, defines, cache)


def compile_program(source: str, name: str, defines: dict[str, object], cache: Path,
                    libs: tuple[str, ...] = ()) -> Path:
    """standins/SOURCE compiled into the executable NAME, linked with LIBS (see compile_standin)."""
    return compile_standin(source, name, PROGRAM_FLAGS, {}, defines, cache, libs)
