"""How Kubernetes stopped a scheduled check's pod (gpucheck/kubernetes/pod_stop.py), asked of a real kube-apiserver
with the rights of deploy/kubernetes/10-rbac.yaml and no more: the scheduler's `Preempted` event on a pod being
deleted is a preemption, a deletion without one is a cancel, a pod not being deleted was stopped by something else.
No kubelet runs here, so a deleted pod bound to a node stays, being deleted, as it does while its kubelet stops it.
The real preemption, on the lab's nodes: tests/kubernetes/test_lab_nodes.py."""

from __future__ import annotations

import datetime as dt

import pytest

import kubekit
from gpucheck.kubernetes import api, pod_stop
from support import ROOT

NAMESPACE = "gpucheck"


@pytest.fixture(scope="module")
def account(kube, tmp_path_factory):
    kube.kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes" / "10-rbac.yaml"))
    return str(kubekit.service_account_kubeconfig(kube, NAMESPACE, "gpucheck",
                                                  tmp_path_factory.mktemp("sa") / "gpucheck.kubeconfig"))


def bound_pod(kube, name: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"nodeName": "gpu-stopped", "serviceAccountName": "gpucheck",
                    "containers": [{"name": "c", "image": "gpucheck:latest"}]}}
    kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)


def preempted_event(kube, pod: str) -> None:
    """The event kube-scheduler records on a victim (pkg/scheduler/framework/plugins/defaultpreemption)."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{pod}.preempted", "namespace": NAMESPACE},
             "involvedObject": {"kind": "Pod", "name": pod, "namespace": NAMESPACE}, "reason": "Preempted",
             "message": "Preempted by default/train on node gpu-stopped", "type": "Normal",
             "source": {"component": "default-scheduler"}, "firstTimestamp": now, "lastTimestamp": now}
    kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/events", event)


def stopped(monkeypatch, account: str, pod: str, settle_s: float = 10.0) -> tuple[str, str]:
    monkeypatch.setenv("POD_NAME", pod)
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    return pod_stop.how_stopped(account, settle_s)


def test_a_pod_deleted_with_the_schedulers_preempted_event_was_preempted(kube, account, monkeypatch) -> None:
    bound_pod(kube, "full-a")
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/full-a")
    preempted_event(kube, "full-a")
    assert stopped(monkeypatch, account, "full-a") == (
        "preempted", "pod full-a: Preempted by default/train on node gpu-stopped")


def test_a_pod_deleted_without_it_was_cancelled_and_one_not_being_deleted_was_stopped(kube, account,
                                                                                         monkeypatch) -> None:
    bound_pod(kube, "full-b")
    bound_pod(kube, "full-c")
    outcome, said = stopped(monkeypatch, account, "full-c", settle_s=0.5)
    assert (outcome, said) == ("stopped", "pod full-c is not being deleted")
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/full-b")
    outcome, said = stopped(monkeypatch, account, "full-b", settle_s=0.5)
    assert outcome == "cancelled" and said.endswith("no preemption said"), said


def test_the_namespaces_default_account_may_not_ask(kube, account, monkeypatch, tmp_path) -> None:
    bound_pod(kube, "full-d")
    other = kubekit.service_account_kubeconfig(kube, NAMESPACE, "default", tmp_path / "default.kubeconfig")
    with pytest.raises(api.KubernetesError, match="cannot read Pod gpucheck/full-d: 403"):
        stopped(monkeypatch, str(other), "full-d")
