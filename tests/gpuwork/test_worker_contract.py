"""The worker's output is docs/burnin.md's contract: every event line, in order, every figure by its name."""

from __future__ import annotations

import os
import re

import pytest
from gpuwork_helpers import CONTRACT_FIGURES, QUICK, RESULT_KEYS, environment, run_program

ALL_TESTS = ["sdc", "gemm", "memory_bandwidth", "host_bandwidth", "memtest", "burn"]


@pytest.fixture(scope="module")
def full_run(fake_nvml):
    env = environment(**fake_nvml("h100-1gpu-burn"))
    cpu = min(os.sched_getaffinity(0))
    return run_program("worker", "--tests", ",".join(ALL_TESTS), *QUICK, "--burn-seconds", "2",
                       "--bus-id", "00000000:00:06.0", "--cpus", str(cpu), env=env)


def test_events_come_in_the_contract_order(full_run) -> None:
    assert full_run.exit == 0, full_run.stderr
    expected = ["begin"] + ["start", "result"] * len(ALL_TESTS) + ["end"]
    assert full_run.kinds() == expected
    assert [e["test"] for e in full_run.events if e["event"] in ("start", "result")] == [
        t for t in ALL_TESTS for _ in range(2)]
    assert full_run.events[-1] == {"event": "end"}


def test_begin_describes_cupy_cuda_and_the_device(full_run) -> None:
    begin = full_run.only("begin")
    assert set(begin) == {"event", "cupy", "cuda_runtime", "cuda_driver", "cublas", "device"}
    assert begin["cupy"] == "14.2.0+fake"
    assert (begin["cuda_runtime"], begin["cuda_driver"], begin["cublas"]) == (12090, 13000, 120804)
    assert begin["device"] == {"name": "NVIDIA H100 80GB HBM3", "total_bytes": 128 * 2**20,
                               "compute_capability": "9.0"}


@pytest.mark.parametrize("test", ALL_TESTS)
def test_each_result_carries_its_contract_figures_and_no_error(full_run, test: str) -> None:
    result = full_run.result(test)
    assert set(result) - {"fallback_reason", "stopped"} == RESULT_KEYS | CONTRACT_FIGURES[test]
    assert (result["error"], result["fault"]) == (None, None)
    assert result["seconds"] >= 0


def test_sdc_figures(full_run) -> None:
    sdc = full_run.result("sdc")
    assert re.fullmatch(r"[0-9a-f]{64}", sdc["checksum"])
    assert (sdc["dtype"], sdc["n"], sdc["seed"]) == ("fp16", 128, 20260601)


def test_gemm_measures_every_dtype(full_run) -> None:
    gemm = full_run.result("gemm")
    dtypes = ["bf16", "fp16", "tf32", "fp32", "fp64"]
    assert sorted(gemm["tflops"]) == sorted(dtypes) and all(v > 0 for v in gemm["tflops"].values())
    assert gemm["n"] == dict.fromkeys(dtypes, 128)
    assert gemm["errors"] == {}


def test_bandwidth_figures(full_run) -> None:
    memory, host = full_run.result("memory_bandwidth"), full_run.result("host_bandwidth")
    assert memory["bytes"] == 2 * 2**20 and memory["copy_GBps"] > 0 and memory["stream_add_GBps"] > 0
    assert host["bytes"] == 2 * 2**20 and host["h2d_GBps"] > 0 and host["d2h_GBps"] > 0
    assert host["pinned"] is True
    assert host["cpus"] == str(min(os.sched_getaffinity(0)))  # the worker bound itself to the CPU asked


def test_memtest_figures_on_a_clean_gpu(full_run) -> None:
    memtest = full_run.result("memtest")
    assert memtest["free_bytes"] == 64 * 2**20 and memtest["total_bytes"] == 128 * 2**20  # the fake's default
    assert memtest["bytes_tested"] >= 0.85 * memtest["free_bytes"]
    assert memtest["coverage"] == pytest.approx(memtest["bytes_tested"] / memtest["total_bytes"], abs=1e-4)
    assert memtest["patterns"] == ["alternating", "zeros_ones", "walking_ones", "walking_zeros", "address",
                                   "moving_inversion"]
    assert (memtest["bad_words"], memtest["bad_offsets"]) == (0, [])
    assert memtest["bad_by_pattern"] == dict.fromkeys(memtest["patterns"], 0)
    assert memtest["chunk_bytes"] >= 2**16


def test_burn_figures_with_nvml_sampled(full_run) -> None:
    burn = full_run.result("burn")
    assert (burn["dtype"], burn["n"], burn["fallback_reason"]) == ("bf16", 128, None)
    assert 1.5 <= burn["seconds"] <= 4
    windows = burn["windows_TFLOPS"]
    assert len(windows) >= 2 and all(w > 0 for w in windows)
    assert burn["tflops"]["min"] == min(windows) and burn["tflops"]["max"] == max(windows)
    line = burn["windows_timeline"]  # a short burn: every window, each its share of the burn
    assert line["TFLOPS"] == [round(w, 2) for w in windows]
    assert line["every_s"] == pytest.approx(burn["seconds"] / len(windows), abs=0.001)
    assert burn["sample_interval_s"] == 0.5 and 3 <= burn["samples"] <= 6  # twice a second for ~2 s
    assert burn["nvml_error"] is None
    # h100-1gpu-burn.scn: the measured H100 under load (SW power cap, 1380 MHz, 58 C, 698.96 W, slowdown 89 C)
    assert burn["nvml"] == {"sm_clock_MHz": {"min": 1380, "median": 1380, "max": 1380},
                            "temperature_C": {"min": 58, "median": 58, "max": 58},
                            "power_W": {"min": 698.96, "median": 698.96, "max": 698.96},
                            "reasons_seen": {"sw_power_cap": burn["samples"]}, "slowdown_temperature_C": 89,
                            "timeline": {"every_s": 0.5, "sm_clock_MHz": [1380.0] * burn["samples"],
                                         "temperature_C": [58.0] * burn["samples"],
                                         "power_W": [698.96] * burn["samples"]}}


def test_progress_goes_to_stderr_only(full_run) -> None:
    assert "gpuwork: burn: done" in full_run.stderr
    assert "Traceback" not in full_run.stderr


def test_tests_run_in_the_order_given_and_only_those() -> None:
    run = run_program("worker", "--tests", "memory_bandwidth,sdc", *QUICK)
    assert run.exit == 0, run.stderr
    assert [e["test"] for e in run.events if e["event"] == "result"] == ["memory_bandwidth", "sdc"]
