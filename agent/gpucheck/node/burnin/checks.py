"""The GPU burn-in (docs/burnin.md): `gpucheck node --full`, or a gpu.* active check named with --only.

Two collectors. `sku`: each GPU's entry in the SKU table (checks/gpus.yaml), matched by its PCI device id from
sysfs, else NVML's name. `gpuwork`: one worker (`python -m gpucheck.gpuwork.worker`) per GPU, all at once, each in
its own process group with CUDA_VISIBLE_DEVICES set to its GPU's UUID and bound to the CPUs of the GPU's NUMA node,
each killed at --bench-timeout (runner.py): a wedged GPU costs its own checks, never the agent or the other
GPUs. Only the tests of the selected checks run. After the workers end the kernel log is read again for the Xids
logged for each GPU during the run. The verdicts are in speed_verdicts.py and burn_verdicts.py.
"""

from __future__ import annotations

from typing import Any

from ... import skus
from .. import Check, CollectError, Context
from ..busy import beside, busy
from ..derived_profile import node_skus
from ..per_gpu import live_gpus
from . import burn_verdicts, speed_verdicts
from .host import gpu_cpus, uptime_s, xids_during
from .runner import Outcome, Program, gpu_program, run_programs
from .summary import summary

WORKER = "gpucheck.gpuwork.worker"
# check id -> the worker's test, in the order the worker runs them: the quick ones first, so that a worker killed
# during the burn has delivered the rest
TESTS = {"gpu.sdc": "sdc", "gpu.gemm": "gemm", "gpu.memory_bandwidth": "memory_bandwidth",
         "gpu.host_bandwidth": "host_bandwidth", "gpu.memtest": "memtest", "gpu.burn": "burn"}
UNKNOWN_SKU_DTYPES = ("fp16", "fp32")  # docs/burnin.md: what a GPU the SKU table does not know runs
BURN_DTYPES = ("bf16", "fp16", "fp32")  # the burn runs the first its SKU has a peak for
MEMTEST_FRACTION = 0.9  # of free memory the worker tests, unless burnin.memtest_coverage_min asks for more
SKU_FIELDS = ("id", "name", "peak_TFLOPS", "memory_bandwidth_GBps", "memory_MiB", "power_limit_W", "pcie_gen",
              "pcie_width", "nvlink_links", "nvlink_GBps_per_link")
__all__ = ["CHECKS", "COLLECTORS", "no_gpu_list", "summary"]


def label_of(gpu: dict[str, Any]) -> str:
    return f"GPU{gpu['index']}"


def collect_sku(ctx: Context) -> dict[str, Any]:
    """{"table", "error", "gpus": {label: the SKU's figures | None}}; a table that cannot be read is `error`."""
    gpus = live_gpus(ctx.facts.get("nvml") or {})
    try:
        table = skus.load(extra_dir=ctx.config.profiles_dir)
    except skus.SkuError as exc:
        return {"table": None, "error": str(exc), "gpus": {label_of(g): None for g in gpus}}
    found = {label: None if sku is None else {
        key: dict(getattr(sku, key)) if key == "peak_TFLOPS" else getattr(sku, key) for key in SKU_FIELDS}
        for label, sku in node_skus(ctx.facts.get("nvml") or {}, ctx.facts.get("pci_gpus"), table).items()}
    return {"table": str(table.path), "error": None, "gpus": found}


def selected_tests(ctx: Context) -> list[str]:
    return [test for check, test in TESTS.items() if ctx.selected is None or check in ctx.selected]


def burn_dtype(sku: dict[str, Any] | None, gpu: dict[str, Any]) -> str:
    if sku:
        return next((d for d in BURN_DTYPES if d in sku["peak_TFLOPS"]), "fp32")
    capability = str(gpu.get("compute_capability") or "0")
    return "bf16" if capability.split(".")[0].isdigit() and int(capability.split(".")[0]) >= 8 else "fp32"


def worker_program(ctx: Context, gpu: dict[str, Any], tests: list[str], cpus: str | None) -> Program:
    sku = ((ctx.facts.get("sku") or {}).get("gpus") or {}).get(label_of(gpu))
    profile_dtypes = ctx.profile.get("burnin", "gemm_dtypes") if ctx.profile else None
    dtypes = profile_dtypes or (list(sku["peak_TFLOPS"]) if sku else list(UNKNOWN_SKU_DTYPES))
    coverage = ctx.profile.get("burnin", "memtest_coverage_min", 0) if ctx.profile else 0
    args = ["--tests", ",".join(tests), "--gemm-dtypes", ",".join(dtypes), "--burn-seconds", f"{ctx.burn_seconds:g}",
            "--burn-dtype", burn_dtype(sku, gpu), "--memtest-fraction", f"{max(MEMTEST_FRACTION, coverage):g}"]
    if gpu.get("pci_bus_id"):  # NVML's sampling during the burn finds the GPU by it
        args += ["--bus-id", gpu["pci_bus_id"]]
    if cpus:
        args += ["--cpus", cpus]
    return gpu_program(WORKER, [gpu["uuid"]], args)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def not_finished(outcome: Outcome, tests: list[str], limit_s: float) -> dict[str, str]:
    """Why each test the worker did not report has no result."""
    missing = [test for test in tests if test not in outcome.results]
    if outcome.unavailable or not missing:
        return {}
    said = last_line(outcome.stderr_tail)
    said = f": {said}" if said else ""
    faulted = [(test, r["fault"]) for test, r in outcome.results.items() if r.get("fault")]
    if outcome.timed_out:
        why = f"not finished: killed at --bench-timeout ({limit_s:g} s) during {outcome.running or missing[0]}"
        if outcome.stuck:
            why += "; it did not end even then (stuck in the kernel: a wedged GPU or driver)"
    elif faulted:
        why = f"not run: the worker stopped after {faulted[-1][0]} failed ({faulted[-1][1]})"
    elif outcome.begin is None:
        why = f"not run: the worker exited with {outcome.exit} before its first line{said}"
    else:
        why = f"not run: the worker exited with {outcome.exit} during {outcome.running or 'its tests'}{said}"
    return {test: why for test in missing}


def no_gpu_list(ctx: Context) -> None:
    """The burn-in runs a worker per GPU NVML lists: without NVML's list it cannot run (gpu.count and the other
    NVML checks report why NVML failed)."""
    if ctx.facts.get("nvml") is None:
        raise CollectError("not run: NVML could not list the GPUs, so no worker can be pointed at one (see gpu.count "
                           "and the report's facts.collect_errors.nvml)",
                           "install or repair the NVIDIA driver (site.yml --tags gpu), then rerun", harness=True)


def collect_gpuwork(ctx: Context) -> dict[str, Any]:
    """Every live GPU's worker, all at once; see docs/burnin.md "Facts the node side keeps"."""
    no_gpu_list(ctx)
    tests = selected_tests(ctx)
    gpus = live_gpus(ctx.facts["nvml"])
    users = ctx.facts.get("gpu_users")
    held, shared = busy(users), beside(users)
    if ctx.gpus is not None:  # --gpus: the others are not in this run, so not in its facts either
        if unknown := sorted(set(ctx.gpus) - {g["index"] for g in gpus}):
            raise CollectError(f"not run: --gpus names GPU {', '.join(map(str, unknown))}, which NVML does not list "
                               f"(it lists {', '.join(str(g['index']) for g in gpus) or 'none'})",
                               "name the GPUs by NVML's index (nvidia-smi -L)", harness=True)
        gpus = [g for g in gpus if g["index"] in ctx.gpus]
    placed = {label_of(g): g for g in gpus if g.get("uuid") and label_of(g) not in held}
    buses = {label: g["pci_bus_id"] for label, g in placed.items() if g.get("pci_bus_id")}
    cpus = gpu_cpus(ctx, buses)
    programs = {label: worker_program(ctx, g, tests, cpus.get(label)) for label, g in placed.items()}
    began = uptime_s()
    outcomes = run_programs(programs, ctx.bench_timeout) if programs and tests else {}
    xids, xid_error = xids_during(ctx, began, buses) if outcomes else ({}, None)
    facts: dict[str, Any] = {}
    for gpu in gpus:
        label = label_of(gpu)
        outcome = outcomes.get(label) or Outcome()
        if label in held:
            outcome.unavailable = held[label]
        elif label not in placed:
            outcome.unavailable = "the worker cannot be pointed at this GPU: NVML gave no UUID for it"
        facts[label] = {"index": gpu["index"], "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                        "cpus": cpus.get(label), "begin": outcome.begin, "unavailable": outcome.unavailable,
                        "results": outcome.results, "not_finished": not_finished(outcome, tests, ctx.bench_timeout),
                        "exit": outcome.exit, "timed_out": outcome.timed_out, "stuck": outcome.stuck,
                        "seconds": outcome.seconds, "stderr_tail": outcome.stderr_tail,
                        "busy": label in held, "beside": shared.get(label)}
    return {"tests": tests, "burn_seconds": ctx.burn_seconds, "gpus": facts, "xids_during": xids,
            "xid_error": xid_error, "uptime_began_s": began}


NEEDS = ("nvml?", "pci_gpus?", "sku", "gpu_users", "gpuwork")  # without NVML: gpuwork says why
CHECKS = [
    Check("gpu.gemm", NEEDS, speed_verdicts.gemm,
          "dense GEMM TFLOP/s per dtype against the SKU's data-sheet peak (burn-in)", active=True),
    Check("gpu.memory_bandwidth", NEEDS, speed_verdicts.memory_bandwidth,
          "device memory copy GB/s against the SKU's data-sheet bandwidth (burn-in)", active=True),
    Check("gpu.host_bandwidth", NEEDS, speed_verdicts.host_bandwidth,
          "pinned host<->device GB/s against the PCIe link's rate, from the GPU's NUMA node (burn-in)", active=True),
    Check("gpu.memtest", NEEDS, speed_verdicts.memtest,
          "pattern test over most of free GPU memory: no bad word (burn-in)", active=True),
    Check("gpu.burn", NEEDS, burn_verdicts.burn,
          "sustained GEMM for --burn-seconds: no HW slowdown, overheating, Xid or throughput collapse", active=True),
    Check("gpu.sdc", NEEDS, burn_verdicts.sdc,
          "the same seeded GEMM gives identical bits on every GPU (silent data corruption)", active=True),
]
COLLECTORS = {"sku": collect_sku, "gpuwork": collect_gpuwork}
