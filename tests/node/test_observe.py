"""A check the profile observes (`observe: [ids or globs]`): judged, kept and reported as ever, never counted in the
node's verdict, so it never drains it; `gpucheck cluster`'s report says which nodes it would have drained."""

from __future__ import annotations

import pytest

from gpucheck.cluster import handoff
from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.model import Result, Status, exit_code
from gpucheck.report.cluster.markdown import render_markdown
from gpucheck.report.cluster.summary import render_summary
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree_for
from support import by_check, report_of, run_gpucheck


@pytest.fixture
def node(tmp_path):
    """A DGX H100 whose GPU3 has 2 uncorrected ECC errors, and a site profile that observes gpu.ecc_errors."""
    (tmp_path / "observing.yaml").write_text("name: observing\ninherits: dgx-h100\nobserve: [gpu.ecc*]\n")
    env = env_for(scenario_path("ecc-uncorrected"), build_library())
    env["GPUCHECK_SYSFS_ROOT"] = str(write_pci_tree_for(scenario_path("ecc-uncorrected"), tmp_path / "sys"))
    return tmp_path, env


def test_an_observed_failure_is_reported_and_never_fails_the_node(node):
    tmp_path, env = node
    done = run_gpucheck(["node", "--profile", str(tmp_path / "observing.yaml"), "--only", "gpu.ecc_errors",
                         "gpu.count", "--format", "json"], env)
    report = report_of(done)
    ecc = by_check(report)["gpu.ecc_errors"]
    assert ecc["status"] == "fail" and ecc["observed"] is True
    assert ecc["reason"].startswith("observed only (would drain): ")
    assert "observed" not in by_check(report)["gpu.count"]  # only what the profile names
    assert done.returncode == report["exit_code"] == 0


def test_a_pattern_that_observes_no_check_is_one_line_and_exit_3(node):
    tmp_path, env = node
    (tmp_path / "typo.yaml").write_text("name: typo\ninherits: dgx-h100\nobserve: [gpu.ecc_erors]\n")
    done = run_gpucheck(["node", "--profile", str(tmp_path / "typo.yaml"), "--only", "gpu.count"], env)
    assert done.returncode == 3 and done.stderr.count("\n") == 1
    assert "'observe' names no check: 'gpu.ecc_erors'" in done.stderr
    (tmp_path / "shape.yaml").write_text("name: shape\ninherits: dgx-h100\nobserve: gpu.ecc_errors\n")
    done = run_gpucheck(["node", "--profile", str(tmp_path / "shape.yaml")], env)
    assert done.returncode == 3 and "'observe' must be a list of check ids or globs" in done.stderr


def test_the_verdict_leaves_out_observed_results():
    observed = Result("gpu.temperature", Status.FAIL, observed=True)
    assert exit_code([Result("gpu.count", Status.PASS), observed]) == 0
    assert exit_code([Result("gpu.count", Status.WARN), observed]) == 1


def test_the_cluster_report_says_which_nodes_observed_checks_would_have_drained(tmp_path):
    hosts = [Host(f"node0{i}", "127.0.0.1", 2200 + i, "root", None, (), True) for i in (1, 2)]
    ctx = ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))
    results = [{"check": "gpu.ecc_errors", "status": "fail", "observed": True, "reason": "observed only (would "
                "drain): GPU3: 2 uncorrected"}, {"check": "gpu.count", "status": "pass", "reason": "8 GPUs"}]
    ctx.nodes["node02"] = NodeOutcome("node02", Status.PASS, "x", "report", 1.0, 0,
                                      {"host": "node02", "exit_code": 0, "results": results})
    ctx.nodes["node01"] = NodeOutcome("node01", Status.PASS, "x", "report", 1.0, 0,
                                      {"host": "node01", "exit_code": 0, "results": results[1:]})
    assert handoff.drain(ctx) == []
    assert handoff.would_drain(ctx) == [("node02", "gpucheck: gpu.ecc_errors observed only (would drain): GPU3: 2 "
                                                   "uncorrected")]
    doc = {"would_drain": [{"node": "node02", "reason": "x"}], "nodes": {}, "cluster": [], "counts": {}}
    said = "observed checks (the profile's observe) would have drained 1 node, drained none: node02"
    assert said in render_markdown(doc) and said in render_summary(doc, str(tmp_path), 0)
