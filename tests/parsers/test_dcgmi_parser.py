"""dcgmi diag: the values SOURCES.md lists for the text table and the JSON, then failures."""

from __future__ import annotations

import re

import pytest

from gpucheck.parsers import ParseError, parse
from support import REAL

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


# ---------------------------------------------------------------- tables as dcgmi draws them
# dcgmi/Diag.cpp: each row is the stencil "| <name, 25> | <info, 46> |"; a longer value is cut to 46 with
# "..." at the end; a Warning/Info message is cut every 45 characters, mid-word, one row per piece, the
# name only on the first (DisplayVerboseInfo). DCGM 2/3 print "Pass - GPUs: 0, 1" then "Fail - GPU: 3"
# rows for a mixed result; DCGM 4 prints the test's result, then "GPU0: Pass" per GPU, each GPU's
# "Warning: GPU0" message right after its own row.

def row(name: str, info: str) -> str:
    if len(info) > 46:
        info = info[:43] + "..."
    return f"| {name:<25} | {info:<46} |"


def message(name: str, text: str) -> list[str]:
    return [row(name if i == 0 else "", text[i:i + 45]) for i in range(0, len(text), 45)]


THERMAL = ("GPU 3 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 3 "
           "Verify that the cooling on this machine is functional, including external, thermal material "
           "interface, fans, and any other components.")
SLOW = "GPU 0 SM stress throughput 1733.9 is low: it failed to reach 90% of the target 2016.0"  # piece 2: "failed"
HEADER = ["Successfully ran diagnostic for group.",
          "+---------------------------+------------------------------------------------+",
          "| Diagnostic                | Result                                         |",
          "+===========================+================================================+"]
FOOTER = ["+---------------------------+------------------------------------------------+"]
MIXED_3X = "\n".join([
    *HEADER,
    "|-----  Metadata  ----------+------------------------------------------------|",
    row("DCGM Version", "3.3.5"),
    row("GPU Device IDs Detected", ", ".join(["2330"] * 16)),  # 16 GPUs: dcgmi cuts the list
    "|-----  Deployment  --------+------------------------------------------------|",
    row("Denylist", "Pass"),
    "+-----  Hardware  ----------+------------------------------------------------+",
    row("Diagnostic", "Pass - GPUs: 0, 1, 2"),
    row("", "Fail - GPU: 3"),
    *message("Warning", THERMAL),
    "+-----  Stress  ------------+------------------------------------------------+",
    row("SM Stress", "Warn - All"),
    *message("Warning", SLOW),
    row("Targeted Power", "Pass - GPUs: " + ", ".join(map(str, range(16)))),
    *FOOTER]) + "\n"


def test_a_message_cut_into_45_character_rows_is_one_detail() -> None:
    r = parse("dcgmi", MIXED_3X)
    assert r["details"]["Diagnostic"] == [f"Warning: {THERMAL}"]
    assert r["details"]["SM Stress"] == [f"Warning: {SLOW}"]


def test_pass_and_fail_gpu_rows_take_the_worst_and_a_message_piece_is_not_a_result() -> None:
    assert "|                           | failed to reach" in MIXED_3X
    r = parse("dcgmi", MIXED_3X)
    # "failed to reach 90%" starts a row of SM Stress's message: the test stays warn.
    assert r["tests"] == {"Denylist": "pass", "Diagnostic": "fail", "SM Stress": "warn", "Targeted Power": "pass"}
    assert r["failed"] is True and r["version"] == "3.3.5"
    assert r["gpu_count"] is None  # "2330, 2330, ... 2..." is cut: the count is not known


MIXED_4X = "\n".join([
    *HEADER,
    "|-----  Metadata  ----------+------------------------------------------------|",
    row("DCGM Version", "4.2.3"),
    "|-----  Deployment  --------+------------------------------------------------|",
    row("software", "Pass"),
    row("", "GPU0: Pass"),
    row("", "GPU1: Pass"),
    "+-----  Hardware  ----------+------------------------------------------------+",
    row("memory", "Fail"),
    row("", "GPU0: Fail"),
    *message("Warning: GPU0", "Error using CUDA API cudaMalloc: out of memory. Check DCGM and system logs."),
    row("", "GPU1: Pass"),
    *FOOTER]) + "\n"


def test_dcgm4_per_gpu_rows_with_a_message_between_them() -> None:
    r = parse("dcgmi", MIXED_4X)
    assert r["tests"] == {"software": "pass", "memory": "fail"}
    assert r["details"] == {"memory": ["Warning: GPU0: Error using CUDA API cudaMalloc: out of memory. "
                                       "Check DCGM and system logs."]}


def test_rows_without_header_or_borders_are_read() -> None:
    fragment = "\n".join(MIXED_3X.splitlines()[10:15]) + "\n"  # Diagnostic, its GPU rows and message
    assert "Result" not in fragment and "+---" not in fragment
    r = parse("dcgmi", fragment)
    assert r["tests"] == {"Diagnostic": "fail"} and r["details"]["Diagnostic"][0].startswith("Warning: GPU 3")
    unbordered = "\n".join(line.strip("|").strip() for line in fragment.splitlines())
    r = parse("dcgmi", unbordered)
    assert r["tests"] == {"Diagnostic": "fail"}
    assert r["details"]["Diagnostic"][0].startswith("Warning: GPU 3 Thermal violations totaling 13.3 secon")


def test_rows_with_no_result_anywhere_are_not_dcgmi() -> None:
    with pytest.raises(ParseError, match="no dcgmi diag result table"):
        parse("dcgmi", "| name | value |\n| colour | blue |\n")


# dcgmi/Diag.cpp (RunDiagOnce): after the Deployment section, Integration and Hardware are drawn only for GPUs that
# ran a test and Stress only when one did: a deployment error ends the table right there, its Error rows
# (HelperDisplayDeploymentResult's DisplayVerboseInfo) the only word on what went wrong.
IN_USE = "GPU 0 is being used by process 4242 (python3): stop it or leave the GPU out of the diagnostic."
ENDED_AT_DEPLOYMENT = [*HEADER, "|-----  Metadata  ----------+------------------------------------------------|",
                       row("DCGM Version", "3.3.5"), row("GPU Device IDs Detected", "2330,2330"),
                       "|-----  Deployment  --------+------------------------------------------------|"]


def test_a_table_that_ends_at_a_deployment_error_fails_with_that_error() -> None:
    r = parse("dcgmi", "\n".join([*ENDED_AT_DEPLOYMENT, *message("Error", IN_USE), *FOOTER]) + "\n")
    assert r["tests"] == {"Deployment": "fail"} and r["failed"] is True
    assert r["details"] == {"Deployment": [f"Error: {IN_USE}"]}
    assert (r["version"], r["gpu_count"]) == ("3.3.5", 2)


def test_a_table_that_ends_before_any_test_says_so() -> None:
    with pytest.raises(ParseError, match="the diagnostic's table holds no result"):
        parse("dcgmi", "\n".join([*ENDED_AT_DEPLOYMENT, *FOOTER]) + "\n")
