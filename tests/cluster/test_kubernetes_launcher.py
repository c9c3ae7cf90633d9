"""--launcher kubernetes without a cluster: what it refuses in one line and exit 3 before anything starts, the
pod it makes for a node from the site's template, and the MPI job's pods. The node checks and the MPI stage as pods
on real kubelets: tests/kubernetes/test_lab_nodes.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cluster_helpers import run_cluster

from gpucheck.cluster import job_image, mpi_pods, pods
from gpucheck.cluster.context import Options
from gpucheck.cluster.jobs import REMOTE_DIR
from gpucheck.cluster.layout import Layout
from support import ROOT

TEMPLATE = ROOT / "deploy" / "kubernetes" / "jobs" / "check.yaml"
JOB_TEMPLATE = ROOT / "deploy" / "kubernetes" / "jobs" / "mpi.yaml"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": {}, "gpu-b": {}}}}}}))
    return path


@pytest.mark.parametrize(("args", "says"), [
    (["--pod-template", str(TEMPLATE)], "--kubeconfig, --pod-template and --job-template are --launcher kubernetes's"),
    (["--job-template", str(JOB_TEMPLATE)], "--kubeconfig, --pod-template and --job-template are --launcher "
                                            "kubernetes's"),
    (["--launcher", "kubernetes"], "--launcher kubernetes: give --pod-template FILE"),
    (["--launcher", "kubernetes", "--pod-template", "/nonexistent.yaml"], "--pod-template /nonexistent.yaml: No "
                                                                          "such file or directory"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--kubeconfig", "/nonexistent"],
     "--launcher kubernetes: no Kubernetes configuration from /nonexistent"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--stages", "consistency,mpi"],
     "--launcher kubernetes does not run stage mpi (no --job-template)"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--job-template", str(JOB_TEMPLATE), "--stages",
      "consistency,mpi,network"], "--launcher kubernetes does not run stage network (not run through Kubernetes "
                                  "yet)"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--job-template", str(JOB_TEMPLATE), "--stages",
      "smoke", "--framework", "torch"], "--launcher kubernetes does not run stage smoke (--framework torch's ranks "
                                        "start with torchrun: not run through Kubernetes yet"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--stages", "allreduce"],
     "--launcher kubernetes does not run stage allreduce (no --job-template)"),
    (["--launcher", "kubernetes", "--pod-template", str(TEMPLATE), "--job-template", str(TEMPLATE.parent)],
     f"--job-template {TEMPLATE.parent}: Is a directory"),
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


def test_an_mpi_jobs_pods_are_the_job_templates_on_the_nodes_network_sharing_the_jobs_key() -> None:
    """A worker runs sshd on the job's port with the job's key its only way in; the launcher runs mpirun on the
    first node, every rank with the job's environment, reaching the workers by their Nodes' addresses on that
    port; both bound to their Node, on its network, their Secret mounted owner-read-only."""
    base = pods.template(str(JOB_TEMPLATE), "--job-template")
    worker = mpi_pods.pod(base, "gpucheck-mpi-1-gpu-b", "gpu-b", mpi_pods.sshd_command(24680), {}, "gpucheck-mpi-1",
                          180)
    spec = worker["spec"]
    assert (spec["nodeName"], spec["hostNetwork"], spec["restartPolicy"], spec["activeDeadlineSeconds"]) == (
        "gpu-b", True, "Never", 180)
    assert spec["containers"][0]["image"] == "training:latest"  # the site's, as its template says
    sshd = spec["containers"][0]["command"][-1]
    assert "exec /usr/sbin/sshd -D -e -f /dev/null -p 24680 " in sshd
    assert f"-o AuthorizedKeysFile={mpi_pods.KEY_DIR}/authorized_keys" in sshd
    assert {"name": "gpucheck-mpi-key", "secret": {"secretName": "gpucheck-mpi-1", "items": [
        {"key": "id", "path": "id", "mode": 0o400}, {"key": "authorized_keys", "path": "authorized_keys",
                                                     "mode": 0o400}]}} in spec["volumes"]
    assert [v["name"] for v in spec["volumes"]] == ["gpucheck-mpi-key"]  # no workload files: no such volume
    lay = Layout([("gpu-a", 2), ("gpu-b", 2)])
    argv = mpi_pods.launcher_command(lay, {"gpu-a": "10.1.0.1", "gpu-b": "10.1.0.2"}, ["hostname"],
                                     {"NCCL_DEBUG": "INFO"}, 24680)
    assert argv[:5] == ["mpirun", "-np", "4", "-H", "10.1.0.1:2,10.1.0.2:2"] and argv[-1] == "hostname"
    assert argv[argv.index("-x") + 1] == "NCCL_DEBUG" and "--tag-output" in argv
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert rsh.startswith(f"-p 24680 -i {mpi_pods.KEY_DIR}/id ") and "BatchMode=yes" in rsh
    launcher = mpi_pods.pod(base, "gpucheck-mpi-1-launcher", "gpu-a", argv, {"NCCL_DEBUG": "INFO"},
                            "gpucheck-mpi-1", 180, ["smoke.py", "rank_io.py"])
    container = launcher["spec"]["containers"][0]
    assert container["command"] == argv
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in container["env"]
    # the workload files from the same Secret, where the SSH path copies them, readable by every user
    assert {"name": "gpucheck-job-files", "mountPath": REMOTE_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": "gpucheck-job-files", "secret": {"secretName": "gpucheck-mpi-1", "items": [
        {"key": "smoke.py", "path": "smoke.py", "mode": 0o444},
        {"key": "rank_io.py", "path": "rank_io.py", "mode": 0o444}]}} in launcher["spec"]["volumes"]
    secret = mpi_pods.secret("gpucheck-mpi-1", "gpucheck", b"PRIVATE", b"PUBLIC", {"smoke.py": b"print(1)\n"})
    assert secret["data"] == {"id": "UFJJVkFURQ==", "authorized_keys": "UFVCTElD", "smoke.py": "cHJpbnQoMSkK"}
    probe = mpi_pods.pod(base, "gpucheck-probe-gpu-a-1", "gpu-a", ["/bin/sh", "-c", "true"], {}, None, 60)
    assert "volumes" not in probe["spec"] and probe["spec"]["hostNetwork"]  # a probe has no key and no files


def test_the_job_images_probe_is_read_as_a_nodes_facts_would_say_it() -> None:
    """What the jobs' image holds, from its probe's lines: the python each stack runs, each framework's version
    (None where it does not import, with the error); a python that never answered is said so."""
    python = "/opt/conda/bin/python3"
    output = "\n".join(["2026-12-01 some warning on stderr",
                        job_image.MARK + json.dumps({"python": python}),
                        job_image.MARK + json.dumps({"framework": "horovod", "version": "0.28.1"}),
                        job_image.MARK + json.dumps({"framework": "tensorflow", "version": "2.15.1"}),
                        job_image.MARK + json.dumps({"framework": "torch", "version": None,
                                                     "error": "ImportError: libcudart.so.12"})])
    found = job_image.read(output)
    assert found["frameworks"] == {"tf-horovod": {"tensorflow": "2.15.1", "horovod": "0.28.1"},
                                   "torch": {"torch": None}}
    assert found["stacks"]["tf-horovod"] == {"python": python, "frameworks": ["tensorflow", "horovod"]}
    assert found["errors"] == {"torch": "ImportError: libcudart.so.12"}
    assert "error" in job_image.read("sh: 1: exec: python3: not found\n")
    assert job_image.python_of({"metadata": {"annotations": {job_image.PYTHON_ANNOTATION: python}}}) == python
    assert job_image.python_of({"metadata": {}}) == "python3"
