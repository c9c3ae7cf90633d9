"""The burn-in verdicts (gpu.gemm, gpu.memory_bandwidth, gpu.host_bandwidth, gpu.memtest, gpu.burn, gpu.sdc) on
recorded worker results. The figures are the real H100 SXM5's (tests/fixtures/measured/h100-sxm-80gb-driver580/
README.md), judged against the SKU table's h100-sxm5-80gb entry as `gpucheck node` finds it."""

from __future__ import annotations

import copy
import json

import pytest

from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.burnin import burn_verdicts, speed_verdicts
from gpucheck.node.burnin import checks as burnin
from gpucheck.node.burnin.summary import summary
from gpucheck.profiles import Profile, load
from support import FIXTURES

MEASURED = FIXTURES / "measured" / "h100-sxm-80gb-driver580"
GENERIC = load("generic")
GIB = 1024**3


def h100(index: int) -> dict:
    """The NVML collector's facts of the measured H100, as GPU `index` of a node."""
    gpu = json.loads((MEASURED / "nvml-collector-facts.json").read_text())["gpus"][0]
    return {**gpu, "index": index, "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
            "uuid": f"GPU-ef56da61-4096-5c80-f143-eb7a7d61b0{index:02d}"}


def result(test: str, **figures) -> dict:
    return {"event": "result", "test": test, "seconds": 1.0, "error": None, "fault": None, **figures}


# What the worker reports on the measured H100 (README's table; a median of 680 TFLOP/s per docs/burnin.md).
FREE_B = 80_000 * 1024**2
H100_RESULTS = {
    "sdc": result("sdc", checksum="5f" * 32, dtype="bf16", n=4096, seed=1234),
    "gemm": result("gemm", tflops={"bf16": 777.0, "fp16": 750.0, "tf32": 386.0, "fp32": 51.8, "fp64": 55.4},
                   n={d: 8192 for d in ("bf16", "fp16", "tf32", "fp32", "fp64")}, errors={}),
    "memory_bandwidth": result("memory_bandwidth", copy_GBps=3026.0, bytes=4 * GIB),
    "host_bandwidth": result("host_bandwidth", h2d_GBps=54.1, d2h_GBps=53.9, bytes=GIB, pinned=True, cpus="0-15"),
    "memtest": result("memtest", free_bytes=FREE_B, bytes_tested=int(FREE_B * 0.9), coverage=0.9,
                      patterns=["alternating", "zeros_ones", "walking_ones", "walking_zeros", "address"],
                      bad_words=0, bad_offsets=[], bad_by_pattern={}, chunk_bytes=GIB),
    "burn": result("burn", dtype="bf16", n=16384, seconds=30.0,
                   tflops={"min": 605.0, "median": 680.0, "max": 718.0},
                   windows_TFLOPS=[718.0, 702.0, 690.0, 680.0, 677.0, 605.0], samples=60, sample_interval_s=0.5,
                   nvml={"sm_clock_MHz": {"min": 1095, "median": 1755, "max": 1980},
                         "temperature_C": {"min": 41, "median": 77, "max": 80},
                         "power_W": {"min": 310.0, "median": 699.0, "max": 701.0},
                         "reasons_seen": {"sw_power_cap": 58}, "slowdown_temperature_C": 89,
                         "timeline": {"every_s": 0.5, "temperature_C": [41.0, 77.0, 80.0], "power_W": [310.0, 699.0,
                                                                                                    701.0]}},
                   windows_timeline={"every_s": 5.0, "TFLOPS": [718.0, 605.0]}, nvml_error=None),
}


def node(gpus: int = 1, name: str | None = None) -> dict:
    """Collected facts of a node of `gpus` measured H100s whose workers all reported H100_RESULTS."""
    nvml = {"driver_version": "580.159.04", "gpus": [h100(i) for i in range(gpus)]}
    if name:
        for gpu in nvml["gpus"]:
            gpu["name"] = name
    ctx = Context(facts={"nvml": nvml})
    sku = burnin.collect_sku(ctx)
    work = {f"GPU{g['index']}": {"index": g["index"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"],
                                  "cpus": "0-15", "begin": {"event": "begin", "cupy": "14.2.0", "cublas": 120804},
                                  "unavailable": None, "results": copy.deepcopy(H100_RESULTS), "not_finished": {},
                                  "exit": 0, "timed_out": False, "stderr_tail": ""} for g in nvml["gpus"]}
    return {"nvml": nvml, "sku": sku, "gpuwork": {"tests": list(H100_RESULTS), "burn_seconds": 30.0, "gpus": work,
                                                  "xids_during": {label: [] for label in work}, "xid_error": None}}


def gpu_result(facts: dict, label: str, test: str) -> dict:
    return facts["gpuwork"]["gpus"][label]["results"][test]


def test_the_sku_collector_finds_the_measured_h100():
    sku = node(2)["sku"]
    assert sku["error"] is None and sku["table"].endswith("checks/gpus.yaml")
    assert sku["gpus"]["GPU1"]["id"] == "h100-sxm5-80gb" and sku["gpus"]["GPU1"]["peak_TFLOPS"]["bf16"] == 989


def test_the_measured_h100_passes_every_burn_in_check():
    facts = node(2)
    for evaluate in (speed_verdicts.gemm, speed_verdicts.memory_bandwidth, speed_verdicts.host_bandwidth,
                     speed_verdicts.memtest, burn_verdicts.burn, burn_verdicts.sdc):
        result = evaluate(facts, GENERIC)
        assert result.status == Status.PASS, (evaluate.__name__, result.reason)
    gemm = speed_verdicts.gemm(facts, GENERIC)
    assert gemm.measured["GPU0"]["bf16_TFLOPS"] == 777.0 and gemm.measured["GPU1"]["fp64_TFLOPS"] == 55.4
    assert gemm.expected["bf16_TFLOPS"] == ">= 593 (0.6 x 989)"
    assert "lowest: GPU0 fp16_TFLOPS at 0.76 of the SKU's peak" in gemm.reason
    host = speed_verdicts.host_bandwidth(facts, GENERIC)
    assert host.expected == {"h2d_GBps": ">= 37.8 (0.6 x 63)", "d2h_GBps": ">= 37.8 (0.6 x 63)"}
    burn = burn_verdicts.burn(facts, GENERIC)
    assert burn.measured["GPU0"] == {"TFLOPS_min": 605.0, "TFLOPS_median": 680.0, "TFLOPS_max": 718.0,
                                     "sm_clock_MHz_min": 1095, "temperature_C_max": 80, "power_W_max": 701.0}
    assert "sw_power_cap seen" in burn.reason and "hottest 80 °C" in burn.reason


@pytest.mark.parametrize("evaluate,test,change,words", [
    (speed_verdicts.gemm, "gemm", lambda r: r["tflops"].update(bf16=500.0),
     "bf16 500 TFLOP/s < 593 (0.6 x peak 989; 0.51 of it)"),
    (speed_verdicts.gemm, "gemm", lambda r: r["tflops"].update(bf16=0.0002),  # a small share is not 0.00
     "bf16 0.0002 TFLOP/s < 593 (0.6 x peak 989; 2e-07 of it)"),
    (speed_verdicts.memory_bandwidth, "memory_bandwidth", lambda r: r.update(copy_GBps=2000.0),
     "copy 2000 GB/s < 2345 (0.7 x data sheet 3350"),
    (speed_verdicts.host_bandwidth, "host_bandwidth", lambda r: r.update(h2d_GBps=25.2),
     "h2d 25.2 GB/s < 37.8 (0.6 x PCIe Gen5 x16 (NVML's maximum) 63"),
    (speed_verdicts.memtest, "memtest",
     lambda r: r.update(bad_words=3, bad_offsets=[0x1000, 0x2000, 0x3008], bad_by_pattern={"walking_ones": 3}),
     "3 bad words in 70.3 GiB tested (first at byte offsets 0x1000, 0x2000, 0x3008); by pattern: walking_ones 3"),
    (burn_verdicts.burn, "burn", lambda r: r["nvml"]["reasons_seen"].update(hw_slowdown=4), "hw_slowdown in 4 of 60"),
    (burn_verdicts.burn, "burn", lambda r: r["nvml"]["reasons_seen"].update(hw_power_brake_slowdown=1),
     "hw_power_brake_slowdown in 1 of 60"),
    (burn_verdicts.burn, "burn", lambda r: r["nvml"]["temperature_C"].update(max=91),
     "hottest sample 91 °C > 89 °C (NVML's slowdown threshold)"),
    (burn_verdicts.burn, "burn", lambda r: r["tflops"].update(min=300.0),
     "throughput collapsed: the lowest ~1 s window 300 TFLOP/s < 0.5 x the median 680 (0.44)"),
])
def test_a_gpu_short_of_its_figure_fails_and_only_it_is_named(evaluate, test, change, words):
    facts = node(4)
    change(gpu_result(facts, "GPU2", test))
    result = evaluate(facts, GENERIC)
    assert result.status == Status.FAIL, result.reason
    assert words in result.reason and "GPU2 (00000000:1A:00.0)" in result.reason
    assert not any(f"GPU{i}" in result.reason for i in (0, 1, 3)), result.reason
    assert set(result.measured) == {"GPU0", "GPU1", "GPU2", "GPU3"} and result.remediation


def test_an_xid_during_the_burn_fails_that_gpu():
    facts = node(2)
    xid = {"xid": 79, "pci": "0000:19:00", "severity": "fatal", "uptime_s": 5012.3, "message": "GPU has fallen off"}
    facts["gpuwork"]["xids_during"]["GPU1"] = [xid]
    result = burn_verdicts.burn(facts, GENERIC)
    assert result.status == Status.FAIL and "GPU1 (00000000:19:00.0): Xid 79 logged during the run" in result.reason
    assert "GPU0" not in result.reason


def test_the_xid_of_our_own_kill_is_not_the_gpus_fault():
    facts = node(1)
    work = facts["gpuwork"]["gpus"]["GPU0"]
    work["results"].pop("burn")
    work.update(timed_out=True, not_finished={"burn": "not finished: killed at --bench-timeout (600 s) during burn"})
    facts["gpuwork"]["xids_during"]["GPU0"] = [{"xid": 45, "pci": "0000:18:00", "uptime_s": 900.0}]
    result = burn_verdicts.burn(facts, GENERIC)
    assert result.status == Status.ERROR and "killed at --bench-timeout (600 s) during burn" in result.reason
    assert speed_verdicts.memtest(facts, GENERIC).status == Status.PASS  # delivered before the kill: still judged


def test_sw_power_cap_alone_passes_and_a_profile_may_fail_it():
    facts = node(1)
    assert burn_verdicts.burn(facts, GENERIC).status == Status.PASS
    strict = Profile("strict", None, {"burnin": {"burn_reasons_fail": ["sw_power_cap"]}})
    result = burn_verdicts.burn(facts, strict)
    assert result.status == Status.FAIL and "sw_power_cap in 58 of 60 samples" in result.reason


def test_the_profile_temperature_limit_wins_over_nvmls():
    facts = node(1)
    cool = Profile("cool", None, {"burnin": {"burn_temperature_C_max": 75}})
    result = burn_verdicts.burn(facts, cool)
    assert result.status == Status.FAIL
    assert "hottest sample 80 °C > 75 °C (burnin.burn_temperature_C_max)" in result.reason


def test_a_burn_nvml_could_not_sample_is_judged_on_throughput_and_never_passes():
    facts = node(1)
    gpu_result(facts, "GPU0", "burn").update(nvml=None, samples=0, nvml_error="nvmlInit: NVML_ERROR_LIB_RM_VERSION")
    result = burn_verdicts.burn(facts, GENERIC)
    assert result.status == Status.ERROR and "only the throughput was judged" in result.reason
    gpu_result(facts, "GPU0", "burn")["tflops"]["min"] = 100.0
    assert burn_verdicts.burn(facts, GENERIC).status == Status.FAIL


def test_a_kernel_log_not_read_after_the_run_leaves_the_xids_unknown():
    facts = node(1)
    facts["gpuwork"]["xid_error"] = "the kernel log could not be read after the run: dmesg exited with 1"
    result = burn_verdicts.burn(facts, GENERIC)
    assert result.status == Status.ERROR and "Xids during the run not known" in result.reason


def test_memtest_that_covered_too_little_is_an_error_saying_how_much_of_the_whole_memory():
    facts = node(1)
    gpu_result(facts, "GPU0", "memtest").update(bytes_tested=20 * GIB, coverage=0.256)
    result = speed_verdicts.memtest(facts, GENERIC)
    assert result.status == Status.ERROR
    assert "could not test enough memory: 20.0 GiB of 79.6 GiB total (25% < 85%)" in result.reason


def test_memory_another_program_holds_is_never_a_silent_memtest_pass():
    """The real H200 beside a program holding 60 % of its memory: the worker tested 0.9 of what was free and
    called it coverage 0.9; of the GPU's memory that is 36 %, which must not pass."""
    facts = node(1)
    total = facts["nvml"]["gpus"][0]["memory_total_MiB"] * 1024**2
    free = int(total * 0.4)
    gpu_result(facts, "GPU0", "memtest").update(free_bytes=free, bytes_tested=int(free * 0.9), coverage=0.9)
    result = speed_verdicts.memtest(facts, GENERIC)
    assert result.status == Status.ERROR
    assert "28.7 GiB of 79.6 GiB total (36% < 85%)" in result.reason
    assert result.measured["GPU0"]["coverage"] == 0.36


def test_memtest_coverage_is_of_the_whole_memory_on_an_idle_gpu():
    """An idle H100: 0.9 of what was free is 88 % of its 81,559 MiB, above the 85 % the profile asks."""
    result = speed_verdicts.memtest(node(1), GENERIC)
    assert result.status == Status.PASS and result.measured["GPU0"]["coverage"] == 0.883


def test_an_unknown_gpu_is_measured_not_judged():
    facts = node(1, name="NVIDIA Imaginary X1")
    assert facts["sku"]["gpus"]["GPU0"] is None
    for evaluate in (speed_verdicts.gemm, speed_verdicts.memory_bandwidth):
        result = evaluate(facts, GENERIC)
        assert result.status == Status.SKIP and result.measured["GPU0"]
        assert "measured, not judged: NVIDIA Imaginary X1 is not in the GPU SKU table (" in result.reason
        assert "checks/gpus.yaml)" in result.reason
    # the checks that need no data sheet still judge it
    assert speed_verdicts.host_bandwidth(facts, GENERIC).status == Status.PASS
    assert burn_verdicts.burn(facts, GENERIC).status == Status.PASS


def test_a_dtype_the_sku_has_no_figure_for_is_measured_not_judged():
    facts = node(1)
    facts["sku"]["gpus"]["GPU0"]["peak_TFLOPS"].pop("fp64")
    result = speed_verdicts.gemm(facts, GENERIC)
    assert result.status == Status.PASS and "fp64 measured, not judged" in result.reason
    assert result.measured["GPU0"]["fp64_TFLOPS"] == 55.4 and "fp64_TFLOPS" not in result.expected


def test_a_dtype_that_could_not_run_is_an_error():
    facts = node(1)
    gemm = gpu_result(facts, "GPU0", "gemm")
    gemm["tflops"].pop("tf32")
    gemm["errors"] = {"tf32": "cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED"}
    result = speed_verdicts.gemm(facts, GENERIC)
    assert result.status == Status.ERROR and "tf32 not measured: cublasGemmEx" in result.reason


def test_a_broken_sku_table_is_an_error_not_an_unknown_gpu():
    facts = node(1)
    facts["sku"] = {"table": None, "error": "GPU SKU table x.yaml: bad", "gpus": {"GPU0": None}}
    result = speed_verdicts.gemm(facts, GENERIC)
    assert result.status == Status.ERROR and "the GPU SKU table could not be read" in result.reason


def test_a_worker_that_said_unavailable_is_one_error_for_all_its_checks():
    facts = node(2)
    why = ("no usable CUDA device: no CUDA driver answers (cudaErrorInsufficientDriver): this CuPy needs one for "
           "CUDA 12.9")
    for work in facts["gpuwork"]["gpus"].values():
        work.update(unavailable=why, results={}, exit=3)
    for evaluate in (speed_verdicts.gemm, speed_verdicts.memtest, burn_verdicts.burn, burn_verdicts.sdc):
        result = evaluate(facts, GENERIC)
        assert result.status == Status.ERROR
        assert result.reason == f"GPU0 (00000000:18:00.0), GPU1 (00000000:19:00.0): {why}"


def test_a_fault_is_the_gpus_failure_and_a_test_error_is_an_error():
    facts = node(2)
    gpu_result(facts, "GPU0", "memtest").update(fault="cudaErrorECCUncorrectable: uncorrectable ECC error")
    gpu_result(facts, "GPU1", "memtest").update(error="out of memory: another process holds 70 GiB")
    result = speed_verdicts.memtest(facts, GENERIC)
    assert result.status == Status.FAIL
    assert "GPU0 (00000000:18:00.0): memtest failed: cudaErrorECCUncorrectable" in result.reason
    assert "GPU1 (00000000:19:00.0): memtest could not run: out of memory" in result.reason


def test_sdc_on_one_gpu_is_left_to_the_cluster():
    result = burn_verdicts.sdc(node(1), GENERIC)
    assert result.status == Status.SKIP and result.reason == "one GPU: gpucheck cluster compares it across nodes"
    assert result.measured == {"GPU0": {"checksum": "5f" * 8}}


def test_sdc_names_the_gpu_whose_checksum_differs():
    facts = node(3)
    gpu_result(facts, "GPU1", "sdc")["checksum"] = "e3" * 32
    result = burn_verdicts.sdc(facts, GENERIC)
    assert result.status == Status.FAIL
    assert result.reason.startswith("GPU1 (00000000:19:00.0): checksum e3e3e3e3e3e3e3e3 differs from the 2 other")
    assert "GPU0" not in result.reason and "GPU2" not in result.reason


def test_sdc_compares_only_gpus_given_the_same_inputs():
    facts = node(2)
    shrunk = gpu_result(facts, "GPU1", "sdc")  # the worker shrank the GEMM on a GPU short of memory
    shrunk.update(n=2048, checksum="e3" * 32)
    result = burn_verdicts.sdc(facts, GENERIC)
    assert result.status == Status.SKIP and "FAIL" not in str(result.status)
    assert "not compared: no other h100-sxm5-80gb (n=2048, seed 1234) GPU" in result.reason


@pytest.mark.parametrize("gpus,odd", [(2, {"GPU1": "e3"}), (3, {"GPU1": "e3", "GPU2": "7a"})])
def test_sdc_without_a_majority_fails_every_gpu(gpus, odd):
    facts = node(gpus)
    for label, byte in odd.items():
        gpu_result(facts, label, "sdc")["checksum"] = byte * 32
    result = burn_verdicts.sdc(facts, GENERIC)
    assert result.status == Status.FAIL and "no majority" in result.reason
    assert all(f"GPU{i} (" in result.reason for i in range(gpus))


def test_summary_facts_carry_the_figures_and_the_sdc_key():
    facts = node(2)
    gpu_result(facts, "GPU1", "memtest").update(fault="cudaErrorECCUncorrectable")
    found = summary(facts)
    gpu0 = found["gpus"]["GPU0"]
    assert gpu0["sku"] == "h100-sxm5-80gb" and gpu0["gemm_TFLOPS"]["bf16"] == 777.0
    assert (gpu0["copy_GBps"], gpu0["h2d_GBps"], gpu0["d2h_GBps"]) == (3026.0, 54.1, 53.9)
    assert (gpu0["memtest_bad_words"], gpu0["burn_TFLOPS_median"], gpu0["burn_temperature_C_max"]) == (0, 680.0, 80)
    assert gpu0["sdc_checksum"] == "5f" * 32
    assert gpu0["burn_timeline"] == {"TFLOPS": {"every_s": 5.0, "TFLOPS": [718.0, 605.0]},
                                     "nvml": {"every_s": 0.5, "temperature_C": [41.0, 77.0, 80.0],
                                              "power_W": [310.0, 699.0, 701.0]}}
    assert "memtest_bad_words" not in found["gpus"]["GPU1"]  # a fault gives no figure
    assert found["sdc"] == {"checksum": "5f" * 32, "disagree": [],
                            "key": "h100-sxm5-80gb | sdc n=4096, seed 1234 | cupy 14.2.0 | cuBLAS 120804 | "
                                   "driver 580.159.04"}
    assert summary({"nvml": {}}) is None
