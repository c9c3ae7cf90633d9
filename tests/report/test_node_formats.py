"""The node report's formats (`gpucheck node --format`): each renders the same results, and the
profile as judged (`thresholds`) travels in the JSON only."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from gpucheck.model import Report, Result, Status
from gpucheck.report.node import FORMATS, render

THRESHOLDS = {"nccl": {"nccl_allreduce_busbw_GBps_min": 123.456}, "gpu": {"count": 8}}


def sample() -> Report:
    results = [Result("gpu.count", Status.PASS, 8, 8, "8 GPUs"),
               Result("gpu.ecc_errors", Status.FAIL, {"GPU0": 0, "GPU1": 2}, 0, "GPU1 2 uncorrected", "drain and RMA",
                      "log"),
               Result("gpu.temperature", Status.WARN, {f"GPU{i}": 81.0 for i in range(8)}, 85.0, "hot", "airflow"),
               Result("ib.rate", Status.SKIP, reason="no InfiniBand in the profile"),
               Result("lib.nccl", Status.ERROR, reason="libnccl not found", evidence="ldd: not found")]
    return Report('node"01', "dgx-h100", results, facts={"driver_version": "535.183.01"}, thresholds=THRESHOLDS,
                  started="2026-01-01T00:00:00+00:00", duration_s=1.25, version="0.1.0")


def test_the_formats_the_command_line_offers() -> None:
    assert FORMATS == ("text", "json", "junit", "prometheus")


@pytest.mark.parametrize("fmt", ["text", "junit", "prometheus"])
def test_thresholds_are_not_rendered_outside_json(fmt: str) -> None:
    text = render(sample(), fmt)
    assert "gpu.ecc_errors" in text  # the results are there
    assert "nccl_allreduce_busbw_GBps_min" not in text and "123.456" not in text and "thresholds" not in text


def test_json_carries_the_thresholds_as_judged() -> None:
    doc = json.loads(render(sample(), "json"))
    assert doc["thresholds"] == THRESHOLDS and doc["exit_code"] == 2
    assert [r["check"] for r in doc["results"]] == [r.check for r in sample().results]


def test_text_table_what_to_do_and_exit_code() -> None:
    text = render(sample(), "text")
    assert text.startswith('gpucheck node on node"01 — profile dgx-h100\n')
    assert "WARN    gpu.temperature  all 8 GPUs: 81" in text
    assert "What to do:\n  gpu.ecc_errors: drain and RMA\n  gpu.temperature: airflow\n" in text
    assert text.endswith("1 pass, 1 warn, 1 fail, 1 skip, 1 error in 1.25 s — exit code 2\n")


def test_text_table_never_cuts_a_value_it_shows_a_long_one_whole_under_its_row() -> None:
    """A measured or expected value wider than its column is not cut with "…": its cell says `below` and the
    value is on its own line under the row (as the per-GPU figures are)."""
    driver = {"driver_version": "580.159.04", "cuda_driver_version": "13.0", "path": "/usr/lib/x86_64-linux-gnu"}
    report = Report("n1", "generic", [Result("gpu.driver", Status.PASS, driver, {"driver_version_min": "550.54.14"},
                                             "driver 580.159.04"),
                                      Result("gpu.count", Status.PASS, 8, 8, "8 GPUs")])
    text = render(report, "text")
    assert "…" not in text
    row = next(line for line in text.splitlines() if line.startswith("PASS    gpu.driver"))
    assert row.split()[2:4] == ["below", "driver"]  # the measured cell; the expected fits its column
    assert ("\n    measured: driver version 580.159.04, cuda driver version 13.0, path /usr/lib/x86_64-linux-gnu\n"
            "PASS    gpu.count") in text


def test_junit_counts_warn_as_failure_and_error_apart() -> None:
    suite = ET.fromstring(render(sample(), "junit").split("\n", 1)[1])
    counts = [suite.get(key) for key in ("tests", "failures", "errors", "skipped")]
    assert counts == ["5", "2", "1", "1"]
    ecc = suite.find("testcase[@name='gpu.ecc_errors']/failure")
    assert ecc.get("message") == "GPU1 2 uncorrected (measured GPU0 0, GPU1 2, expected 0)"
    assert ecc.text == "drain and RMA\nlog"
    assert suite.find("testcase[@name='lib.nccl']/error").text == "ldd: not found"
    assert suite.find("testcase[@name='gpu.count']/system-out").text == "8 GPUs"


def test_prometheus_one_gauge_per_status_with_escaped_labels() -> None:
    lines = render(sample(), "prometheus").splitlines()
    ecc = [line for line in lines if 'check="gpu.ecc_errors"' in line]
    assert len(ecc) == len(Status) and sum(line.endswith(" 1") for line in ecc) == 1
    assert 'gpucheck_check_status{host="node\\"01",profile="dgx-h100",check="gpu.ecc_errors",status="fail"} 1' in ecc
    assert 'gpucheck_exit_code{host="node\\"01",profile="dgx-h100"} 2' in lines


def test_junit_is_well_formed_whatever_the_kernel_log_held() -> None:
    """dmesg's control bytes in gpu.xid's evidence made `node --format junit` write a junit.xml no parser reads."""
    dirty = "[  5.1] NVRM: Xid 79\x00\x1b[31m\x07 fallen\x0c off\x1f the bus\ud800"
    report = Report("n1\x01", "generic", [Result("gpu.xid", Status.FAIL, {"GPU0": [79]}, "none", f"Xid 79 {dirty}",
                                                  "reboot", dirty)], started="2026-01-01T00:00:00+00:00")
    text = render(report, "junit")
    suite = ET.fromstring(text.split("\n", 1)[1])  # raised ParseError ("not well-formed") before
    failure = suite.find("testcase/failure")
    assert failure.text == "reboot\n[  5.1] NVRM: Xid 79[31m fallen off the bus"
    assert suite.get("name") == "gpucheck.node.n1"
