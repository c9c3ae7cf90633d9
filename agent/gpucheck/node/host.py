"""Host checks: RAM against GPU memory, CPU cores, free disk, data-path read throughput (--full)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import psutil

from ..model import Result, Status
from ..process import CallTimeout, call_with_timeout
from ..profiles import Profile
from . import Check, CollectError, Context
from .per_gpu import field_error, live_gpus, per_gpu

GiB = 1024**3
READ_TEST_BYTES = 256 * 1024 * 1024
CHUNK = 4 * 1024 * 1024


def collect(ctx: Context) -> dict[str, Any]:
    """Each call under ctx.call_limit: statvfs on a stuck network mount blocks in the kernel. A call that does
    not return is left behind (its thread cannot be stopped) and recorded under `errors` by fact name."""
    paths = (ctx.profile.get("host", "disk_free_GiB_min", {}) if ctx.profile else {}) or {"/": 0}
    errors: dict[str, str] = {}

    def ask(fact: str, call: str, fn: Any, *args: Any) -> Any:
        try:
            return call_with_timeout(fn, ctx.call_limit, *args)
        except CallTimeout as exc:
            errors[fact] = f"{call} {exc}"
            return None

    disks: dict[str, Any] = {}
    for path in paths:
        try:
            usage = ask(f"disk_free_GiB:{path}", f"shutil.disk_usage({path!r})", shutil.disk_usage, path)
            disks[path] = None if usage is None else usage.free / GiB
        except OSError as exc:
            disks[path] = f"cannot stat: {exc.strerror}"
    memory = ask("ram_GiB", "psutil.virtual_memory()", psutil.virtual_memory)
    return {
        "ram_GiB": None if memory is None else memory.total / GiB,
        "cpu_cores_logical": ask("cpu_cores_logical", "psutil.cpu_count(logical=True)", psutil.cpu_count, True),
        "cpu_cores_physical": ask("cpu_cores_physical", "psutil.cpu_count(logical=False)", psutil.cpu_count, False),
        "disk_free_GiB": disks,
        "errors": errors,
    }


def unread(f: dict[str, Any], check: str, fact: str, what: str) -> Result | None:
    """The `error` result for a host fact the collector could not read, or None when it was read."""
    error = (f["host"].get("errors") or {}).get(fact)
    if error is None:
        return None
    return Result(check, Status.ERROR, None, None, f"{what} not read: {error}",
                  "a call that does not return is stuck in the kernel: look for hung mounts (`mount -t nfs,cifs`, "
                  "dmesg 'not responding') and processes in D state (`ps -eo state,pid,cmd | grep ^D`)")


def memory(f: dict[str, Any], p: Profile) -> Result:
    ratio = p.get("host", "ram_to_gpu_memory_ratio_min")
    if ratio is None:
        ram = f["host"]["ram_GiB"]
        return Result("host.memory", Status.SKIP, None if ram is None else {"ram_GiB": round(ram, 1)},
                      reason="profile sets no RAM ratio")
    missing = unread(f, "host.memory", "ram_GiB", "RAM size")
    if missing:
        return missing
    ram = f["host"]["ram_GiB"]
    nvml = f.get("nvml")
    if nvml is None:
        return Result("host.memory", Status.SKIP, {"ram_GiB": round(ram, 1)},
                      reason="GPU memory unknown (NVML unavailable)")
    # a GPU whose memory size was not read leaves the total unknown: per_gpu's rule says which and why
    sizes = per_gpu("host.memory", nvml, lambda g: None if g.get("memory_total_MiB") is not None
                    or field_error(g, "memory") else (Status.ERROR, "memory size not reported"),
                    lambda g: g.get("memory_total_MiB"), f">= {ratio:g}x GPU memory", "", fields=("memory",))
    if sizes.status not in (Status.PASS, Status.SKIP):
        sizes.reason = f"total GPU memory unknown: {sizes.reason}"
        return sizes
    gpu_GiB = sum(g["memory_total_MiB"] for g in live_gpus(nvml)) / 1024
    need = ratio * gpu_GiB
    measured = {"ram_GiB": round(ram, 1), "gpu_memory_GiB": round(gpu_GiB, 1)}
    if ram < need:
        return Result("host.memory", Status.FAIL, measured, f">= {need:.0f} GiB ({ratio:g}x GPU memory)",
                      f"{ram:.0f} GiB RAM < {ratio:g} x {gpu_GiB:.0f} GiB of GPU memory",
                      "add memory: data loaders and pinned host buffers need about twice the GPU memory")
    return Result("host.memory", Status.PASS, measured, f">= {need:.0f} GiB", f"{ram:.0f} GiB RAM")


def cpu(f: dict[str, Any], p: Profile) -> Result:
    minimum, cores = p.get("host", "cpu_cores_min"), f["host"]["cpu_cores_logical"]
    if minimum is None:
        return Result("host.cpu", Status.SKIP, cores, reason="profile sets no CPU minimum")
    missing = unread(f, "host.cpu", "cpu_cores_logical", "CPU count")
    if missing:
        return missing
    if cores < minimum:
        return Result("host.cpu", Status.FAIL, cores, f">= {minimum}", f"{cores} CPU threads < {minimum}",
                      "check BIOS (SMT, cores disabled) and the kernel command line (maxcpus, isolcpus)")
    return Result("host.cpu", Status.PASS, cores, f">= {minimum}", f"{cores} CPU threads")


def disk(f: dict[str, Any], p: Profile) -> Result:
    wanted = p.get("host", "disk_free_GiB_min")
    if not wanted:
        return Result("host.disk", Status.SKIP, reason="profile sets no free-disk minimum")
    free = f["host"]["disk_free_GiB"]
    errors = f["host"].get("errors") or {}
    problems, unknown = [], []
    for path, minimum in wanted.items():
        have = free.get(path)
        if f"disk_free_GiB:{path}" in errors:
            unknown.append(f"{path}: free space not read: {errors[f'disk_free_GiB:{path}']}")
        elif not isinstance(have, float):
            problems.append(f"{path}: {have or 'not measured'}")
        elif have < minimum:
            problems.append(f"{path} has {have:.1f} GiB free < {minimum} GiB")
    # units in the keys, so every report format says "free / 72.5 GiB", never a bare "/=72.5"
    measured = {"free_GiB": {k: round(v, 1) if isinstance(v, float) else v for k, v in free.items()}}
    wanted = {"free_GiB_min": wanted}
    if unknown and not problems:
        return Result("host.disk", Status.ERROR, measured, wanted, "; ".join(unknown),
                      "a stuck mount (NFS, CIFS, FUSE) blocks every process that touches it: check `mount`, dmesg "
                      "('server not responding') and the file server")
    problems += unknown
    if problems:
        return Result("host.disk", Status.FAIL, measured, wanted, "; ".join(problems),
                      "free space (old checkpoints, container images, core dumps) or grow the filesystem")
    return Result("host.disk", Status.PASS, measured, wanted, "enough free space")


def collect_read(ctx: Context) -> dict[str, Any]:
    """Write a file, drop it from the page cache, read it back: what a data loader would see."""
    directory = (ctx.profile.get("host", "data_path") if ctx.profile else None) or tempfile.gettempdir()
    try:
        fd, path = tempfile.mkstemp(prefix=".gpucheck-read-", dir=directory)
    except OSError as exc:
        raise CollectError(f"cannot write a test file in {directory}: {exc.strerror}", harness=True) from None
    try:
        block = os.urandom(CHUNK)
        with os.fdopen(fd, "wb") as out:
            for _ in range(READ_TEST_BYTES // CHUNK):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        with open(path, "rb") as src:
            os.posix_fadvise(src.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            began = time.monotonic()
            while src.read(CHUNK):
                pass
            elapsed = time.monotonic() - began
    finally:
        os.unlink(path)
    return {"path": directory, "MBps": READ_TEST_BYTES / 1e6 / max(elapsed, 1e-9)}


def read_throughput(f: dict[str, Any], p: Profile) -> Result:
    minimum, facts = p.get("host", "read_throughput_MBps_min"), f["host_read"]
    measured = round(facts["MBps"])
    if minimum is None:
        return Result("host.read_throughput", Status.PASS, measured, None, f"{measured} MB/s from {facts['path']}")
    if measured < minimum:
        return Result("host.read_throughput", Status.FAIL, measured, f">= {minimum} MB/s",
                      f"{measured} MB/s from {facts['path']} < {minimum} MB/s",
                      "a slow data path starves the GPUs: check the filesystem mount and its network")
    return Result("host.read_throughput", Status.PASS, measured, f">= {minimum} MB/s",
                  f"{measured} MB/s from {facts['path']}")


CHECKS = [
    Check("host.memory", ("host", "nvml?"), memory, "RAM at least the profile's multiple of total GPU memory"),
    Check("host.cpu", ("host",), cpu, "CPU threads against the profile"),
    Check("host.disk", ("host",), disk, "free disk space per path"),
    Check("host.read_throughput", ("host_read",), read_throughput, "data-path read throughput", active=True),
]
COLLECTORS = {"host": collect, "host_read": collect_read}
