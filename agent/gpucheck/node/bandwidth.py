"""NCCL all-reduce bus bandwidth across this node's GPUs (--full): nccl-tests' all_reduce_perf where it is on PATH,
else the built-in NCCL all-reduce (`python -m gpucheck.gpuwork.allreduce`, docs/burnin.md), judged alike: the bus
bandwidth against bandwidth.nccl_allreduce_busbw_GBps_min, and any wrong value fails. With one GPU the built-in
does not run: an all-reduce over one GPU moves nothing over a bus."""

from __future__ import annotations

from typing import Any

from ..model import Result, Status
from ..parsers import ParseError, parse
from ..process import run
from ..profiles import Profile
from . import Check, Context
from .burnin.runner import gpu_program, run_programs
from .busy import refuse_if_busy
from .per_gpu import live_gpus

# "Avg bus bandwidth" averages the whole size sweep; one large size gives the pass/fail figure.
DEFAULT_SIZE_B = 8 * 1024**3
BUILTIN = "gpucheck.gpuwork.allreduce"
BUILTIN_MEMORY_SHARE = 4  # the built-in's buffer is at most a quarter of the smallest GPU's memory (send + receive)
MIB = 1024**2


def collect(ctx: Context) -> dict[str, Any]:
    refuse_if_busy(ctx, "the NCCL all-reduce (every GPU at once)")
    gpus = len(live_gpus(ctx.facts.get("nvml") or {})) or 1
    size = str(ctx.profile.get("bandwidth", "nccl_allreduce_size_B", DEFAULT_SIZE_B) if ctx.profile else DEFAULT_SIZE_B)
    done = run(["all_reduce_perf", "-b", size, "-e", size, "-g", str(gpus), "-n", "20", "-w", "5", "-c", "1"],
               ctx.bench_timeout)
    if done.not_found:
        return {"available": False, "builtin": builtin(ctx, int(size))}
    facts: dict[str, Any] = {"available": True, "gpus": gpus, "evidence": done.output,
                             "command_failed": None if done.ok else done.describe_failure()}
    try:
        facts["parsed"] = parse("nccl-tests", done.stdout)
    except ParseError as exc:
        facts["parse_error"] = str(exc)
    return facts


def builtin(ctx: Context, size_B: int) -> dict[str, Any]:
    """The built-in all-reduce over every live GPU: {"gpus", "one_gpu" | "unavailable" | "fault" | "error" |
    "result", "evidence"}."""
    if ctx.facts.get("nvml") is None:
        return {"gpus": 0, "unavailable": "NVML could not list the GPUs (see gpu.count): no GPU to point it at"}
    gpus = live_gpus(ctx.facts["nvml"])
    placed = [g for g in gpus if g.get("uuid")]
    if len(gpus) <= 1:
        return {"gpus": len(gpus), "one_gpu": True}
    if len(placed) < 2:
        return {"gpus": len(gpus), "unavailable": "NVML gave a UUID for fewer than two GPUs: nothing to point it at"}
    memories = [g["memory_total_MiB"] * MIB for g in placed if g.get("memory_total_MiB")]
    size_B = min([size_B, *(m // BUILTIN_MEMORY_SHARE for m in memories)])
    program = gpu_program(BUILTIN, [g["uuid"] for g in placed], ["--bytes", str(size_B)])
    outcome = run_programs({"allreduce": program}, ctx.bench_timeout)["allreduce"]
    facts: dict[str, Any] = {"gpus": len(placed), "bytes": size_B, "evidence": outcome.stderr_tail}
    result = outcome.results.get("allreduce")
    if outcome.unavailable:
        facts["unavailable"] = outcome.unavailable
    elif result is None:
        facts["error"] = (f"killed at --bench-timeout ({ctx.bench_timeout:g} s)" if outcome.timed_out
                          else f"exited with {outcome.exit} without a result")
    elif result.get("fault") or result.get("error"):
        facts["fault" if result.get("fault") else "error"] = result.get("fault") or result.get("error")
    else:
        facts["result"] = result
    return facts


def judge_builtin(check: str, facts: dict[str, Any], minimum: Any, expected: Any, required: bool) -> Result:
    """The built-in all-reduce's verdict, judged as all_reduce_perf's."""
    absent = "all_reduce_perf (nccl-tests) not found on PATH"
    evidence = facts.get("evidence", "")
    if facts.get("one_gpu"):
        return Result(check, Status.SKIP, None, expected, f"one GPU: no bus bandwidth ({absent})")
    if facts.get("unavailable"):
        return Result(check, Status.ERROR if required else Status.SKIP, None, expected,
                      f"{absent}, and the built-in NCCL all-reduce cannot run: {facts['unavailable']}",
                      "build nccl-tests (make MPI=1) and put its build/ on PATH, or install gpucheck's gpu extra "
                      "(CuPy with NCCL)" if required else "", evidence)
    if facts.get("fault"):
        return Result(check, Status.FAIL, None, expected, f"built-in NCCL all-reduce failed: {facts['fault']}",
                      "a GPU or NVLink fault: check gpu.xid and gpu.nvlink, rerun with NCCL_DEBUG=INFO", evidence)
    if facts.get("error"):
        return Result(check, Status.ERROR, None, expected, f"built-in NCCL all-reduce: {facts['error']}",
                      evidence=evidence)
    result = facts["result"]
    busbw, wrong, gpus = result.get("busbw_GBps"), result.get("wrong"), result.get("gpus", facts["gpus"])
    where = f"across {gpus} GPUs (the built-in NCCL all-reduce; {absent})"
    if wrong:
        return Result(check, Status.FAIL, busbw, expected, f"{wrong} wrong values {where}",
                      "data corruption or NCCL failure: check Xids (gpu.xid), gpu.sdc and NVLink", evidence)
    if not isinstance(busbw, (int, float)):
        return Result(check, Status.ERROR, None, expected, f"no bus bandwidth in the result {where}",
                      evidence=evidence)
    if minimum and busbw < minimum:
        return Result(check, Status.FAIL, busbw, expected, f"bus bandwidth {busbw:g} GB/s < {minimum:g} GB/s {where}",
                      "check NVLink (gpu.nvlink), Fabric Manager and PCIe links; compare with NCCL_DEBUG=INFO "
                      "transports", evidence)
    return Result(check, Status.PASS, busbw, expected, f"bus bandwidth {busbw:g} GB/s {where}", evidence=evidence)


def allreduce(f: dict[str, Any], p: Profile) -> Result:
    check, facts = "bw.nccl_allreduce", f["nccl_bw"]
    minimum = p.get("bandwidth", "nccl_allreduce_busbw_GBps_min")
    expected = f">= {minimum} GB/s" if minimum else None
    if not facts["available"]:
        required = p.get("bandwidth", "nccl_tests_required", False)
        if facts.get("builtin") is not None:
            return judge_builtin(check, facts["builtin"], minimum, expected, required)
        return Result(check, Status.ERROR if required else Status.SKIP, None, expected,
                      "all_reduce_perf (nccl-tests) not found on PATH",
                      "build nccl-tests (make MPI=1) and put its build/ on PATH" if required else "")
    evidence = facts["evidence"]
    parsed = facts.get("parsed")
    if parsed is None:
        return Result(check, Status.ERROR, None, expected,
                      facts["command_failed"] or f"cannot read all_reduce_perf output: {facts['parse_error']}",
                      evidence=evidence)
    busbw = parsed.get("max_busbw_GBps")
    if parsed.get("failed"):
        errors = "; ".join(parsed.get("errors") or []) or f"{parsed.get('wrong_total')} wrong values"
        return Result(check, Status.FAIL, busbw, expected, f"all_reduce_perf failed: {errors}",
                      "data corruption or NCCL failure: run NCCL_DEBUG=INFO all_reduce_perf and check Xids",
                      evidence)
    if busbw is None:
        return Result(check, Status.ERROR, None, expected, facts["command_failed"] or "no result rows",
                      evidence=evidence)
    if minimum and busbw < minimum:
        return Result(check, Status.FAIL, busbw, expected,
                      f"bus bandwidth {busbw:g} GB/s < {minimum:g} GB/s across {facts['gpus']} GPUs",
                      "check NVLink (gpu.nvlink), Fabric Manager and PCIe links; compare with NCCL_DEBUG=INFO "
                      "transports", evidence)
    return Result(check, Status.PASS, busbw, expected, f"bus bandwidth {busbw:g} GB/s across {facts['gpus']} GPUs",
                  evidence=evidence)


CHECKS = [Check("bw.nccl_allreduce", ("nvml?", "gpu_users", "nccl_bw"), allreduce,
                "NCCL all-reduce bus bandwidth across the node's GPUs (all_reduce_perf, else built in)", active=True)]
COLLECTORS = {"nccl_bw": collect}
