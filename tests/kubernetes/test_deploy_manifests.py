"""deploy/kubernetes/ applied as a user would (`kubectl apply -f deploy/kubernetes/`) to a real control plane with
RBAC on: the objects are valid for Kubernetes 1.20, and the DaemonSet controller and the scheduler place one
gpucheck pod on every GPU node, whatever holds it (an admin's cordon, an admin's NoExecute taint, gpucheck's own
taint: it must be there to take that back), and none on a node without GPUs. No kubelet runs: the pods are bound,
never started (docs/kubernetes.md)."""

from __future__ import annotations

import time

import kubekit
from support import ROOT

GPU = {"nvidia.com/gpu.present": "true"}
ADMIN = kubekit.ADMIN_TAINT
OURS = kubekit.gpucheck_taint("passive")


def pods_by_node(kube) -> dict[str, dict]:
    pods = kube.request("GET", "/api/v1/namespaces/gpucheck/pods?labelSelector=app.kubernetes.io/name%3Dgpucheck")
    return {pod["spec"].get("nodeName", ""): pod for pod in pods["items"]}


def test_the_daemonset_is_bound_to_every_gpu_node_whatever_holds_it_and_to_no_other(kube):
    kubekit.add_node(kube, "gpu-cordoned", GPU, cordoned=True)
    kubekit.add_node(kube, "gpu-tainted", GPU, [ADMIN, OURS])
    kubekit.add_node(kube, "cpu-only", {})
    applied = kube.kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes"))
    for made in ("namespace/gpucheck", "serviceaccount/gpucheck", "clusterrole.rbac.authorization.k8s.io/gpucheck-node",
                 "priorityclass.scheduling.k8s.io/gpucheck-active", "daemonset.apps/gpucheck-node"):
        assert f"{made} created" in applied or f"{made} unchanged" in applied, applied
    deadline = time.monotonic() + 60
    while set(pods := pods_by_node(kube)) != {"gpu-cordoned", "gpu-tainted"}:
        assert time.monotonic() < deadline, {node: pod["status"] for node, pod in pods.items()}
        time.sleep(0.2)
    for node, pod in pods.items():
        containers = {c["name"]: c for c in pod["spec"]["containers"]}
        assert containers["watch"]["command"] == ["gpucheck", "watch", "--kubernetes"], node
        for container in containers.values():  # each tells its own Node: the pod's
            env = {e["name"]: e for e in container["env"]}
            assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert pod["spec"]["serviceAccountName"] == "gpucheck", node
    status = kube.request("GET", "/apis/apps/v1/namespaces/gpucheck/daemonsets/gpucheck-node")["status"]
    assert status["desiredNumberScheduled"] == 2, status
