"""Library checks: which libcudart, libcudnn, libnccl and libmpi the frameworks would load, and ldd.

Versions come from each library's own version function, called through ctypes in a short-lived
subprocess (a library that hangs or crashes at load cannot take the agent down, and the agent does
not keep it loaded). The search follows the places the frameworks use, in order: each stack's
virtualenv (`site-packages/nvidia/*/lib` of the CUDA pip wheels), LD_LIBRARY_PATH, the linker's
cache (`ldconfig -p`) and the standard directories.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Stack
from ..model import Result, Status, truncate
from ..process import run, which
from ..profiles import Profile
from . import Check, CollectError, Context

CONFIG_HINT = ("no framework stacks configured: list each framework virtualenv under `stacks:` in "
               "/etc/gpucheck/node.yaml (written by site.yml's gpucheck_agent role), e.g. "
               "`stacks: {tf-horovod: {python: /opt/stacks/tf-horovod/bin/python, "
               "frameworks: [tensorflow, horovod]}}`")


@dataclass(frozen=True)
class Library:
    key: str  # the profile's name: libraries.required: [cudart, cudnn, nccl, mpi]
    stem: str  # file name before ".so"
    function: str  # the library's own version function
    kind: str  # how to call it: "int_out" (int *version), "size_t" (returns it), "string" (char *, int *)
    remediation: str


LIBRARIES: dict[str, Library] = {
    lib.key: lib for lib in (
        Library("cudart", "libcudart", "cudaRuntimeGetVersion", "int_out",
                "install the CUDA runtime (site.yml --tags gpu, or the stack's nvidia-cuda-runtime-cu12 wheel)"),
        Library("cudnn", "libcudnn", "cudnnGetVersion", "size_t",
                "install cuDNN (site.yml --tags gpu, or the stack's nvidia-cudnn-cu12 wheel)"),
        Library("nccl", "libnccl", "ncclGetVersion", "int_out",
                "install NCCL (site.yml --tags gpu, or the stack's nvidia-nccl-cu12 wheel)"),
        Library("mpi", "libmpi", "MPI_Get_library_version", "string",
                "install the MPI the stack was built against (site.yml --tags mpi)"),
    )
}

# Searched after the stacks, LD_LIBRARY_PATH and the ldconfig cache (tests may replace these).
STANDARD_DIRS = [
    "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/openmpi/lib",
    "/usr/lib64", "/usr/lib64/openmpi/lib", "/usr/local/lib", "/usr/lib",
]
LDCONFIG_CANDIDATES = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
SYSTEM_ORIGINS = ["LD_LIBRARY_PATH", "ldconfig", "system"]
MARK = "GPUCHECK_LIBVERSION "

# Run by the agent's own interpreter (-I -S: standard library only) for one library file.
VERSION_SNIPPET = r"""
import ctypes, json, sys
path, func, kind = sys.argv[1:4]
out = {}
try:
    lib = ctypes.CDLL(path)
except OSError as exc:
    out = {"error": "cannot load: %s" % exc}
else:
    try:
        fn = getattr(lib, func)
    except AttributeError:
        out = {"error": "has no symbol %s" % func}
    else:
        if kind == "size_t":
            fn.restype, fn.argtypes = ctypes.c_size_t, []
            out = {"raw": fn(), "rc": 0}
        elif kind == "int_out":
            value = ctypes.c_int(0)
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
            out = {"rc": fn(ctypes.byref(value)), "raw": value.value}
        else:
            buf, size = ctypes.create_string_buffer(8192), ctypes.c_int(0)
            fn.restype = ctypes.c_int
            out = {"rc": fn(buf, ctypes.byref(size)), "raw": buf.value.decode("utf-8", "replace")}
sys.stdout.write("\n__MARK__" + json.dumps(out) + "\n")
sys.stdout.flush()
""".replace("__MARK__", MARK)


# ---------------------------------------------------------------------------------------------
# Pure helpers: version decoding, ldconfig and ldd output
# ---------------------------------------------------------------------------------------------

def cudart_version(code: int) -> str:
    """cudaRuntimeGetVersion: 1000*major + 10*minor (12020 -> '12.2')."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def cudnn_version(code: int) -> str:
    """cudnnGetVersion: 10000*major + 100*minor + patch since cuDNN 9 (90100 -> '9.1.0'),
    1000*major + 100*minor + patch before (8907 -> '8.9.7')."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def nccl_version(code: int) -> str:
    """ncclGetVersion: 10000*major + 100*minor + patch since NCCL 2.9 (22105 -> '2.21.5'),
    1000*major + 100*minor + patch before (2708 -> '2.7.8')."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


MPI_PATTERNS = [
    ("Open MPI", re.compile(r"Open MPI v?(\d+(?:\.\d+)*)")),
    ("MVAPICH", re.compile(r"MVAPICH2? Version:?\s*(\d+(?:\.\d+)*\w*)")),
    ("Intel MPI", re.compile(r"Intel\(R\) MPI Library (\d+(?:\.\d+)*)")),
    ("MPICH", re.compile(r"MPICH Version:?\s*(\d+(?:\.\d+)*\w*)")),
]


def mpi_version(text: str) -> tuple[str | None, str | None]:
    """MPI_Get_library_version's string -> (implementation, version), e.g. ('Open MPI', '4.1.4')."""
    for implementation, pattern in MPI_PATTERNS:
        match = pattern.search(text or "")
        if match:
            return implementation, match.group(1)
    first = (text or "").strip().splitlines()[:1]
    return (first[0][:80] if first else None), None


def decode(key: str, raw: Any) -> tuple[str | None, str | None]:
    """(version, implementation) from a version function's raw answer."""
    if key == "mpi":
        implementation, version = mpi_version(str(raw))
        return version, implementation
    decoder = {"cudart": cudart_version, "cudnn": cudnn_version, "nccl": nccl_version}[key]
    return decoder(int(raw)), None


def lib_name_regex(stem: str) -> re.Pattern[str]:
    """libmpi.so, libmpi.so.40, libmpi.so.40.30.4 -- not libmpi_cxx.so.40 or libcudart_static.a."""
    return re.compile(rf"^{re.escape(stem)}\.so(\.\d+)*$")


LDCONFIG_LINE = re.compile(r"^\s*(?P<name>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S.*?)\s*$")


def parse_ldconfig(text: str, want_64bit: bool = True) -> list[dict[str, str]]:
    """`ldconfig -p` -> [{name, flags, path}], keeping only the word size of this interpreter."""
    entries = []
    for line in (text or "").splitlines():
        match = LDCONFIG_LINE.match(line)
        if not match:
            continue  # the "N libs found in cache" header and anything else
        flags = match["flags"]
        is_64 = any("64" in part for part in flags.split(",")[1:])
        if is_64 == want_64bit:
            entries.append({"name": match["name"], "flags": flags, "path": match["path"]})
    return entries


LDD_ARROW = re.compile(r"^\s*(?P<name>\S+)\s+=>\s*(?P<target>.*?)\s*(?:\((?P<addr>0x[0-9a-fA-F]+)\))?\s*$")
LDD_PLAIN = re.compile(r"^\s*(?P<path>\S+)\s+\((?P<addr>0x[0-9a-fA-F]+)\)\s*$")
LDD_SYMVER = re.compile(r"version `(?P<version>[^']+)' not found(?: \(required by (?P<by>[^)]+)\))?")


def parse_ldd(text: str) -> dict[str, Any]:
    """`ldd FILE` output -> what each needed library resolved to.

    Handles `name => /path (0x...)`, `name => not found`, lines without `=>` (the loader, vdso),
    the old `linux-vdso.so.1 =>  (0x...)`, `statically linked`, `not a dynamic executable`, missing
    symbol versions, `ldd:` errors, `FILE:` headers when several files were given, and stray lines
    (a shell prompt pasted with the output) which are kept under `ignored`.
    """
    sections: list[dict[str, Any]] = []

    def section(name: str | None) -> dict[str, Any]:
        sec = {"file": name, "libraries": [], "not_found": [], "version_errors": [],
               "static": False, "not_dynamic": False}
        sections.append(sec)
        return sec

    current: dict[str, Any] | None = None
    errors: list[str] = []
    ignored: list[str] = []
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        symver = LDD_SYMVER.search(stripped)
        if symver:
            current = current or section(None)
            current["version_errors"].append({"version": symver["version"], "required_by": symver["by"],
                                              "line": stripped})
            continue
        if stripped.startswith("ldd:"):
            errors.append(stripped)
            continue
        if "not a dynamic executable" in stripped or stripped == "statically linked":
            current = current or section(None)
            current["not_dynamic" if "dynamic" in stripped else "static"] = True
            continue
        arrow = LDD_ARROW.match(line)
        if arrow:
            current = current or section(None)
            target = arrow["target"].strip()
            if target == "not found":
                current["libraries"].append({"name": arrow["name"], "path": None, "found": False})
                current["not_found"].append(arrow["name"])
            else:
                current["libraries"].append({"name": arrow["name"], "path": target or None, "found": True})
            continue
        plain = LDD_PLAIN.match(line)
        if plain:
            current = current or section(None)
            path = plain["path"]
            current["libraries"].append({"name": os.path.basename(path),
                                         "path": path if path.startswith("/") else None, "found": True})
            continue
        if not line[:1].isspace() and stripped.endswith(":") and " " not in stripped:
            current = section(stripped[:-1])
            continue
        ignored.append(stripped)
    first = sections[0] if sections else section(None)
    return {
        "file": first["file"],
        "libraries": [lib for sec in sections for lib in sec["libraries"]],
        "not_found": [name for sec in sections for name in sec["not_found"]],
        "version_errors": [err for sec in sections for err in sec["version_errors"]],
        "static": any(sec["static"] for sec in sections),
        "not_dynamic": any(sec["not_dynamic"] for sec in sections),
        "sections": sections,
        "errors": errors,
        "ignored": ignored,
    }


# ---------------------------------------------------------------------------------------------
# Collection
# ---------------------------------------------------------------------------------------------

SITE_SNIPPET = "import json, sys; print(json.dumps([p for p in sys.path if p]))"


def stack_site_packages(stack: Stack, timeout: float) -> tuple[list[str], str | None]:
    """The stack interpreter's own site-packages (its sys.path, PYTHONPATH views included).

    Falls back to globbing under the interpreter's prefix when it cannot be run; the error is returned.
    """
    done = run([stack.python, "-c", SITE_SNIPPET], timeout=min(timeout, 30))
    error = None
    paths: list[str] = []
    if done.ok:
        try:
            paths = [p for p in json.loads(done.stdout.strip().splitlines()[-1])
                     if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
        except (ValueError, IndexError):
            error = f"{stack.python} printed no sys.path"
    else:
        error = done.describe_failure()
    if not paths:
        prefix = Path(stack.python).parent.parent  # not resolved: a venv's python is a symlink
        paths = sorted(glob.glob(str(prefix / "lib*" / "python3*" / "site-packages")))
    seen: list[str] = []
    for path in paths:
        if os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen, error


def _ldconfig_entries(timeout: float) -> tuple[list[dict[str, str]], str | None]:
    program = next((p for p in LDCONFIG_CANDIDATES if which(p) or os.access(p, os.X_OK)), None)
    if program is None:
        return [], "ldconfig not found"
    done = run([program, "-p"], timeout=min(timeout, 30))
    if not done.ok:
        return [], done.describe_failure()
    return parse_ldconfig(done.stdout, want_64bit=sys.maxsize > 2**32), None


def search_places(ctx: Context) -> list[dict[str, Any]]:
    """Where each library is looked for, in the frameworks' order."""
    places: list[dict[str, Any]] = []
    for stack in ctx.config.stacks:
        site, error = stack_site_packages(stack, ctx.timeout)
        dirs = sorted(d for sp in site for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        places.append({"origin": f"stack:{stack.name}", "dirs": dirs, "site_packages": site,
                       "pattern": [os.path.join(sp, "nvidia", "*", "lib") for sp in site]
                       or [f"{stack.python} (no site-packages)"], "error": error})
    ld_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    places.append({"origin": "LD_LIBRARY_PATH", "dirs": ld_path})
    entries, error = _ldconfig_entries(ctx.timeout)
    places.append({"origin": "ldconfig", "files": [e["path"] for e in entries], "error": error})
    places.append({"origin": "system", "dirs": list(STANDARD_DIRS)})
    return places


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
        if _name_rank(os.path.basename(path)) < _name_rank(os.path.basename(entry["path"])) \
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
            for name in sorted((n for n in names if pattern.match(n)), key=_name_rank):
                add(os.path.join(directory, name), place["origin"])
    return list(found.values())


def _name_rank(name: str) -> tuple[int, int]:
    """Sort key: libx.so.N (the soname) first, then libx.so.N.M..., then the bare libx.so."""
    suffix = name.split(".so", 1)[1]
    parts = suffix.count(".")
    return (0 if parts == 1 else 1 if parts > 1 else 2, len(name))


def probe_version(path: str, key: str, timeout: float) -> dict[str, Any]:
    """Load one library in a throwaway interpreter and ask its own version function."""
    lib = LIBRARIES[key]
    done = run([sys.executable, "-I", "-S", "-c", VERSION_SNIPPET, path, lib.function, lib.kind],
               timeout=timeout)
    if done.timed_out:
        return {"error": f"loading it did not finish within {timeout:g} s (killed)"}
    answer = None
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            try:
                answer = json.loads(line[len(MARK):])
            except ValueError:
                answer = None
    if answer is None:
        if done.returncode is not None and done.returncode < 0:
            return {"error": f"the process loading it was killed by signal {-done.returncode}"}
        return {"error": f"no answer from the version probe: {done.describe_failure()}",
                "evidence": truncate(done.output, 1000)}
    if "error" in answer:
        return {"error": answer["error"]}
    if answer.get("rc"):
        return {"error": f"{lib.function} returned error {answer['rc']}", "raw": answer.get("raw")}
    try:
        version, implementation = decode(key, answer["raw"])
    except (TypeError, ValueError):
        return {"error": f"{lib.function} answered {answer.get('raw')!r}", "raw": answer.get("raw")}
    result = {"version": version, "raw": answer["raw"]}
    if implementation:
        result["implementation"] = implementation
    return result


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


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------

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


def describe_places(facts: dict[str, Any]) -> str:
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


# ---------------------------------------------------------------------------------------------
# ldd of the framework extension libraries
# ---------------------------------------------------------------------------------------------

# (framework, extension library under site-packages); Horovod's are named mpi_lib even without MPI.
EXTENSIONS: list[tuple[str, str]] = [
    ("tensorflow", "tensorflow/python/_pywrap_tensorflow_internal.so"),
    ("tensorflow", "tensorflow/libtensorflow_framework.so.2"),
    ("horovod", "horovod/tensorflow/mpi_lib*.so"),
    ("horovod", "horovod/torch/mpi_lib_v2*.so"),
]
MPI_NAME = lib_name_regex("libmpi")


def find_extensions(site: list[str], frameworks: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """Extension libraries present for the stack's frameworks, and the frameworks with none at all."""
    found, missing = [], []
    for framework in ("tensorflow", "horovod"):
        if framework not in frameworks:
            continue
        hits: list[str] = []
        for owner, pattern in EXTENSIONS:
            if owner == framework:
                for sp in site:
                    hits += [p for p in sorted(glob.glob(os.path.join(sp, pattern))) if p not in hits]
        found += [{"framework": framework, "path": path} for path in hits]
        if not hits:
            missing.append(framework)
    return found, missing


def _loader_path(site: list[str]) -> str:
    """The folders a framework process has already loaded from when Horovod's extension is loaded:
    TensorFlow's and torch's own libraries and the CUDA wheels (they are not on any RUNPATH, so a
    bare ldd would report them "not found" although Python resolves them by soname at import)."""
    dirs = []
    for sp in site:
        dirs += [os.path.join(sp, "tensorflow"), os.path.join(sp, "torch", "lib")]
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    dirs = [d for d in dirs if os.path.isdir(d)]
    current = os.environ.get("LD_LIBRARY_PATH", "")
    return ":".join(dirs + ([current] if current else []))


def collect_ldd(ctx: Context) -> dict[str, Any]:
    stacks = []
    relevant = [s for s in ctx.config.stacks if {"tensorflow", "horovod"} & set(s.frameworks)]
    ldd = which("ldd") if relevant else None
    if relevant and ldd is None:
        raise CollectError("ldd not found on PATH", "install libc-bin (it provides ldd)", harness=True)
    mpi_versions: dict[str, dict[str, Any]] = {}
    for stack in relevant:
        site, error = stack_site_packages(stack, ctx.timeout)
        extensions, missing = find_extensions(site, stack.frameworks)
        env = dict(os.environ, LD_LIBRARY_PATH=_loader_path(site))
        for ext in extensions:
            done = run([ldd, ext["path"]], timeout=min(ctx.timeout, 30), env=env)
            if done.timed_out or done.not_found:
                raise CollectError(f"ldd {ext['path']}: {done.describe_failure()}", harness=True)
            ext["rc"] = done.returncode
            ext["output"] = done.output
            ext["parsed"] = parse_ldd(done.output)
            for lib in ext["parsed"]["libraries"]:
                if MPI_NAME.match(lib["name"]) and lib["path"]:
                    real = os.path.realpath(lib["path"])
                    if real not in mpi_versions:
                        mpi_versions[real] = probe_version(lib["path"], "mpi", min(ctx.timeout, 30))
                    ext["mpi"] = {"path": lib["path"], "realpath": real, **mpi_versions[real]}
        stacks.append({"name": stack.name, "frameworks": list(stack.frameworks), "site_packages": site,
                       "site_error": error, "extensions": extensions, "missing": missing,
                       "ld_library_path": env["LD_LIBRARY_PATH"]})
    return {"configured": bool(ctx.config.stacks), "stacks": stacks}


def _relative(path: str, site: list[str]) -> str:
    """horovod/torch/mpi_lib_v2...so: the path under the site-packages folder that holds it."""
    for sp in site:
        if path.startswith(sp.rstrip("/") + "/"):
            return os.path.relpath(path, sp)
    return path


def _mpi_label(info: dict[str, Any]) -> str:
    impl, version = info.get("implementation"), info.get("version")
    name = " ".join(x for x in (impl, version) if x) or "version unknown"
    return f"{info['path']} ({name})"


def ldd(f: dict[str, Any], p: Profile) -> Result:
    check = "libs.ldd"
    facts = f["ldd"]
    if not facts.get("configured"):
        return Result(check, Status.SKIP, reason=CONFIG_HINT)
    if not facts["stacks"]:
        return Result(check, Status.SKIP, reason="no configured stack has TensorFlow or Horovod")
    libraries = f["libraries"]
    mpi_entries = libraries.get("libraries", {}).get("mpi", [])
    orders = consumers(libraries)
    fails, warns, measured, evidence = [], [], {}, []
    for stack in facts["stacks"]:
        name = stack["name"]
        for framework in stack.get("missing", []):
            warns.append(f"stack {name}: no {framework} extension library under "
                         f"{', '.join(stack['site_packages']) or 'its site-packages'} (is {framework} installed?)")
        node_mpi = pick(mpi_entries, orders.get(name, [f"stack:{name}", *SYSTEM_ORIGINS]))
        for ext in stack["extensions"]:
            parsed = ext["parsed"]
            short = _relative(ext["path"], stack.get("site_packages") or [])
            label = f"stack {name}: {short}"
            evidence.append(f"$ ldd {ext['path']}\n{ext['output'].strip()}")
            measured[f"{name}:{short}"] = {
                "not_found": parsed["not_found"],
                "mpi": ext.get("mpi", {}).get("path"),
                "nccl": next((lib["path"] for lib in parsed["libraries"] if lib["name"].startswith("libnccl")),
                             None),
            }
            for missing in parsed["not_found"]:
                fails.append(f"{label} needs {missing}: not found")
            for err in parsed["version_errors"]:
                fails.append(f"{label}: {err['line']}")
            if parsed["not_dynamic"] or (ext.get("rc") and not parsed["libraries"]):
                fails.append(f"{label}: ldd cannot read it ({(parsed['errors'] or [ext['output'].strip()])[0]})")
            linked = ext.get("mpi")
            if ext["framework"] == "horovod" and linked:
                if node_mpi is None:
                    warns.append(f"{label} links {_mpi_label(linked)} but no libmpi was found for the node")
                elif linked["realpath"] != node_mpi["realpath"]:
                    fails.append(f"{label} links {_mpi_label(linked)}, the node's MPI is {_mpi_label(node_mpi)}")
    expected = {"not_found": [], "horovod_mpi": "the node's libmpi"}
    if fails:
        return Result(check, Status.FAIL, measured, expected, "; ".join(fails + warns),
                      "rebuild or reinstall the framework against the node's libraries (site.yml --tags "
                      "frameworks); a Horovod built against another MPI than the mpirun that launches it "
                      "hangs or crashes at hvd.init()", evidence="\n\n".join(evidence))
    count = sum(len(s["extensions"]) for s in facts["stacks"])
    if warns:
        return Result(check, Status.WARN, measured, expected, "; ".join(warns), evidence="\n\n".join(evidence))
    links = sorted({_mpi_label(e["mpi"]) for s in facts["stacks"] for e in s["extensions"] if e.get("mpi")})
    reason = f"{count} extension librar{'y' if count == 1 else 'ies'} resolve every dependency"
    if links:
        reason += f"; Horovod links {', '.join(links)}"
    return Result(check, Status.PASS, measured, expected, reason, evidence="\n\n".join(evidence))


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
    Check("libs.ldd", ("libraries", "ldd"), ldd,
          "TensorFlow/Horovod extension libraries resolve; Horovod links the node's MPI"),
]
COLLECTORS = {"libraries": collect, "ldd": collect_ldd}
