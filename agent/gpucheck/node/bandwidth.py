"""NCCL all-reduce bus bandwidth across this node's GPUs with nccl-tests (--full)."""

from __future__ import annotations

from typing import Any

from ..model import Result, Status
from ..parsers import ParseError, parse
from ..process import run
from ..profiles import Profile
from . import Check, Context
from .per_gpu import live_gpus

# "Avg bus bandwidth" averages the whole size sweep; one large size gives the pass/fail figure.
DEFAULT_SIZE_B = 8 * 1024**3


def collect(ctx: Context) -> dict[str, Any]:
    gpus = len(live_gpus(ctx.facts.get("nvml") or {})) or 1
    size = str(ctx.profile.get("bandwidth", "nccl_allreduce_size_B", DEFAULT_SIZE_B) if ctx.profile else DEFAULT_SIZE_B)
    done = run(["all_reduce_perf", "-b", size, "-e", size, "-g", str(gpus), "-n", "20", "-w", "5", "-c", "1"],
               ctx.bench_timeout)
    if done.not_found:
        return {"available": False}
    facts: dict[str, Any] = {"available": True, "gpus": gpus, "evidence": done.output,
                             "command_failed": None if done.ok else done.describe_failure()}
    try:
        facts["parsed"] = parse("nccl-tests", done.stdout)
    except ParseError as exc:
        facts["parse_error"] = str(exc)
    return facts


def allreduce(f: dict[str, Any], p: Profile) -> Result:
    check, facts = "bw.nccl_allreduce", f["nccl_bw"]
    minimum = p.get("bandwidth", "nccl_allreduce_busbw_GBps_min")
    expected = f">= {minimum} GB/s" if minimum else None
    if not facts["available"]:
        required = p.get("bandwidth", "nccl_tests_required", False)
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


CHECKS = [Check("bw.nccl_allreduce", ("nvml?", "nccl_bw"), allreduce,
                "NCCL all-reduce bus bandwidth across the node's GPUs", active=True)]
COLLECTORS = {"nccl_bw": collect}
