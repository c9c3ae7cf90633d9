"""The burn: throughput windows for the seconds asked, and NVML sampled beside it through the fake NVML library
(lab/scenarios). NVML failing, missing or hanging costs the NVML figures, never the throughput."""

from __future__ import annotations

from gpuwork_helpers import environment, run_program

from gpucheck.gpuwork import sampler
from gpucheck.model import Status
from gpucheck.node.burnin import burn_verdicts
from gpucheck.profiles import load
from lab.fakenvml import scenario_path

H100_BUS = "00000000:00:06.0"  # h100-1gpu.scn (the sampled figures: test_worker_contract.py)
GPU7_BUS = "00000000:DB:00.0"  # dgx-h100.scn's GPU 7, the one throttling.scn holds down


def burn(*args: str, timeout: float = 60, **variables: str) -> dict:
    run = run_program("worker", "--tests", "burn", "--burn-n", "128", "--burn-seconds", "2", *args,
                      env=environment(**variables), timeout=timeout)
    assert run.exit == 0, run.stderr
    result = run.result("burn")
    assert result["error"] is None and result["fault"] is None, result
    return result


def assert_throughput(result: dict) -> None:
    assert 1.5 <= result["seconds"] <= 4
    assert len(result["windows_TFLOPS"]) >= 2 and min(result["windows_TFLOPS"]) > 0
    assert result["tflops"]["min"] <= result["tflops"]["median"] <= result["tflops"]["max"]


def test_hw_slowdown_and_hw_thermal_reasons_are_seen(fake_nvml) -> None:
    result = burn("--bus-id", GPU7_BUS, **fake_nvml("throttling"))
    assert_throughput(result)
    assert result["nvml_error"] is None
    assert result["nvml"]["reasons_seen"] == {"hw_slowdown": result["samples"],
                                              "hw_thermal_slowdown": result["samples"]}
    assert result["nvml"]["sm_clock_MHz"] == {"min": 345, "median": 345, "max": 345}
    assert result["nvml"]["power_W"]["max"] == 75.26 and result["nvml"]["temperature_C"]["max"] == 29
    assert result["nvml"]["slowdown_temperature_C"] == 89
    timeline = result["nvml"]["timeline"]  # every sample, as the burn is short: a point each 0.5 s
    assert timeline["every_s"] == 0.5 and len(timeline["temperature_C"]) == result["samples"]
    assert set(timeline["temperature_C"]) == {29} and set(timeline["power_W"]) == {75.26}


def test_cooling_that_fails_only_under_load_is_seen_by_the_burns_own_samples(nvml_libdir, tmp_path) -> None:
    """gpu.0.under_load.*: idle the GPU is healthy (34 °C, no reason; tests/fakenvml/test_fakenvml_under_load.py);
    once the worker's first GEMM has run, its sampler sees 92 °C and HW thermal slowdown, and gpu.burn fails it."""
    scenario = tmp_path / "cooling-fails-under-load.scn"
    scenario.write_text(f"include = {scenario_path('h100-1gpu')}\n"
                        "gpu.0.under_load.clocks_event_reasons = sw_power_cap|hw_thermal_slowdown\n"
                        "gpu.0.under_load.temperature_C = 92\n")
    result = burn("--bus-id", H100_BUS, LD_LIBRARY_PATH=str(nvml_libdir), FAKENVML_SCENARIO=str(scenario))
    assert_throughput(result)
    assert result["nvml_error"] is None and result["samples"] >= 3
    seen = result["nvml"]["reasons_seen"]  # a sample taken before the first GEMM sees the idle GPU
    assert seen.get("hw_thermal_slowdown", 0) >= result["samples"] - 1 and set(seen) <= {
        "sw_power_cap", "hw_thermal_slowdown", "gpu_idle"}
    assert result["nvml"]["temperature_C"]["max"] == 92 and result["nvml"]["slowdown_temperature_C"] == 89
    work = {"index": 0, "pci_bus_id": H100_BUS, "results": {"burn": result}}
    facts = {"nvml": {"gpus": []}, "gpuwork": {"gpus": {"GPU0": work}, "burn_seconds": 2.0, "xids_during": {},
                                                "xid_error": None}}
    verdict = burn_verdicts.burn(facts, load("generic"))
    assert verdict.status == Status.FAIL, verdict.reason
    assert f"hw_thermal_slowdown in {seen['hw_thermal_slowdown']} of {result['samples']} samples" in verdict.reason
    assert "hottest sample 92 °C > 89 °C (NVML's slowdown threshold)" in verdict.reason


def test_a_long_burns_timeline_is_at_most_120_means_of_equal_runs() -> None:
    series = {"temperature_C": [float(i) for i in range(1, 1201)], "power_W": [100.0] * 1199, "sm_clock_MHz": []}
    line = sampler.timeline(series, 0.5)
    assert line["every_s"] == 5.0  # 1,200 samples twice a second: the mean of each 10
    assert len(line["temperature_C"]) == 120 and line["temperature_C"][:2] == [5.5, 15.5]
    assert line["power_W"][-1] == 100.0 and len(line["power_W"]) == 120  # the last run of 9
    assert line["sm_clock_MHz"] == []


def test_without_nvml_the_burn_still_reports_throughput(tmp_path) -> None:
    result = burn("--bus-id", H100_BUS, LD_LIBRARY_PATH=str(tmp_path))  # no libnvidia-ml.so.1 here
    assert_throughput(result)
    assert result["nvml"] is None and result["samples"] == 0
    assert result["nvml_error"] == "nvmlInit: NVML Shared Library Not Found"


def test_a_bus_id_nvml_does_not_know_is_an_nvml_error(fake_nvml) -> None:
    result = burn("--bus-id", "00000000:00:07.0", **fake_nvml("h100-1gpu"))
    assert_throughput(result)
    assert result["nvml_error"] == "nvmlDeviceGetHandleByPciBusId_v2: Not Found"


def test_a_field_nvml_cannot_read_is_named_and_the_others_are_kept(fake_nvml) -> None:
    """t4.scn sets no SM clock: that call answers NOT_SUPPORTED, temperature and power are still sampled."""
    result = burn("--bus-id", "00000000:00:1E.0", **fake_nvml("t4"))
    assert result["nvml_error"] == "nvmlDeviceGetClockInfo: Not Supported"
    assert result["nvml"]["sm_clock_MHz"] is None
    assert result["nvml"]["temperature_C"]["max"] == 40


def test_a_hung_nvml_call_does_not_keep_the_burn_from_reporting(fake_nvml) -> None:
    """hang.scn: nvmlDeviceGetTemperature on GPU 2 never returns; the sampler thread is left behind."""
    result = burn("--bus-id", "00000000:3A:00.0", timeout=30, **fake_nvml("hang"))
    assert_throughput(result)
    assert result["nvml_error"] == "nvmlDeviceGetTemperature: did not return within the burn (NVML hung)"


def test_without_a_bus_id_nothing_is_sampled_and_the_result_says_so() -> None:
    result = burn()
    assert_throughput(result)
    assert result["nvml"] is None and result["samples"] == 0
    assert result["nvml_error"] == "no --bus-id given: NVML not sampled"


def test_reason_bits_are_named_in_nvml_order() -> None:
    assert sampler.reason_names(0x1) == ["gpu_idle"]
    assert sampler.reason_names(0x48) == ["hw_slowdown", "hw_thermal_slowdown"]
    assert sampler.reason_names(0x100 | 0x80 | 0x4) == ["sw_power_cap", "hw_power_brake_slowdown",
                                                        "display_clock_setting"]
    assert sampler.reason_names(1 << 12) == ["bit12"]
