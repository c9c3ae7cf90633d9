"""Per-GPU figures (docs/burnin.md, "What a result carries") in every node format: one line per GPU in the
text and in JUnit's system-out, one gpucheck_gpu_figure sample per numeric figure in Prometheus, the JSON as
measured. Figures are the H100 SXM5's measured ones (tests/fixtures/measured/h100-sxm-80gb-driver580)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from gpucheck.model import Report, Result, Status
from gpucheck.report import gpu_figures
from gpucheck.report.node import render

GEMM = {"GPU0": {"bf16_TFLOPS": 777.1, "fp16_TFLOPS": 740.2}, "GPU1": {"bf16_TFLOPS": 591.0, "fp16_TFLOPS": 750.0}}
GEMM_EXPECTED = {"bf16_TFLOPS": ">= 593 (0.6 x 989)", "fp16_TFLOPS": ">= 593 (0.6 x 989)"}
HOST = {f"GPU{i}": {"h2d_GBps": 54.1, "d2h_GBps": 53.9} for i in (2, 10, 0)}  # out of order on purpose
BURN = {"GPU0": {"TFLOPS_min": 605.0, "TFLOPS_median": 680.0, "TFLOPS_max": 718.0, "sm_clock_MHz_min": 1095,
                 "temperature_C_max": 80, "power_W_max": 701.0}}
SDC = {"GPU0": {"checksum": "3fa2c0d1e5b6a7f8"}, "GPU1": {"checksum": "3fa2c0d1e5b6a7f8"}}
MEMTEST = {"GPU0": {"bad_words": 3, "coverage": 0.9123, "bytes_tested": 63 * 1024**3}}


def report() -> Report:
    results = [Result("gpu.count", Status.PASS, 2, 2, "2 GPUs"),
               Result("gpu.gemm", Status.FAIL, GEMM, GEMM_EXPECTED, "GPU1 bf16 591 TFLOP/s < 593",
                      "drain and run dcgmi diag -r 3"),
               Result("gpu.host_bandwidth", Status.PASS, HOST, {"GPU0": {"h2d_GBps": ">= 37.8 (0.6 x 63)"}},
                      "every GPU's host copies fast enough"),
               Result("gpu.burn", Status.PASS, BURN, None, "no slowdown"),
               Result("gpu.sdc", Status.PASS, SDC, None, "every GPU computes the same bits"),
               Result("gpu.memtest", Status.ERROR, MEMTEST, None, "worker killed", evidence="timeout"),
               Result("gpu.temperature", Status.WARN, {"GPU0": 81.0, "GPU1": 84.0}, 85.0, "hot", "airflow")]
    return Report('node"01', "dgx-h100", results, started="2026-01-01T00:00:00+00:00", duration_s=2.0,
                  version="0.1.0")


@pytest.mark.parametrize(("name", "value", "text"), [
    ("bf16_TFLOPS", 777.1, "bf16 777.1 TFLOP/s"),
    ("copy_GBps", 3026.4, "copy 3026 GB/s"),
    ("stream_add_GBps", 2901.0, "stream add 2901 GB/s"),
    ("to_GPU3_GBps", 250.0, "to GPU3 250 GB/s"),
    ("TFLOPS_median", 680.0, "median 680 TFLOP/s"),
    ("temperature_C_max", 80, "temperature max 80 °C"),
    ("sm_clock_MHz_min", 1095, "sm clock min 1095 MHz"),
    ("power_W_max", 701.0, "power max 701 W"),
    ("bytes_tested", 63 * 1024**3, "tested 63 GiB"),
    ("coverage", 0.91234, "coverage 0.9123"),
    ("bad_words", 0, "bad words 0"),
    ("checksum", "3fa2c0d1e5b6a7f8", "checksum 3fa2c0d1e5b6a7f8"),
])
def test_each_figure_reads_its_unit_from_its_name(name: str, value: object, text: str) -> None:
    assert gpu_figures.figure_text(name, value) == text


@pytest.mark.parametrize("measured", [
    {"GPU0": 81.0, "GPU1": 84.0},  # one value per GPU, no figures
    {"GPU0": {"ok": True}},  # a flag is no figure
    {"GPU0": {"bf16_TFLOPS": 1.0}, "total": {"bf16_TFLOPS": 2.0}},  # a key that is no GPU
    {"GPU0": {"bf16_TFLOPS": None}},
    {"GPU0": {}},
    {},
    [1, 2],
    None,
])
def test_other_shapes_are_not_per_gpu_figures(measured: object) -> None:
    assert gpu_figures.per_gpu(measured) is None


def test_text_one_line_per_gpu_under_the_row_with_the_expected_once() -> None:
    lines = render(report(), "text").splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("FAIL    gpu.gemm"))
    assert "2 GPU(s), below" in lines[row] and "GPU1 bf16 591 TFLOP/s < 593" in lines[row]
    assert lines[row + 1:row + 4] == ["    expected: bf16 >= 593 (0.6 x 989); fp16 >= 593 (0.6 x 989)",
                                      "    GPU0: bf16 777.1 TFLOP/s, fp16 740.2 TFLOP/s",
                                      "    GPU1: bf16 591 TFLOP/s, fp16 750 TFLOP/s"]
    assert lines[row + 4].startswith("PASS    gpu.host_bandwidth")


def test_text_gpus_in_index_order_and_an_expected_per_gpu_on_its_line() -> None:
    text = render(report(), "text")
    assert ("    GPU0: h2d 54.1 GB/s [>= 37.8 (0.6 x 63)], d2h 53.9 GB/s\n"
            "    GPU2: h2d 54.1 GB/s, d2h 53.9 GB/s\n"
            "    GPU10: h2d 54.1 GB/s, d2h 53.9 GB/s\n") in text
    assert ("    GPU0: min 605 TFLOP/s, median 680 TFLOP/s, max 718 TFLOP/s, sm clock min 1095 MHz, "
            "temperature max 80 °C, power max 701 W\n") in text
    assert "    GPU0: bad words 3, coverage 0.9123, tested 63 GiB\n" in text
    assert "    GPU1: checksum 3fa2c0d1e5b6a7f8\n" in text


def test_text_rows_of_other_checks_keep_their_shape() -> None:
    lines = render(report(), "text").splitlines()
    temperature = next(line for line in lines if "gpu.temperature" in line and line.startswith("WARN"))
    assert "GPU0 81 °C, GPU1 84 °C" in temperature and "85" in temperature
    below = lines[lines.index(temperature) + 1]
    assert not below.startswith("    "), "a check without per-GPU figures has no lines under its row"


def test_junit_figures_in_system_out_whatever_the_status() -> None:
    suite = ET.fromstring(render(report(), "junit").split("\n", 1)[1])
    gemm = suite.find("testcase[@name='gpu.gemm']")
    assert gemm.find("failure").get("type") == "fail"
    assert gemm.find("system-out").text.splitlines() == [
        "expected: bf16 >= 593 (0.6 x 989); fp16 >= 593 (0.6 x 989)",
        "GPU0: bf16 777.1 TFLOP/s, fp16 740.2 TFLOP/s", "GPU1: bf16 591 TFLOP/s, fp16 750 TFLOP/s"]
    burn = suite.find("testcase[@name='gpu.burn']/system-out").text.splitlines()
    assert burn[0] == "no slowdown" and burn[1].startswith("GPU0: min 605 TFLOP/s")
    memtest = suite.find("testcase[@name='gpu.memtest']")
    assert memtest.find("error").text == "timeout"
    assert memtest.find("system-out").text == "GPU0: bad words 3, coverage 0.9123, tested 63 GiB"
    assert suite.find("testcase[@name='gpu.temperature']/system-out") is None
    assert suite.find("testcase[@name='gpu.count']/system-out").text == "2 GPUs"


def test_prometheus_one_sample_per_numeric_figure() -> None:
    lines = render(report(), "prometheus").splitlines()
    samples = [line for line in lines if line.startswith("gpucheck_gpu_figure{")]
    assert 'gpucheck_gpu_figure{host="node\\"01",check="gpu.gemm",gpu="GPU0",figure="bf16_TFLOPS"} 777.1' in samples
    assert 'gpucheck_gpu_figure{host="node\\"01",check="gpu.burn",gpu="GPU0",figure="temperature_C_max"} 80' in samples
    assert 'gpucheck_gpu_figure{host="node\\"01",check="gpu.memtest",gpu="GPU0",figure="bad_words"} 3' in samples
    # 4 gemm + 6 host + 6 burn + 3 memtest; the checksum is a string and the temperatures no figures
    assert len(samples) == 19
    assert not any('check="gpu.sdc"' in s or 'check="gpu.temperature"' in s for s in samples)
    assert lines.count("# TYPE gpucheck_gpu_figure gauge") == 1
    assert lines.index("# TYPE gpucheck_gpu_figure gauge") < lines.index(samples[0])


def test_prometheus_skips_a_non_finite_figure_and_has_no_family_without_figures() -> None:
    nan = Report("n", "p", [Result("gpu.gemm", Status.ERROR, {"GPU0": {"bf16_TFLOPS": float("nan")}})])
    assert "gpucheck_gpu_figure" not in render(nan, "prometheus")
    plain = Report("n", "p", [Result("gpu.count", Status.PASS, 8, 8, "8 GPUs")])
    assert "gpucheck_gpu_figure" not in render(plain, "prometheus")


def test_json_keeps_the_figures_as_measured() -> None:
    doc = json.loads(render(report(), "json"))
    by_check = {r["check"]: r for r in doc["results"]}
    assert by_check["gpu.gemm"]["measured"] == GEMM and by_check["gpu.gemm"]["expected"] == GEMM_EXPECTED
    assert by_check["gpu.host_bandwidth"]["measured"] == HOST
    assert by_check["gpu.sdc"]["measured"] == SDC and by_check["gpu.memtest"]["measured"] == MEMTEST
    rebuilt = Report(doc["host"], doc["profile"], [Result(r["check"], Status(r["status"]), r["measured"], r["expected"],
                                                          r["reason"], r["remediation"], r["evidence"])
                                                   for r in doc["results"]], started=doc["started"],
                     duration_s=doc["duration_s"], version=doc["gpucheck_version"])
    assert render(rebuilt, "text") == render(report(), "text")
