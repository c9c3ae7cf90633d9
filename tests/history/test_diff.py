"""`gpucheck diff` (history/diff.py) on real reports: the H200's measured passive and full runs, and copies of them
with one thing changed, so each finding can be traced to the change that makes it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucheck.history.diff import compare, diff_runs, figures, versions

MEASURED = Path(__file__).resolve().parents[1] / "fixtures" / "measured" / "h200-141gb-driver580"
FULL = json.loads((MEASURED / "gpucheck-node-full-burn20-generic.json").read_text())
ROOT = Path(__file__).resolve().parents[2]


def changed(**edits) -> dict:
    """A copy of the full run with `facts`/measured values replaced: edits like gemm_bf16=0.9 (a factor)."""
    doc = copy.deepcopy(FULL)
    for key, value in edits.items():
        if key == "driver":
            doc["facts"]["driver_version"] = value
        elif key == "nccl":
            doc["facts"]["libraries"]["nccl"]["system"] = value
        elif key == "gemm_bf16":
            next(r for r in doc["results"] if r["check"] == "gpu.gemm")["measured"]["GPU0"]["bf16_TFLOPS"] *= value
        elif key == "ecc":
            next(r for r in doc["results"] if r["check"] == "gpu.ecc_errors")["status"] = value
    return doc


def test_the_same_run_twice_has_nothing_to_say():
    (d,) = diff_runs(FULL, copy.deepcopy(FULL), "a", "b")
    assert (d.versions, d.verdicts, d.figures, d.exit_code()) == ([], [], [], 0)


def test_the_figures_are_the_rates_of_the_measured_run():
    found = figures(FULL)
    assert found["gpu.gemm GPU0 bf16_TFLOPS"] == 785.9 and found["gpu.memory_bandwidth GPU0 copy_GBps"] == 4204.0
    assert found["gpu.burn GPU0 TFLOPS_median"] == 663.5
    assert not any("temperature" in name or "bad_words" in name for name in found)  # not rates


def test_an_upgrade_names_the_versions_that_moved():
    d = compare(FULL, changed(driver="580.200.01", nccl="2.29.1"), "vm")
    assert d.versions == [("driver", "580.159.04", "580.200.01"), ("nccl (system)", "2.28.3", "2.29.1")]
    assert versions(FULL)["cudnn (system)"] == "9.14.0" and d.exit_code() == 0


@pytest.mark.parametrize(("factor", "noise", "moved"), [(0.90, 5.0, True), (0.97, 5.0, False), (0.97, 2.0, True),
                                                        (1.10, 5.0, True)])
def test_a_figure_moves_only_beyond_the_noise_and_only_a_drop_warns(factor, noise, moved):
    d = compare(FULL, changed(gemm_bf16=factor), "vm", noise)
    assert [name for name, *_ in d.figures] == (["gpu.gemm GPU0 bf16_TFLOPS"] if moved else [])
    if moved:
        assert d.figures[0][3] == pytest.approx((factor - 1) * 100)
    assert d.exit_code() == (1 if moved and factor < 1 else 0)


def test_a_check_that_got_worse_is_the_verdict():
    d = compare(FULL, changed(ecc="fail"), "vm")
    assert d.verdicts == [("gpu.ecc_errors", "pass", "fail")] and d.exit_code() == 2
    assert compare(changed(ecc="fail"), FULL, "vm").exit_code() == 0  # repaired: better is no alarm


def test_two_cluster_runs_node_by_node():
    before = {"nodes": {"a": {"report": FULL}, "b": {"report": FULL}, "gone": {"report": FULL}}}
    after = {"nodes": {"a": {"report": FULL}, "b": {"report": changed(driver="580.200.01")}, "new": {"report": FULL}}}
    found = {d.node: d for d in diff_runs(before, after, "old", "new")}
    assert found["b"].versions == [("driver", "580.159.04", "580.200.01")] and not found["a"].versions
    assert (found["gone"].only_in, found["new"].only_in) == ("before", "after")


def cluster_run(nodes: dict[str, dict | None], checks: dict[str, str]) -> dict:
    """A cluster report.json's shape (cluster/handoff.py): each node's entry (a report, or the reason there is
    none) and the cluster's own checks."""
    entries = {n: {"host": n, "status": "pass", "reason": "", "report": r} if r is not None else
               {"host": n, "status": "error", "reason": "unreachable: ssh: connect: no route to host"}
               for n, r in nodes.items()}
    return {"kind": "cluster", "nodes": entries,
            "cluster": [{"check": c, "status": s, "reason": ""} for c, s in checks.items()]}


def test_a_node_lost_between_two_cluster_runs_fails_the_diff(tmp_path):
    before = cluster_run({"a": FULL, "b": FULL}, {"cluster.allreduce": "pass"})
    after = cluster_run({"a": FULL, "b": None}, {"cluster.allreduce": "pass"})
    (tmp_path / "before.json").write_text(json.dumps(before))
    (tmp_path / "after.json").write_text(json.dumps(after))
    done = gpucheck("diff", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("b: lost: a report in the before run, none in the after run (error: unreachable: ssh: connect: no route "
            "to host)") in done.stdout
    assert "cluster checks: no verdict changed" in done.stdout
    # a node added is no loss
    assert gpucheck("diff", str(tmp_path / "after.json"), str(tmp_path / "before.json")).returncode == 0


def test_a_cluster_check_that_got_worse_fails_the_diff(tmp_path):
    nodes = {"a": FULL}
    before = cluster_run(nodes, {"cluster.allreduce": "pass", "cluster.smoke": "pass"})
    after = cluster_run(nodes, {"cluster.allreduce": "fail", "cluster.smoke": "pass"})
    (tmp_path / "before.json").write_text(json.dumps(before))
    (tmp_path / "after.json").write_text(json.dumps(after))
    done = gpucheck("diff", "--format", "json", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert done.returncode == 2, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["cluster"] == {"verdicts": [{"check": "cluster.allreduce", "before": "pass", "after": "fail"}],
                              "exit_code": 2}
    assert set(doc["nodes"]) == {"a"} and doc["exit_code"] == 2
    text = gpucheck("diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")).stdout
    assert "cluster checks:\n  verdict  cluster.allreduce: pass -> fail" in text


def test_a_figure_that_was_zero_is_strict_json(tmp_path):
    """From 0 a change has no percentage: null in the JSON, never a bare Infinity a strict reader refuses."""
    before = changed(gemm_bf16=0.0)
    (tmp_path / "before.json").write_text(json.dumps(before))
    (tmp_path / "after.json").write_text(json.dumps(FULL))
    done = gpucheck("diff", "--format", "json", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert done.returncode == 0, done.stderr

    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    doc = json.loads(done.stdout, parse_constant=refuse)
    moved = {f["figure"]: f for f in doc["nodes"]["vm"]["figures"]}["gpu.gemm GPU0 bf16_TFLOPS"]
    assert moved["change_pct"] is None and moved["before"] == 0


def gpucheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucheck", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT / "agent"), "PATH": "/usr/bin:/bin"})


def test_the_command_prints_the_changes_and_exits_by_the_worst(tmp_path):
    (tmp_path / "before.json").write_text(json.dumps(FULL))
    (tmp_path / "after.json").write_text(json.dumps(changed(driver="580.200.01", gemm_bf16=0.9)))
    done = gpucheck("diff", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert done.returncode == 1, done.stderr
    assert "version  driver: 580.159.04 -> 580.200.01" in done.stdout
    assert "figure   gpu.gemm GPU0 bf16_TFLOPS: 785.9 -> 707.3 (-10.0 %)" in done.stdout
    doc = json.loads(gpucheck("diff", "--format", "json", str(tmp_path / "before.json"),
                              str(tmp_path / "after.json")).stdout)
    assert doc["nodes"]["vm"]["figures"][0]["change_pct"] == -10.0 and doc["exit_code"] == 1


@pytest.mark.parametrize(("content", "message"), [("not json", "not JSON"), ("{}", "not a gpucheck report"),
                                                  ("[1, 2]", "not a gpucheck report")])
def test_a_file_that_is_not_a_report_is_one_line_and_exit_3(tmp_path, content, message):
    (tmp_path / "bad.json").write_text(content)
    done = gpucheck("diff", str(tmp_path / "bad.json"), str(MEASURED / "gpucheck-node-full-burn20-generic.json"))
    assert done.returncode == 3 and message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    missing = gpucheck("diff", str(tmp_path / "none.json"), str(tmp_path / "bad.json"))
    assert missing.returncode == 3 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
