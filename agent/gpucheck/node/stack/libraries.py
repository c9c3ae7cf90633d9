"""Library checks: which libcudart, libcudnn, libnccl and libmpi the frameworks would load, and their
versions; plus libs.ldd (extension_links.py).

Collection searches the places the frameworks use (library_search.py) and asks each copy found its
own version function (library_probe.py); the evaluation judges the copy each stack would load.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...model import Result, Status
from ...profiles import Profile
from .. import Check, Context
from . import extension_links
from .known_libraries import LIBRARIES
from .library_probe import probe_version
from .library_search import consumers, describe_places, find_candidates, pick, search_places


def collect(ctx: Context) -> dict[str, Any]:
    places = search_places(ctx)
    candidates = {key: find_candidates(places, lib.stem) for key, lib in LIBRARIES.items()}
    jobs = [(key, entry) for key, entries in candidates.items() for entry in entries]
    timeout = min(ctx.timeout, 30.0)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda job: probe_version(job[1]["path"], job[0], timeout), jobs))
    for (_, entry), answer in zip(jobs, answers, strict=True):
        entry.update(answer)
    return {
        "stacks": [s.name for s in ctx.config.stacks],
        "places": places,
        "libraries": candidates,
    }


def _label(entry: dict[str, Any]) -> str:
    version = entry.get("version")
    implementation = entry.get("implementation")
    text = f"{implementation} {version}" if implementation and version else version or "version unknown"
    return f"{text} at {entry['path']}"


def library(key: str, f: dict[str, Any], p: Profile) -> Result:
    check = f"libs.{key}"
    lib = LIBRARIES[key]
    facts = f["libraries"]
    entries = facts.get("libraries", {}).get(key, [])
    required = key in [str(n).removeprefix("lib") for n in (p.get("libraries", "required") or [])]
    expected = "found and loadable" if required else "optional"
    if not entries:
        reason = f"{lib.stem}.so not found in {describe_places(facts)}"
        if required:
            return Result(check, Status.FAIL, None, expected, reason, lib.remediation)
        return Result(check, Status.SKIP, None, expected, f"not required by the profile; {reason}")
    picks = {name: pick(entries, order) for name, order in consumers(facts).items()}
    measured = {name: ({"version": e.get("version"), "path": e["path"]} if e else None)
                for name, e in picks.items()}
    problems, notes = [], []
    for name, entry in picks.items():
        who = f"stack {name}" if facts.get("stacks") else "the system"
        if entry is None:
            problems.append(f"{who}: {lib.stem}.so not found")
        elif entry.get("error"):
            problems.append(f"{who}: {entry['path']} {entry['error']}")
    picked = {id(e) for e in picks.values() if e}
    for entry in entries:
        if id(entry) not in picked and entry.get("error"):
            notes.append(f"another copy at {entry['path']} {entry['error']}")
    found = "; ".join(f"{'stack ' + n + ': ' if facts.get('stacks') else ''}{_label(e)}"
                      for n, e in picks.items() if e and not e.get("error"))
    others = [e for e in entries if id(e) not in picked and not e.get("error")]
    if others:
        measured["also_found"] = [{"version": e.get("version"), "path": e["path"]} for e in others]
        found += "; also found: " + ", ".join(_label(e) for e in others)
    if problems:
        status = Status.FAIL if required else Status.WARN
        return Result(check, status, measured, expected, "; ".join(problems + notes),
                      lib.remediation, evidence=describe_places(facts))
    if notes:
        return Result(check, Status.WARN, measured, expected, f"{found}; " + "; ".join(notes),
                      "remove or fix the broken copy: a job with another search order would load it")
    if not required:
        found = f"{found} (not required by the profile)"
    return Result(check, Status.PASS, measured, expected, found)


def cudart(f: dict[str, Any], p: Profile) -> Result:
    return library("cudart", f, p)


def cudnn(f: dict[str, Any], p: Profile) -> Result:
    return library("cudnn", f, p)


def nccl(f: dict[str, Any], p: Profile) -> Result:
    return library("nccl", f, p)


def mpi(f: dict[str, Any], p: Profile) -> Result:
    return library("mpi", f, p)


def summary(facts: dict[str, Any] | None) -> dict[str, Any]:
    """The version each consumer (stack, or the system) would load, for the report's facts:
    {"nccl": {"tf": "2.21.5"}, "mpi": {"tf": "Open MPI 4.1.4"}, ...}."""
    if not facts:
        return {}
    out: dict[str, Any] = {}
    for key, entries in facts.get("libraries", {}).items():
        picks = {name: pick(entries, order) for name, order in consumers(facts).items()}
        out[key] = {name: (" ".join(x for x in (e.get("implementation"), e.get("version")) if x) or None)
                    if e else None for name, e in picks.items()}
    return out


CHECKS = [
    Check("libs.cudart", ("libraries",), cudart, "CUDA runtime found and its version (cudaRuntimeGetVersion)"),
    Check("libs.cudnn", ("libraries",), cudnn, "cuDNN found and its version (cudnnGetVersion)"),
    Check("libs.nccl", ("libraries",), nccl, "NCCL found and its version (ncclGetVersion)"),
    Check("libs.mpi", ("libraries",), mpi, "MPI library found and its version (MPI_Get_library_version)"),
    Check("libs.ldd", ("libraries", "ldd"), extension_links.ldd,
          "TensorFlow/Horovod extension libraries resolve; Horovod links the node's MPI"),
]
COLLECTORS = {"libraries": collect, "ldd": extension_links.collect}
