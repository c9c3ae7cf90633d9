"""--launcher kubernetes without a cluster: what it refuses in one line and exit 3 before anything starts, and the
pod it makes for a node from the site's template. The node checks as pods on real kubelets:
tests/kubernetes/test_lab_nodes.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cluster_helpers import run_cluster

from gpucheck.cluster import pods
from gpucheck.cluster.context import Options
from support import ROOT

TEMPLATE = ROOT / "deploy" / "kubernetes" / "jobs" / "check.yaml"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": {}, "gpu-b": {}}}}}}))
    return path


@pytest.mark.parametrize(("args", "says"), [
    (["--pod-template", str(TEMPLATE)], "--kubeconfig and --pod-template are --launcher kubernetes's"),
    (["--launcher", "kubernetes"], "--launcher kubernetes: give --pod-template FILE"),
    (["--launcher", "kubernetes", "--pod-template", "/nonexistent.yaml"], "--pod-template /nonexistent.yaml: No "
                                                                          "such file or directory"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--kubeconfig", "/nonexistent"],
     "--launcher kubernetes: no Kubernetes configuration from /nonexistent"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--stages", "consistency,mpi"],
     "--launcher kubernetes does not run stage mpi yet"),
])
def test_what_it_cannot_do_is_one_line_and_exit_3_before_anything_runs(inventory, tmp_path, args, says) -> None:
    done = run_cluster(["-i", str(inventory), "--report", str(tmp_path / "report"), *args])
    assert done.returncode == 3, done.stdout + done.stderr
    assert says in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "report").exists()


def test_a_nodes_pod_is_the_templates_bound_to_the_node_running_the_agent_as_over_ssh() -> None:
    options = Options(profile="dgx-h100", full=True, host_timeout=900.0, remote_command="/opt/gpucheck/bin/gpucheck")
    pod = pods.pod_for(pods.template(str(TEMPLATE)), "gpu-node-7", options)
    spec = pod["spec"]
    assert pod["metadata"]["name"].startswith("gpucheck-check-gpu-node-7-") and pod["metadata"]["namespace"] == (
        "gpucheck")
    assert (spec["nodeName"], spec["restartPolicy"], spec["activeDeadlineSeconds"]) == ("gpu-node-7", "Never", 900)
    assert spec["containers"][0]["command"] == ["/opt/gpucheck/bin/gpucheck", "node", "--format", "json",
                                                "--profile", "dgx-h100", "--full"]
    assert spec["containers"][0]["image"] == "gpucheck:latest"  # the site's, as its template says
