"""Where the frameworks would find libcudart, libcudnn, libnccl and libmpi, and which copy each
consumer (a stack, or the system) would load.

The search follows the places the frameworks use, in order: each stack's virtualenv
(`site-packages/nvidia/*/lib` of the CUDA pip wheels), LD_LIBRARY_PATH, the linker's cache
(`ldconfig -p`) and the standard directories.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from ...parsers import ParseError, parse
from ...process import run, which
from .. import Context
from .known_libraries import lib_name_regex

# Searched after the stacks, LD_LIBRARY_PATH and the ldconfig cache (tests may replace these).
STANDARD_DIRS = [
    "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/openmpi/lib",
    "/usr/lib64", "/usr/lib64/openmpi/lib", "/usr/local/lib", "/usr/lib",
]
LDCONFIG_CANDIDATES = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
SYSTEM_ORIGINS = ["LD_LIBRARY_PATH", "ldconfig", "system"]


def ldconfig_paths(timeout: float) -> tuple[list[str], str | None]:
    """The files in the linker's cache built for this interpreter's word size, or the error."""
    program = next((p for p in LDCONFIG_CANDIDATES if which(p) or os.access(p, os.X_OK)), None)
    if program is None:
        return [], "ldconfig not found"
    done = run([program, "-p"], timeout=min(timeout, 30))
    if not done.ok:
        return [], done.describe_failure()
    try:
        entries = parse("ldconfig", done.stdout)["entries"]
    except ParseError:
        return [], None  # an empty or unreadable cache lists nothing; the other places still count
    bits = 64 if sys.maxsize > 2**32 else 32
    return [e["path"] for e in entries if e["word_size"] == bits], None


def search_places(ctx: Context) -> list[dict[str, Any]]:
    """Where each library is looked for, in the frameworks' order."""
    places: list[dict[str, Any]] = []
    for stack in ctx.config.stacks:
        site, error = ctx.interpreters.site_packages(stack, ctx.timeout)
        dirs = sorted(d for sp in site for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        places.append({"origin": f"stack:{stack.name}", "dirs": dirs, "site_packages": site,
                       "pattern": [os.path.join(sp, "nvidia", "*", "lib") for sp in site]
                       or [f"{stack.python} (no site-packages)"], "error": error})
    ld_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    places.append({"origin": "LD_LIBRARY_PATH", "dirs": ld_path})
    files, error = ldconfig_paths(ctx.timeout)
    places.append({"origin": "ldconfig", "files": files, "error": error})
    places.append({"origin": "system", "dirs": list(STANDARD_DIRS)})
    return places


def describe_places(facts: dict[str, Any]) -> str:
    """Where the search looked, for a reason that says a library was not found."""
    parts = []
    for place in facts.get("places", []):
        origin = place["origin"]
        if origin.startswith("stack:"):
            parts.append(f"stack {origin[6:]} ({', '.join(place.get('pattern') or []) or 'no site-packages'})")
        elif origin == "LD_LIBRARY_PATH":
            parts.append(f"LD_LIBRARY_PATH ({':'.join(place['dirs']) or 'unset'})")
        elif origin == "ldconfig":
            parts.append("the ldconfig cache" + (f" ({place['error']})" if place.get("error") else ""))
        else:
            parts.append(", ".join(place.get("dirs", [])))
    return "; ".join(p for p in parts if p)


def name_rank(name: str) -> tuple[int, int]:
    """Sort key: libx.so.N (the soname) first, then libx.so.N.M..., then the bare libx.so."""
    suffix = name.split(".so", 1)[1]
    parts = suffix.count(".")
    return (0 if parts == 1 else 1 if parts > 1 else 2, len(name))


def find_candidates(places: list[dict[str, Any]], stem: str) -> list[dict[str, Any]]:
    """Every distinct file (by real path) that matches the library's name, in search order."""
    pattern = lib_name_regex(stem)
    found: dict[str, dict[str, Any]] = {}

    def add(path: str, origin: str) -> None:
        real = os.path.realpath(path)
        if not os.path.isfile(real):
            return
        entry = found.get(real)
        if entry is None:
            found[real] = {"path": path, "realpath": real, "origins": [origin]}
            return
        if origin not in entry["origins"]:
            entry["origins"].append(origin)
        if name_rank(os.path.basename(path)) < name_rank(os.path.basename(entry["path"])) \
                and os.path.dirname(path) == os.path.dirname(entry["path"]):
            entry["path"] = path  # prefer the soname-like name (libnccl.so.2) in the same folder

    for place in places:
        for path in place.get("files", []):
            if pattern.match(os.path.basename(path)):
                add(path, place["origin"])
        for directory in place.get("dirs", []):
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in sorted((n for n in names if pattern.match(n)), key=name_rank):
                add(os.path.join(directory, name), place["origin"])
    return list(found.values())


def consumers(facts: dict[str, Any]) -> dict[str, list[str]]:
    """Who loads the libraries, each with its search order: every stack, or the system alone."""
    stacks = facts.get("stacks") or []
    if stacks:
        return {name: [f"stack:{name}", *SYSTEM_ORIGINS] for name in stacks}
    return {"system": list(SYSTEM_ORIGINS)}


def pick(entries: list[dict[str, Any]], order: list[str]) -> dict[str, Any] | None:
    """The copy a consumer with this search order would load: the first found, loadable or not."""
    best: tuple[int, int] | None = None
    chosen = None
    for position, entry in enumerate(entries):
        ranks = [order.index(o) for o in entry.get("origins", []) if o in order]
        if ranks and (best is None or (min(ranks), position) < best):
            best, chosen = (min(ranks), position), entry
    return chosen
