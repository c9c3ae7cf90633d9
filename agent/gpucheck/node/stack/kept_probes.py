"""A stack's framework probe, kept and reused while nothing its answers depend on has changed.

The probe imports TensorFlow (and initialises Horovod) in a new interpreter: ~2 CPU-s on an idle lab node, and 33 s
of the health check's 60-s deadline was seen on a loaded one. Slurm runs that check every 300 s on every node,
but the answers change only with the stack's files, the system's libraries, the driver, the GPUs, the probe itself
or the environment it runs in. So a probe that found nothing wrong is kept (under the state directory) with a
digest of each of those, and the next run reuses it while every digest is the same. `--full` always asks again.
What failed is never kept: a failing stack is asked again on every run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ... import files
from ...config import Stack
from ..per_gpu import live_gpus
from .framework_records import GPU_FRAMEWORKS, gpu_problem
from .stacks import HOROVOD

LIBRARY_CACHE = Path("/etc/ld.so.cache")  # ldconfig rewrites it whenever a package adds or changes a library
# What the probe's environment may carry that changes its answers (framework_probe.probe_env builds the rest).
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHONPATH")
ENV_PREFIXES = ("CUDA_", "HOROVOD_", "NCCL_", "OMPI_", "TF_", "TORCH_")
# The parts of the digest, in words, for the line that says why a stack was asked again.
PARTS = {"probe": "the probe", "files": "the stack's files", "libraries": "the system's libraries",
         "gpus": "the driver or the GPUs", "environment": "the probe's environment"}


def site_dirs(python: str) -> list[Path]:
    """The folders a stack's packages live in, found from where its python is (a virtualenv's, or a system
    prefix's), without starting it."""
    prefix = Path(python).parent.parent
    found = [*prefix.glob("lib/python3*/site-packages"), *prefix.glob("lib/python3/dist-packages"),
             *prefix.glob("local/lib/python3*/dist-packages")]
    return sorted(p for p in found if p.is_dir())


def _tree_digest(roots: list[Path]) -> str:
    """Every file's path, size and modification time under `roots` (bytecode caches left out: running the stack
    writes them): ~0.1 CPU-s for a TensorFlow stack's 14,500 files."""
    digest = hashlib.sha256()
    for root in roots:
        entries = []
        pending = [str(root)]
        while pending:
            with os.scandir(pending.pop()) as folder:
                for entry in folder:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != "__pycache__":
                            pending.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    entries.append(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}")
        digest.update("\n".join(sorted(entries)).encode(errors="surrogateescape"))
    return digest.hexdigest()


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"


def _sha(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def digests(stack: Stack, probe: Path, env: dict[str, str], nvml: dict[str, Any] | None) -> dict[str, str] | None:
    """What the probe's answers depend on, one digest per part (PARTS). None where that cannot be told without
    asking the stack: no NVML facts (the GPUs unknown), or no package folder found beside its python."""
    sites = site_dirs(stack.python)
    if nvml is None or not sites:
        return None
    python = Path(stack.python)
    try:
        probe_source = probe.read_bytes()
        tree = _tree_digest(sites)
    except OSError:
        return None
    return {
        "probe": _sha(hashlib.sha256(probe_source).hexdigest(), stack.python, sorted(stack.frameworks)),
        "files": _sha(tree, _stat(python.resolve()), _stat(python.parent.parent / "pyvenv.cfg")),
        "libraries": _sha(_stat(LIBRARY_CACHE)),
        "gpus": _sha(nvml.get("driver_version"), nvml.get("cuda_driver_version"),
                     sorted(str(g.get("uuid")) for g in live_gpus(nvml))),
        "environment": _sha({k: v for k, v in env.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}),
    }


def place(stack: Stack) -> Path:
    """Where a stack's probe is kept: one file per python, under the state directory."""
    return files.user_state_dir() / "probes" / (hashlib.sha256(stack.python.encode()).hexdigest()[:16] + ".json")


def found_nothing_wrong(entry: dict[str, Any], gpus: int) -> bool:
    """The probe finished without an error, every framework imported, every hvd.init() worked and every CUDA build
    can use all `gpus` (NVML's): worth keeping. A CPU build's answers are its files': kept too."""
    probe = entry.get("probe") or {}
    if entry.get("error") or "_done" not in probe:
        return False
    horovod = list((probe.get(HOROVOD) or {}).values())
    records = [probe[name] for name in GPU_FRAMEWORKS if name in probe] + horovod
    if not all(r.get("import_ok") and not r.get("errors") for r in records):
        return False
    if not all((r.get("init") or {}).get("ok") for r in horovod):
        return False
    return all(gpu_problem(framework, probe[name], gpus) is None
               for name, framework in GPU_FRAMEWORKS.items() if name in probe and framework.archs(probe[name]))


def reuse(stack: Stack, now: dict[str, str] | None) -> tuple[dict[str, Any] | None, str]:
    """(the kept entry, marked as reused) while every digest is as kept; else (None, why it is asked again)."""
    if now is None:
        return None, "asked: nothing to tell a change by (no NVML facts, or no package folder beside its python)"
    try:
        kept = json.loads(place(stack).read_text())
        then, entry, when = kept["digests"], kept["entry"], kept["probed_at"]
        if not (isinstance(then, dict) and isinstance(entry, dict)):
            raise ValueError("not a kept probe")
    except FileNotFoundError:
        return None, "asked: no answers kept from an earlier run"
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        return None, f"asked: the kept answers could not be read ({exc})"
    changed = [words for part, words in PARTS.items() if then.get(part) != now.get(part)]
    if changed:
        return None, f"asked again: {', '.join(changed)} changed since {when}"
    entry["reuse"] = (f"the answers of {when}, reused: the stack's files, the system's libraries, the driver, the GPUs "
                      "and the probe's environment are as they were (gpucheck node --full asks again)")
    return entry, entry["reuse"]


def keep(stack: Stack, entry: dict[str, Any], now: dict[str, str] | None, nvml: dict[str, Any] | None) -> str:
    """Keep `entry` for later runs when it found nothing wrong; what was done, in words."""
    if now is None or nvml is None:
        return "not kept: a later run could not tell whether anything changed"
    if not found_nothing_wrong(entry, len(live_gpus(nvml))):
        return "not kept: only answers that found nothing wrong are reused"
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    try:
        path = place(stack)
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomically(path, json.dumps({"probed_at": when, "digests": now, "entry": entry}))
    except (OSError, RuntimeError) as exc:
        return f"not kept: {exc}"
    return f"kept for the next runs ({path})"
