"""gpu.dcgm: `dcgmi diag -r N` replayed by a fake dcgmi on PATH, from recorded outputs and exit codes.

The outputs are the real ones in tests/fixtures/real/dcgm (SOURCES.md), a failure made from them by putting
DCGM's own message text (dcgmlib/dcgm_errors.h) where a result is, and DCGM 4's JSON layout as DCGM's own tests
check it (testing/python3/dcgm_diag_schema.json, test_dcgm_diag.py). Exit codes are DCGM's return codes as a
process status: -30 DCGM_ST_NVVS_ERROR = 226, -51 DCGM_ST_NVVS_ISOLATE_ERROR = 205, -21 no host engine = 235.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from gpucheck.model import Status
from gpucheck.node import CollectError, Context
from gpucheck.node.dcgm import collect, diag
from gpucheck.profiles import Profile
from support import REAL, by_check, report_of, run_gpucheck

TABLE_333_FILE = REAL / "dcgm" / "dcgmi-diag-r2-p4de-a100-8gpu-all-pass-3.3.3.txt"
TABLE_333 = TABLE_333_FILE.read_text()
JSON_31 = (REAL / "dcgm" / "dcgm-diag-json-nvvs-3.1.0-8gpu-pass-with-warning-prefix-and-nulls.json").read_text()
NVVS_ERROR, ISOLATE, NO_CONNECTION = 226, 205, 235

# GPU 3's software result failed, with DCGM_FR_FAULTY_MEMORY_MSG as its warning (DCGM 3's JSON)
JSON_31_GPU3_FAILS = re.sub(
    r'("gpu_ids" : 3,\s*"status" : )"PASS"',
    r'\1"FAIL", "warnings" : [{"warning" : "Found 12 faulty memory elements on GPU 3", "error_id" : 82}]',
    JSON_31)
# A warning row as dcgmi 3.x draws it (dcgmi/Diag.cpp: "| <name, 25> | <info, 46> |"), DCGM_FR_PERSISTENCE_MODE_MSG
TABLE_333_WARNS = TABLE_333.replace(
    "| Persistence Mode          | Pass                                           |",
    "| Persistence Mode          | Warn                                           |\n"
    "|   Warning                 | Persistence mode for GPU 0 is disabled.        |")
NO_HOST_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"  # dcgmi/Command.cpp
                  "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
# TCLAP's answer to an unknown switch, as a dcgmi without -j gives it
JSON_REFUSED = "PARSE ERROR:  \n             Couldn't find match for argument\n\nBrief USAGE: \n   dcgmi diag ...\n"


def dcgm4_json(results: dict[str, list[tuple[int, str, str | None]]], version: str = "4.2.3") -> str:
    """DCGM 4's `dcgmi diag -j` (dcgmi/Diag.cpp HelperJsonBuildOutput): per test, one result per GPU entity with
    its own warnings, then a test_summary that repeats every warning of the test."""
    tests = []
    for name, per_gpu in results.items():
        entries = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": status,
                    **({"warnings": [{"warning": text, "error_id": 36, "error_category": 9, "error_severity": 1}]}
                       if text else {})} for gpu, status, text in per_gpu]
        statuses = {status for _, status, _ in per_gpu}
        summary = next(s for s in ("Fail", "Warn", "Pass", "Skip") if s in statuses)
        warnings = [w for entry in entries for w in entry.get("warnings", [])]
        tests.append({"name": name, "results": entries,
                      "test_summary": {"status": summary, **({"warnings": warnings} if warnings else {})}})
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]},
                       "entity_groups": [], "metadata": {"DCGM Version": version}}, indent=3) + "\n"


HOT = "Temperature 95 of GPU 1 exceeded user-specified maximum allowed temperature 87"  # DCGM_FR_TEMP_VIOLATION_MSG
DCGM4_GPU1_HOT = dcgm4_json({"software": [(0, "Pass", None), (1, "Pass", None)],
                             "targeted_stress": [(0, "Pass", None), (1, "Fail", HOT)]})


def fake_dcgmi(directory: Path, script: str) -> str:
    """A dcgmi of our own, the shell script given, for what a replayed output cannot do (arguments, sleeps):
    the PATH that finds it first."""
    directory.mkdir(exist_ok=True)
    path = directory / "dcgmi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


def profile(**burnin: object) -> Profile:
    return Profile("test", None, {"burnin": burnin} if burnin else {})


def judge(monkeypatch, path: str, prof: Profile, bench_timeout: float = 60, timeout: float = 10):
    monkeypatch.setenv("PATH", path)
    ctx = Context(timeout=timeout, bench_timeout=bench_timeout, profile=prof)
    return diag({"dcgm": collect(ctx)}, prof)


# ------------------------------------------------------------------ the module against replayed outputs

def test_real_table_all_pass_lists_every_test(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", TABLE_333)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.PASS, result.reason
    assert result.measured == {"level": 2, "pass": 11, "warn": 0, "fail": 0, "skip": 0}
    assert "11 tests passed" in result.reason
    for test in ("Denylist", "Permissions and OS Blocks", "Page Retirement/Row Remap", "PCIe", "GPU Memory"):
        assert f"  {test}: pass" in result.evidence
    assert result.evidence.startswith("dcgmi diag -r 2 -j (DCGM 3.3.3, 8 GPUs, exit 0")


def test_real_json_after_a_warning_line_passes(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", JSON_31)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.PASS and result.measured["pass"] == 10
    assert "  Environmental Variables: pass" in result.evidence and "  software: pass" in result.evidence


def test_a_failed_test_fails_naming_test_gpu_and_message(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", JSON_31_GPU3_FAILS, exit_code=NVVS_ERROR)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.FAIL
    assert result.reason == "DCGM level 2: software failed on GPU3: Found 12 faulty memory elements on GPU 3"
    assert result.measured == {"level": 2, "pass": 9, "warn": 0, "fail": 1, "skip": 0}
    assert "  software: fail\n    Found 12 faulty memory elements on GPU 3" in result.evidence
    assert "exit 226 (DCGM_ST_NVVS_ERROR)" in result.evidence


def test_dcgm4_json_names_the_gpu_once_and_says_isolate(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", DCGM4_GPU1_HOT, exit_code=ISOLATE)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.FAIL
    assert result.reason == f"DCGM level 2: targeted_stress failed on GPU1: {HOT}"  # the summary's copy dropped
    assert "isolate the GPU" in result.remediation
    assert "  software: pass" in result.evidence and "  targeted_stress: fail" in result.evidence


def test_a_warning_is_warn(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", TABLE_333_WARNS)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.WARN
    assert result.reason == ("DCGM level 2: Persistence Mode warned on GPU0: Warning: Persistence mode for GPU 0 "
                             "is disabled.")


def test_an_error_exit_with_every_test_passed_is_warn(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", TABLE_333, exit_code=NVVS_ERROR)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.WARN and "exit 226 (DCGM_ST_NVVS_ERROR)" in result.reason


def test_every_test_skipped_is_no_verdict(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", dcgm4_json({"memory": [(0, "Skip", None)], "pcie": [(0, "Skip", None)]}))
    assert judge(monkeypatch, fake_bin.path(), profile()).status == Status.SKIP
    result = judge(monkeypatch, fake_bin.path(), profile(dcgm_required=True))
    assert result.status == Status.ERROR and "every test was skipped" in result.reason


def test_dcgmi_absent_is_skip_unless_the_profile_requires_dcgm(monkeypatch, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = judge(monkeypatch, str(empty), profile())
    assert (result.status, result.reason) == (Status.SKIP, "dcgmi not installed")
    result = judge(monkeypatch, str(empty), profile(dcgm_required=True))
    assert result.status == Status.ERROR and "dcgmi not installed" in result.reason
    assert "dcgm_enabled" in result.remediation


def test_no_host_engine_is_an_error_with_the_remedy(monkeypatch, fake_bin):
    fake_bin.add("dcgmi", NO_HOST_ENGINE, exit_code=NO_CONNECTION)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.ERROR
    assert "cannot reach the DCGM host engine" in result.reason and "exit 235" in result.reason
    assert "systemctl enable --now nvidia-dcgm" in result.remediation


def test_diagnostic_that_could_not_run_is_an_error_with_dcgms_words(monkeypatch, fake_bin):
    # dcgmi/Diag.cpp HelperDisplayFailureMessage under -j; -54 DCGM_ST_PAUSED = 202
    paused = {"DCGM Diagnostic": {"version": "4.2.3",
                                  "runtime_error": "Error: Diagnostic could not be run while DCGM is paused."}}
    fake_bin.add("dcgmi", json.dumps(paused, indent=3), exit_code=202)
    result = judge(monkeypatch, fake_bin.path(), profile())
    assert result.status == Status.ERROR
    assert "could not be run while DCGM is paused" in result.reason and "exited with 202" in result.reason


def test_level_comes_from_the_profile(monkeypatch, tmp_path):
    args = tmp_path / "args"
    path = fake_dcgmi(tmp_path / "bin", f'echo "$@" > {args}\ncat {TABLE_333_FILE}\n')
    result = judge(monkeypatch, path, profile(dcgm_level=3))
    assert args.read_text().split() == ["diag", "-r", "3", "-j"]
    assert result.status == Status.PASS and result.measured["level"] == 3 and "diag -r 3" in result.expected


@pytest.mark.parametrize("level", [0, 5, True, "2"])
def test_a_level_outside_1_to_4_is_refused(monkeypatch, fake_bin, level):
    fake_bin.add("dcgmi", TABLE_333)
    monkeypatch.setenv("PATH", fake_bin.path())
    with pytest.raises(CollectError, match="burnin.dcgm_level must be one of 1, 2, 3, 4"):
        collect(Context(profile=profile(dcgm_level=level)))


def test_a_dcgmi_without_json_is_read_from_its_table(monkeypatch, tmp_path):
    calls = tmp_path / "calls"
    refused = tmp_path / "refused.txt"
    refused.write_text(JSON_REFUSED)
    path = fake_dcgmi(tmp_path / "bin", f'echo "$@" >> {calls}\ncase " $* " in *" -j "*) cat {refused}; exit 1;; '
                                        f'esac\ncat {TABLE_333_FILE}\n')
    result = judge(monkeypatch, path, profile())
    assert calls.read_text().splitlines() == ["diag -r 2 -j", "diag -r 2"]
    assert result.status == Status.PASS and result.evidence.startswith("dcgmi diag -r 2 (DCGM 3.3.3")


def test_a_hung_diagnostic_is_killed_and_stopped_in_the_host_engine(monkeypatch, tmp_path):
    calls = tmp_path / "calls"
    path = fake_dcgmi(tmp_path / "bin", f'echo "$* stop=$DCGMI_STOP_DIAG_HOSTNAME" >> {calls}\n'
                                        '[ -n "$DCGMI_STOP_DIAG_HOSTNAME" ] && exit 0\nexec sleep 60\n')
    result = judge(monkeypatch, path, profile(), bench_timeout=1)
    assert result.status == Status.ERROR
    assert "did not finish within" in result.reason and "the diagnostic asked to stop" in result.reason
    assert calls.read_text().splitlines() == ["diag -r 2 -j stop=", "diag stop=localhost"]


# ------------------------------------------------------------------ through `gpucheck node --full`

@pytest.fixture
def node(fake_bin, tmp_path):
    """`gpucheck node --full --only gpu.dcgm` with a profile of its own (burnin keys as given)."""
    config = tmp_path / "node.yaml"
    config.write_text("{}\n")

    def run(path: str | None = None, *extra: str, **burnin: object):
        prof = tmp_path / "dcgm-test.yaml"
        prof.write_text(json.dumps({"name": "dcgm-test", "inherits": "generic", "burnin": burnin}))
        env = {"PATH": path or fake_bin.path(), "GPUCHECK_CONFIG": str(config), "HOME": str(tmp_path)}
        done = run_gpucheck(["node", "--full", "--profile", str(prof), "--only", "gpu.dcgm", "--format", "json",
                             *extra], env)
        return done.returncode, by_check(report_of(done))["gpu.dcgm"]

    return run


def test_cli_pass_on_the_real_table(node, fake_bin):
    fake_bin.add("dcgmi", TABLE_333)
    code, result = node()
    assert code == 0 and result["status"] == "pass" and result["measured"]["pass"] == 11


def test_cli_failed_test_fails_the_node(node, fake_bin):
    fake_bin.add("dcgmi", DCGM4_GPU1_HOT, exit_code=ISOLATE)
    code, result = node(dcgm_level=3)
    assert code == 2 and result["status"] == "fail"
    assert result["reason"].startswith("DCGM level 3: targeted_stress failed on GPU1")


def test_cli_missing_dcgmi_is_skip_or_error_as_the_profile_says(node, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, result = node(str(empty))
    assert code == 0 and result["status"] == "skip"
    code, result = node(str(empty), dcgm_required=True)
    assert code == 3 and result["status"] == "error"


def test_cli_gpu_dcgm_needs_full(fake_bin, tmp_path):
    fake_bin.add("dcgmi", TABLE_333)
    (tmp_path / "node.yaml").write_text("{}\n")
    env = {"PATH": fake_bin.path(), "GPUCHECK_CONFIG": str(tmp_path / "node.yaml"), "HOME": str(tmp_path)}
    checks = by_check(report_of(run_gpucheck(["node", "--profile", "generic", "--only", "gpu", "--format", "json"],
                                             env)))
    assert "gpu.dcgm" not in checks and "gpu.driver" in checks
