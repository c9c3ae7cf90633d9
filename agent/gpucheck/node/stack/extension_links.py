"""libs.ldd: `ldd` of the TensorFlow and Horovod extension libraries in each stack resolves every
dependency, and Horovod links the node's MPI (one built against another MPI than the mpirun that
launches it hangs or crashes at hvd.init())."""

from __future__ import annotations

import glob
import os
from typing import Any

from ...model import Result, Status
from ...parsers import ParseError, parse
from ...parsers.ldd import empty_result
from ...process import run, which
from ...profiles import Profile
from .. import CollectError, Context
from .known_libraries import lib_name_regex
from .library_probe import probe_version
from .library_search import SYSTEM_ORIGINS, consumers, pick
from .stacks import CONFIG_HINT, HOROVOD, TENSORFLOW

# (framework, extension library under site-packages); Horovod's are named mpi_lib even without MPI.
EXTENSIONS: list[tuple[str, str]] = [
    (TENSORFLOW, "tensorflow/python/_pywrap_tensorflow_internal.so"),
    (TENSORFLOW, "tensorflow/libtensorflow_framework.so.2"),
    (HOROVOD, "horovod/tensorflow/mpi_lib*.so"),
    (HOROVOD, "horovod/torch/mpi_lib_v2*.so"),
]
MPI_NAME = lib_name_regex("libmpi")


def find_extensions(site: list[str], frameworks: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """Extension libraries present for the stack's frameworks, and the frameworks with none at all."""
    found, missing = [], []
    for framework in (TENSORFLOW, HOROVOD):
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


def loader_path(site: list[str]) -> str:
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


def read_ldd(output: str) -> dict[str, Any]:
    """ldd's output, parsed. Output the parser does not recognise names no library: the evaluation
    then goes by ldd's exit code."""
    try:
        return parse("ldd", output)
    except ParseError:
        return empty_result()


def collect(ctx: Context) -> dict[str, Any]:
    stacks = []
    relevant = [s for s in ctx.config.stacks if {TENSORFLOW, HOROVOD} & set(s.frameworks)]
    ldd = which("ldd") if relevant else None
    if relevant and ldd is None:
        raise CollectError("ldd not found on PATH", "install libc-bin (it provides ldd)", harness=True)
    mpi_versions: dict[str, dict[str, Any]] = {}
    for stack in relevant:
        site, error = ctx.interpreters.site_packages(stack, ctx.timeout)
        extensions, missing = find_extensions(site, stack.frameworks)
        env = dict(os.environ, LD_LIBRARY_PATH=loader_path(site))
        for ext in extensions:
            done = run([ldd, ext["path"]], timeout=min(ctx.timeout, 30), env=env)
            if done.timed_out or done.not_found:
                raise CollectError(f"ldd {ext['path']}: {done.describe_failure()}", harness=True)
            ext["rc"] = done.returncode
            ext["output"] = done.output
            ext["parsed"] = read_ldd(done.output)
            for lib in ext["parsed"]["libraries"]:
                if MPI_NAME.match(lib["name"]) and lib["path"]:
                    real = os.path.realpath(lib["path"])
                    if real not in mpi_versions:
                        mpi_versions[real] = probe_version(lib["path"], "mpi", min(ctx.timeout, 30))
                    ext["mpi"] = {"path": lib["path"], "realpath": real, **mpi_versions[real]}
        stacks.append({"name": stack.name, "frameworks": list(stack.frameworks), "site_packages": site,
                       "site_error": error, "extensions": extensions, "missing": missing,
                       "python_hung": ctx.interpreters.refusal(stack.python) is not None,
                       "ld_library_path": env["LD_LIBRARY_PATH"]})
    return {"configured": bool(ctx.config.stacks), "stacks": stacks}


def relative(path: str, site: list[str]) -> str:
    """horovod/torch/mpi_lib_v2...so: the path under the site-packages folder that holds it."""
    for sp in site:
        if path.startswith(sp.rstrip("/") + "/"):
            return os.path.relpath(path, sp)
    return path


def mpi_label(info: dict[str, Any]) -> str:
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
    fails, errors, warns, measured, evidence = [], [], [], {}, []
    for stack in facts["stacks"]:
        name = stack["name"]
        for framework in stack.get("missing", []):
            where = ', '.join(stack['site_packages']) or 'its site-packages'
            if stack.get("python_hung"):  # its own sys.path unknown: a guess that found nothing proves nothing
                errors.append(f"stack {name}: {framework} extension libraries not checked: {stack['site_error']} "
                              f"(none found under {where})")
            else:
                warns.append(f"stack {name}: no {framework} extension library under {where} (is {framework} "
                             "installed?)")
        node_mpi = pick(mpi_entries, orders.get(name, [f"stack:{name}", *SYSTEM_ORIGINS]))
        for ext in stack["extensions"]:
            parsed = ext["parsed"]
            short = relative(ext["path"], stack.get("site_packages") or [])
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
            if ext["framework"] == HOROVOD and linked:
                if node_mpi is None:
                    warns.append(f"{label} links {mpi_label(linked)} but no libmpi was found for the node")
                elif linked["realpath"] != node_mpi["realpath"]:
                    fails.append(f"{label} links {mpi_label(linked)}, the node's MPI is {mpi_label(node_mpi)}")
    expected = {"not_found": [], "horovod_mpi": "the node's libmpi"}
    if fails:
        return Result(check, Status.FAIL, measured, expected, "; ".join(fails + errors + warns),
                      "rebuild or reinstall the framework against the node's libraries (site.yml --tags "
                      "frameworks); a Horovod built against another MPI than the mpirun that launches it "
                      "hangs or crashes at hvd.init()", evidence="\n\n".join(evidence))
    count = sum(len(s["extensions"]) for s in facts["stacks"])
    if errors:
        return Result(check, Status.ERROR, measured, expected, "; ".join(errors + warns),
                      "find out why the stack's python does not answer: run it by hand (`<python> -c pass`); a "
                      "stuck file system under it or a broken interpreter", evidence="\n\n".join(evidence))
    if warns:
        return Result(check, Status.WARN, measured, expected, "; ".join(warns), evidence="\n\n".join(evidence))
    links = sorted({mpi_label(e["mpi"]) for s in facts["stacks"] for e in s["extensions"] if e.get("mpi")})
    reason = f"{count} extension librar{'y' if count == 1 else 'ies'} resolve every dependency"
    if links:
        reason += f"; Horovod links {', '.join(links)}"
    return Result(check, Status.PASS, measured, expected, reason, evidence="\n\n".join(evidence))
