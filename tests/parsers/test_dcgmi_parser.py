"""dcgmi diag: the values SOURCES.md lists for the text table and the JSON, then failures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpucheck.parsers import ParseError, parse

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real"
JSON = "dcgm/dcgm-diag-json-nvvs-3.1.0-8gpu-pass-with-warning-prefix-and-nulls.json"
DEPLOYMENT_3_1 = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks",
                  "Persistence Mode", "Environmental Variables", "Page Retirement/Row Remap",
                  "Graphics Processes", "Inforom"]


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_text_table_p4de_all_pass_with_empty_stress_section() -> None:
    r = parse("dcgmi", real("dcgm/dcgmi-diag-r2-p4de-a100-8gpu-all-pass-3.3.3.txt"))
    assert (r["format"], r["version"], r["driver_version"], r["gpu_count"]) == ("text", "3.3.3", "535.104.12", 8)
    assert r["tests"] == dict.fromkeys(
        ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
         "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom", "PCIe",
         "GPU Memory"], "pass")
    assert r["failed"] is False and r["details"] == {}


def test_json_after_warning_line_with_null_entries() -> None:
    r = parse("dcgmi", real(JSON))
    assert (r["format"], r["version"], r["gpu_count"]) == ("json", "3.1.0", 8)
    assert list(r["tests"]) == [*DEPLOYMENT_3_1, "software"]  # nine deployment tests, nulls skipped
    assert set(r["tests"].values()) == {"pass"} and r["failed"] is False


def test_json_with_one_gpu_failing() -> None:
    text = re.sub(r'("gpu_ids" : 3,\s*"status" : )"PASS"', r'\1"FAIL"', real(JSON))
    r = parse("dcgmi", text)
    assert r["tests"]["software"] == "fail" and r["failed"] is True
    assert r["tests"]["Denylist"] == "pass"


def test_truncated_json_is_a_parse_error() -> None:
    text = real(JSON)
    with pytest.raises(ParseError, match="invalid JSON"):
        parse("dcgmi", text[: len(text) // 2])


FAILING_3X = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
| Driver Version Detected   | 550.54.15                                      |
| GPU Device IDs Detected   | 20b5,20b5,20b5,20b5                            |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| Persistence Mode          | Warn                                           |
|   Warning                 | GPU 0 Persistence mode for GPU 0 is disabled.  |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Fail - GPU: 2                                  |
| Warning                   | GPU 2 PCIe link width 8x, expected 16x         |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""


def test_text_table_with_a_failure_and_a_warning() -> None:
    r = parse("dcgmi", FAILING_3X.replace("\n", "\r\n"))
    assert r["tests"] == {"Denylist": "pass", "Persistence Mode": "warn", "PCIe": "fail", "GPU Memory": "pass"}
    assert r["failed"] is True and r["gpu_count"] == 4
    assert r["details"]["PCIe"] == ["Warning: GPU 2 PCIe link width 8x, expected 16x"]
    assert r["details"]["Persistence Mode"] == ["Warning: GPU 0 Persistence mode for GPU 0 is disabled."]


PER_GPU_4X = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| GPU Device IDs Detected   | 26b9, 26b9                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
+-----  Hardware  ----------+------------------------------------------------+
| memory                    | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Fail                                     |
+-----  Stress  ------------+------------------------------------------------+
| targeted_stress           | Skip                                           |
+---------------------------+------------------------------------------------+
"""


def test_per_gpu_continuation_rows_take_the_worst_result() -> None:
    r = parse("dcgmi", PER_GPU_4X)
    assert r["tests"] == {"software": "pass", "memory": "fail", "targeted_stress": "skip"}
    assert (r["failed"], r["version"], r["gpu_count"]) == (True, "4.2.3", 2)


def test_host_engine_not_running_is_a_parse_error_with_the_reason() -> None:
    with pytest.raises(ParseError, match="unable to establish a connection"):
        parse("dcgmi", "Error: unable to establish a connection to the specified host: localhost\n"
                       "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
