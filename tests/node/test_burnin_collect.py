"""The burn-in's collector (node/burnin/checks.py `gpuwork`) with a stand-in worker module: one process per GPU, all at
once, each pointed at its GPU and bound to its NUMA node's CPUs (a fake sysfs), a hung one killed at
--bench-timeout while the others' results come out, and the Xids logged for each GPU during the run (a fake dmesg
and /proc/uptime)."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.burnin import burn_verdicts, speed_verdicts
from gpucheck.node.burnin import checks as burnin
from gpucheck.node.burnin.runner import KILL_GRACE_S
from gpucheck.profiles import load

GENERIC = load("generic")
UUIDS = [f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(3)]
BUSES = [f"00000000:{0x18 + i:02X}:00.0" for i in range(3)]

# The stand-in for `python -m gpucheck.gpuwork.worker`: says what it was asked, then behaves by its GPU.
WORKER = """
import json, os, sys, time
uuid = os.environ["CUDA_VISIBLE_DEVICES"]
with open(os.path.join(os.environ["CALLS_DIR"], uuid + ".json"), "w") as out:
    json.dump({"argv": sys.argv[1:], "order": os.environ.get("CUDA_DEVICE_ORDER")}, out)
with open(os.path.join(os.environ["CALLS_DIR"], "started.log"), "a") as log:
    log.write(uuid + "\\n")
def line(event, **fields):
    print("GPUCHECK_GPUWORK " + json.dumps({"event": event, **fields}), flush=True)
if uuid.endswith("2-1111-2222-3333-444444444444"):
    line("unavailable", reason="no usable CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected")
    sys.exit(3)
tests = sys.argv[sys.argv.index("--tests") + 1].split(",")
line("begin", cupy="14.2.0", cublas=120804, device={"name": "stand-in"})
figures = {"sdc": {"checksum": "5f" * 32, "n": 4096, "seed": 7}, "gemm": {"tflops": {"bf16": 777.0}, "errors": {}},
           "memtest": {"free_bytes": 100, "bytes_tested": 90, "coverage": 0.9, "bad_words": 0}}
for test in tests:
    line("start", test=test)
    if test == "memtest" and uuid.endswith("1-1111-2222-3333-444444444444"):
        time.sleep(600)  # a wedged GPU
    line("result", test=test, seconds=0.1, error=None, fault=None, **figures.get(test, {}))
line("end")
"""
DMESG = """\
[  900.000000] NVRM: Xid (PCI:0000:19:00): 79, pid=123, name=python, GPU has fallen off the bus.
[ 1005.250000] NVRM: Xid (PCI:0000:19:00): 48, pid=456, name=python, An uncorrectable double bit error (DBE)
[ 1006.500000] NVRM: Xid (PCI:0000:18:00): 13, pid=457, name=python, Graphics Exception: ESR 0x12345
"""


@pytest.fixture
def machine(tmp_path, monkeypatch, fake_bin):
    """Three GPUs: GPU0 healthy, GPU1 hangs in its memtest, GPU2 has no CUDA device. Returns a Context factory."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "standin_worker.py").write_text(textwrap.dedent(WORKER))
    calls = tmp_path / "calls"
    calls.mkdir()
    sysfs = tmp_path / "sys"
    devices = sysfs / "bus" / "pci" / "devices"
    (devices / "0000:18:00.0").mkdir(parents=True)
    (devices / "0000:18:00.0" / "local_cpulist").write_text("0-7\n")
    (devices / "0000:19:00.0").mkdir()
    (devices / "0000:19:00.0" / "numa_node").write_text("1\n")
    (sysfs / "devices" / "system" / "node" / "node1").mkdir(parents=True)
    (sysfs / "devices" / "system" / "node" / "node1" / "cpulist").write_text("8-15\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("1000.00 7000.00\n")
    fake_bin.add("dmesg", DMESG)
    monkeypatch.setattr(burnin, "WORKER", "standin_worker")
    for name, value in (("PYTHONPATH", str(modules)), ("CALLS_DIR", str(calls)), ("GPUCHECK_SYSFS_ROOT", str(sysfs)),
                        ("GPUCHECK_PROC_ROOT", str(proc)), ("GPUCHECK_STATE_DIR", str(tmp_path)),
                        ("PATH", fake_bin.path())):
        monkeypatch.setenv(name, value)

    def context(selected: tuple[str, ...] | None = None, bench_timeout: float = 3.0) -> Context:
        gpus = [{"index": i, "lost": False, "errors": {}, "name": "NVIDIA H100 80GB HBM3", "uuid": UUIDS[i],
                 "pci_bus_id": BUSES[i], "compute_capability": "9.0"} for i in range(3)]
        ctx = Context(timeout=10.0, bench_timeout=bench_timeout, profile=GENERIC, selected=selected, burn_seconds=5.0,
                      facts={"nvml": {"driver_version": "580.159.04", "gpus": gpus}})
        ctx.facts["sku"] = burnin.collect_sku(ctx)
        return ctx

    context.calls = lambda: {p.stem: json.loads(p.read_text()) for p in calls.glob("*.json")}
    context.started = lambda: (calls / "started.log").read_text().split()
    return context


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_every_gpu_gets_its_own_worker_at_once_and_a_hung_one_costs_only_its_own_results(machine):
    ctx = machine()
    began = time.monotonic()
    facts = burnin.collect_gpuwork(ctx)
    assert time.monotonic() - began < 3.0 + KILL_GRACE_S + 3  # one limit for all: they ran side by side
    calls = machine.calls()
    assert set(calls) == set(UUIDS)
    first = calls[UUIDS[0]]
    assert first["order"] == "PCI_BUS_ID"
    assert option(first["argv"], "--tests") == "sdc,gemm,memory_bandwidth,host_bandwidth,memtest,burn"
    assert option(first["argv"], "--gemm-dtypes") == "bf16,fp16,tf32,fp32,fp64"  # all the H100 SKU has
    assert (option(first["argv"], "--burn-seconds"), option(first["argv"], "--burn-dtype")) == ("5", "bf16")
    assert (option(first["argv"], "--bus-id"), option(first["argv"], "--memtest-fraction")) == (BUSES[0], "0.9")
    assert option(first["argv"], "--cpus") == "0-7"  # the device's local_cpulist
    assert option(calls[UUIDS[1]]["argv"], "--cpus") == "8-15"  # its numa_node's cpulist
    assert option(calls[UUIDS[2]]["argv"], "--cpus") is None  # sysfs says nothing: unbound

    gpus = facts["gpus"]
    assert gpus["GPU0"]["exit"] == 0 and set(gpus["GPU0"]["results"]) == set(burnin.TESTS.values())
    assert gpus["GPU0"]["cpus"] == "0-7" and gpus["GPU0"]["begin"]["cupy"] == "14.2.0"
    hung = gpus["GPU1"]
    assert hung["timed_out"] and set(hung["results"]) == {"sdc", "gemm", "memory_bandwidth", "host_bandwidth"}
    assert hung["not_finished"] == {test: "not finished: killed at --bench-timeout (3 s) during memtest"
                                    for test in ("memtest", "burn")}
    assert gpus["GPU2"]["unavailable"].startswith("no usable CUDA device: cudaErrorNoDevice")
    assert gpus["GPU2"]["exit"] == 3

    # the Xids stamped after the run began, each with its GPU; the one at 900 s is older than the run
    assert [e["xid"] for e in facts["xids_during"]["GPU1"]] == [48]
    assert [e["xid"] for e in facts["xids_during"]["GPU0"]] == [13]
    assert facts["xids_during"]["GPU2"] == [] and facts["xid_error"] is None

    memtest = speed_verdicts.memtest({**ctx.facts, "gpuwork": facts}, GENERIC)
    assert memtest.status == Status.ERROR and set(memtest.measured) == {"GPU0"}
    assert "GPU1 (00000000:19:00.0): not finished: killed at --bench-timeout (3 s) during memtest" in memtest.reason
    assert "GPU2 (00000000:1A:00.0): no usable CUDA device" in memtest.reason
    sdc = burn_verdicts.sdc({**ctx.facts, "gpuwork": facts}, GENERIC)
    assert sdc.status == Status.ERROR
    assert sdc.measured == {"GPU0": {"checksum": "5f" * 8}, "GPU1": {"checksum": "5f" * 8}}


def test_only_the_selected_checks_tests_run(machine):
    ctx = machine(selected=("gpu.xid", "gpu.burn", "gpu.memtest"))
    facts = burnin.collect_gpuwork(ctx)
    assert facts["tests"] == ["memtest", "burn"]
    assert option(machine.calls()[UUIDS[0]]["argv"], "--tests") == "memtest,burn"


def test_a_profile_names_the_gemm_dtypes_and_the_memtest_coverage(machine):
    ctx = machine(selected=("gpu.gemm",))
    ctx.profile = load("generic")
    ctx.profile.data["burnin"] = {**ctx.profile.data["burnin"], "gemm_dtypes": ["fp16"], "memtest_coverage_min": 0.95}
    burnin.collect_gpuwork(ctx)
    argv = machine.calls()[UUIDS[0]]["argv"]
    assert (option(argv, "--gemm-dtypes"), option(argv, "--memtest-fraction")) == ("fp16", "0.95")


def test_an_unknown_gpu_runs_fp16_and_fp32(machine):
    ctx = machine(selected=("gpu.gemm",))
    for gpu in ctx.facts["nvml"]["gpus"]:
        gpu.update(name="NVIDIA Imaginary X1", compute_capability="7.5")
    ctx.facts["sku"] = burnin.collect_sku(ctx)
    burnin.collect_gpuwork(ctx)
    argv = machine.calls()[UUIDS[0]]["argv"]
    assert (option(argv, "--gemm-dtypes"), option(argv, "--burn-dtype")) == ("fp16,fp32", "fp32")


def test_a_gpu_without_a_uuid_gets_no_worker(machine):
    ctx = machine(selected=("gpu.sdc",))
    ctx.facts["nvml"]["gpus"][0]["uuid"] = None
    facts = burnin.collect_gpuwork(ctx)
    assert facts["gpus"]["GPU0"]["unavailable"] == "the worker cannot be pointed at this GPU: NVML gave no UUID for it"
    assert UUIDS[0] not in machine.calls() and facts["gpus"]["GPU1"]["results"]["sdc"]


def test_a_kernel_log_that_cannot_be_read_is_said(machine, fake_bin):
    fake_bin.add("dmesg", "dmesg: read kernel buffer failed: Operation not permitted\n", exit_code=1)
    fake_bin.add("journalctl", "", exit_code=1)
    facts = burnin.collect_gpuwork(machine(selected=("gpu.sdc",)))
    assert facts["xids_during"] == {} and "the kernel log could not be read after the run" in facts["xid_error"]


def test_a_worker_that_exits_without_its_results_says_so():
    from gpucheck.node.burnin.runner import Outcome

    died = Outcome(begin={"event": "begin"}, running="gemm", exit=-11, stderr_tail="Fatal Python error: Segmentation")
    assert burnin.not_finished(died, ["sdc", "gemm"], 600) == {
        test: "not run: the worker exited with -11 during gemm: Fatal Python error: Segmentation"
        for test in ("sdc", "gemm")}
    faulted = Outcome(begin={}, results={"gemm": {"fault": "cudaErrorIllegalAddress"}}, exit=0)
    assert burnin.not_finished(faulted, ["gemm", "burn"], 600) == {
        "burn": "not run: the worker stopped after gemm failed (cudaErrorIllegalAddress)"}
    never = Outcome(exit=1, stderr_tail="ModuleNotFoundError: No module named 'cupy'\n")
    assert burnin.not_finished(never, ["sdc"], 600) == {
        "sdc": "not run: the worker exited with 1 before its first line: ModuleNotFoundError: No module named 'cupy'"}


def test_without_nvmls_gpu_list_the_burn_in_is_an_error_not_a_pass():
    from gpucheck.node import CollectError
    from gpucheck.node.burnin import p2p

    for collect in (burnin.collect_gpuwork, p2p.collect):
        with pytest.raises(CollectError) as caught:
            collect(Context(selected=("gpu.gemm", "gpu.p2p_bandwidth")))
        assert caught.value.harness and "NVML could not list the GPUs" in caught.value.reason


def test_the_pipeline_starts_the_workers_once_for_all_the_burn_in_checks(machine):
    from gpucheck.node import pipeline

    checks = pipeline.select_checks(["gpu.sdc", "gpu.gemm", "gpu.memtest"], [], full=False)
    ctx = machine(selected=tuple(c.id for c in checks))
    ctx.facts.pop("sku")  # found by the pipeline, before the workers start
    gather = pipeline.Gatherer(ctx)
    results = {c.id: pipeline.evaluate(c, gather, GENERIC) for c in checks}
    assert sorted(machine.started()) == sorted(UUIDS)
    assert results["gpu.gemm"].status == Status.ERROR and results["gpu.gemm"].measured == {
        "GPU0": {"bf16_TFLOPS": 777.0}, "GPU1": {"bf16_TFLOPS": 777.0}}
    assert "GPU1 (00000000:19:00.0): not finished: killed at --bench-timeout" in results["gpu.memtest"].reason
    summary = pipeline.summary_facts(ctx, GENERIC, gather)["burnin"]
    assert summary["gpus"]["GPU0"] == {"sku": "h100-sxm5-80gb", "gemm_TFLOPS": {"bf16": 777.0}, "memtest_bad_words": 0,
                                       "memtest_coverage": 0.9, "sdc_checksum": "5f" * 32,
                                       "sdc_inputs": "n=4096, seed 7"}
    assert summary["sdc"]["checksum"] == "5f" * 32 and summary["sdc"]["disagree"] == []


def test_an_xid_during_the_run_is_found_after_the_machine_was_suspended(monkeypatch):
    """/proc/uptime (when the run began) counts the 25 h the machine slept; the Xid's stamp does not: it was logged
    during the run, 50 s after the run began on the log's clock, and was missed."""
    from gpucheck.node import kernel_log
    from gpucheck.node.burnin.host import xids_during

    log = {"events": [{"xid": 48, "pci": "0000:18:00", "severity": "fatal", "uptime_s": 1050.0, "message": "DBE"}],
           "suspended_s": 90000.0}
    monkeypatch.setattr(kernel_log, "collect", lambda ctx: log)
    found, error = xids_during(Context(), 1000.0 + 90000.0, {"GPU0": "00000000:18:00.0"})
    assert error is None and [e["xid"] for e in found["GPU0"]] == [48]
