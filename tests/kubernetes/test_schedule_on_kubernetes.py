"""`gpucheck schedule --kubernetes` against a real kube-apiserver with RBAC on (tests/kubekit.py), as gpucheck's own
service account with deploy/kubernetes applied: a Job per GPU Node and kind made from the DaemonSet's pod, kept while
it lives, replaced once its kind is due again after it ended and kept until then; a Node offering no GPUs is said
and left; --dry-run changes nothing; --off deletes them all; an account without the Role is one line, exit 3. No
kubelet here: the Jobs' pods are made, never run (a Job's run and its preemption: tests/kubernetes/test_lab_nodes.py,
deploy/kubernetes/jobs/full.yaml)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

import kubekit
from gpucheck.schedule import kube_jobs
from support import ROOT

GPU = {"nvidia.com/gpu.present": "true"}
JOBS = "/apis/batch/v1/namespaces/gpucheck/jobs"


def schedule(kubeconfig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucheck", "schedule", "--kubernetes", "--kubeconfig",
                           str(kubeconfig), *args], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "agent"), "PATH": "/usr/bin:/bin"})


def job(kube, name: str) -> dict:
    return kube.request("GET", f"{JOBS}/{name}")


def ended(kube, name: str, condition: str, ago_s: int) -> None:
    """The Job's status as the Job controller writes it when its pod ended `ago_s` ago (no kubelet runs one here)."""
    when = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"conditions": [{"type": condition, "status": "True", "lastTransitionTime": when,
                              "lastProbeTime": when}], "startTime": when}
    if condition == "Complete":
        status.update(completionTime=when, succeeded=1)
    kube.request("PATCH", f"{JOBS}/{name}/status", {"status": status}, "application/merge-patch+json")


@pytest.fixture(scope="module")
def account(kube, tmp_path_factory):
    """deploy/kubernetes applied, three GPU Nodes (one offering no GPUs) and the kubeconfig of gpucheck's account."""
    kube.kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes"))
    for name in ("sched-1", "sched-2", "sched-nogpu"):
        kubekit.add_node(kube, name, GPU)
    kube.request("PATCH", "/api/v1/nodes/sched-nogpu/status", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}},
                 "application/strategic-merge-patch+json")
    kubekit.add_node(kube, "sched-cpu", {})
    return kubekit.service_account_kubeconfig(kube, "gpucheck", "gpucheck", tmp_path_factory.mktemp("sa") / "kc")


def test_a_job_per_node_made_from_the_daemonsets_pod_below_every_user_pod(kube, account):
    dry = schedule(account, "--dry-run", "--weekly", "0")
    assert dry.returncode == 0, dry.stderr
    assert "gpucheck-daily-sched-1: would create (none yet): --full --skip gpu.burn gpu.dcgm, every 86400 s, 8 GPUs" \
        in dry.stdout, dry.stdout
    assert "sched-cpu" not in dry.stdout  # not a GPU node: the DaemonSet's nodeSelector leaves it out
    assert kube.request("GET", f"{JOBS}?labelSelector=gpucheck%2Fscheduled")["items"] == []

    done = schedule(account, "--nodes", "sched-1,sched-nogpu", "--weekly", "0")
    assert done.returncode == 0, done.stderr
    assert "gpucheck-daily-sched-1: created (none yet)" in done.stdout, done.stdout
    assert "gpucheck-daily-sched-nogpu: not scheduled: Node sched-nogpu offers no nvidia.com/gpu" in done.stdout
    made = job(kube, "gpucheck-daily-sched-1")
    daemonset = kube.request("GET", "/apis/apps/v1/namespaces/gpucheck/daemonsets/gpucheck-node")["spec"]["template"]
    pod = made["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "gpucheck-active", pod
    assert pod["restartPolicy"] == "Never" and pod["hostPID"] is True
    (container,) = pod["containers"]  # the check alone, not the watcher beside it
    ours = next(c for c in daemonset["spec"]["containers"] if c["name"] == "gpucheck")
    assert container["image"] == ours["image"] and container["volumeMounts"] == ours["volumeMounts"]
    assert pod["volumes"] == daemonset["spec"]["volumes"]
    assert container["command"] == ["gpucheck", "node", "--kubernetes", "--scheduled", "daily", "--full", "--skip",
                                    "gpu.burn", "gpu.dcgm"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}  # the GPUs, not the DaemonSet's memory
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" and "INTERVAL_S" not in env
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["sched-1"]}]}]
    assert pod["tolerations"] == [{"key": "gpucheck/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    # asked again while it lives (its pod pending: no kubelet): kept
    again = schedule(account, "--nodes", "sched-1", "--weekly", "0")
    assert "gpucheck-daily-sched-1: kept: waiting or running" in again.stdout, again.stdout
    assert job(kube, "gpucheck-daily-sched-1")["metadata"]["uid"] == made["metadata"]["uid"]


def test_an_ended_job_is_kept_until_its_kind_is_due_again_then_replaced(kube, account):
    assert schedule(account, "--nodes", "sched-2", "--daily", "0").returncode == 0
    first = job(kube, "gpucheck-weekly-sched-2")["metadata"]["uid"]
    ended(kube, "gpucheck-weekly-sched-2", "Complete", ago_s=600)
    kept = schedule(account, "--nodes", "sched-2", "--daily", "0", "--weekly", "1h")
    assert "gpucheck-weekly-sched-2: kept: the last one completed " in kept.stdout, kept.stdout
    assert "; the next is due " in kept.stdout and job(kube, "gpucheck-weekly-sched-2")["metadata"]["uid"] == first
    ended(kube, "gpucheck-weekly-sched-2", "Failed", ago_s=7200)
    replaced = schedule(account, "--nodes", "sched-2", "--daily", "0", "--weekly", "1h")
    assert replaced.returncode == 0, replaced.stderr
    assert "gpucheck-weekly-sched-2: replaced (the last one failed " in replaced.stdout, replaced.stdout
    new = job(kube, "gpucheck-weekly-sched-2")
    assert new["metadata"]["uid"] != first and kube_jobs.ended_at(new) is None


def test_off_deletes_every_scheduled_job_and_an_account_without_the_role_is_one_line(kube, account, tmp_path):
    assert schedule(account, "--nodes", "sched-1", "--weekly", "0").returncode == 0
    refused = schedule(kubekit.service_account_kubeconfig(kube, "default", "default", tmp_path / "kc"),
                       "--nodes", "sched-1")
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("gpucheck: error: kubernetes: cannot read Node sched-1: 403 "), refused.stderr
    off = schedule(account, "--off")
    assert off.returncode == 0 and "gpucheck-daily-sched-1: deleted" in off.stdout, off.stdout
    assert kube.request("GET", f"{JOBS}?labelSelector=gpucheck%2Fscheduled")["items"] == []
