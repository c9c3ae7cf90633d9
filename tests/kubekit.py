"""A real Kubernetes control plane for the tests: etcd, kube-apiserver (RBAC on), kube-controller-manager and
kube-scheduler on 127.0.0.1, built once per machine from Debian's source package and cached (lab/kubernetes,
docs/kubernetes.md). Nodes are API objects the tests make: no kubelet runs behind them."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab.kubernetes import build, control_plane
from lab.progress import say

ADMIN_TAINT = {"key": "maintenance", "value": "psu-swap", "effect": "NoExecute"}  # an admin's: never gpucheck's


@contextlib.contextmanager
def running(directory: Path) -> Iterator[control_plane.ControlPlane]:
    """A test module's control plane: built if this machine has none cached (minutes, once), started, then stopped
    however the module ends. Without root it is a skip on a developer's machine and a failure under CI."""
    from labkit import lab_unavailable
    from support import starting

    starting("a Kubernetes control plane", "kubernetes")
    if os.geteuid() != 0:
        lab_unavailable("the Kubernetes control plane is built with apt-get source and run as root")
    plane = control_plane.start(build.build(say), directory)  # the cached build, else a build
    try:
        yield plane
    finally:
        plane.stop()


def add_node(plane: control_plane.ControlPlane, name: str, labels: dict[str, str] | None = None,
             taints: list[dict[str, str]] | None = None, cordoned: bool = False) -> dict[str, Any]:
    """A Node as a kubelet would register it, with its capacity (no kubelet behind it: the node lifecycle
    controller soon taints it not-ready), and an admin's labels, taints and cordon."""
    spec: dict[str, Any] = {"taints": taints or []}
    if cordoned:
        spec["unschedulable"] = True
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}
    plane.request("POST", "/api/v1/nodes", node)
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return plane.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"capacity": capacity,
                         "allocatable": capacity}}, "application/strategic-merge-patch+json")


def node(plane: control_plane.ControlPlane, name: str) -> dict[str, Any]:
    return plane.request("GET", f"/api/v1/nodes/{name}")


def gpuchecks_taint(found: dict[str, Any]) -> list[dict[str, str]]:
    """The Node's taints with gpucheck's key (kubernetes/node_rule.TAINT_KEY)."""
    from gpucheck.kubernetes.node_rule import TAINT_KEY

    return [t for t in found["spec"].get("taints") or [] if t["key"] == TAINT_KEY]


def gpucheck_taint(kind: str) -> dict[str, str]:
    """gpucheck's taint as the path of `kind` (passive, active, watch) writes it (kubernetes/node_rule.py)."""
    from gpucheck.kubernetes.node_rule import EFFECT, TAINT_KEY

    return {"key": TAINT_KEY, "value": kind, "effect": EFFECT}


def kubectl_taint(taint: dict[str, str]) -> str:
    """`key=value:Effect`, as `kubectl taint node NAME` takes it."""
    return f"{taint['key']}={taint['value']}:{taint['effect']}"


def unreachable_kubeconfig(plane: control_plane.ControlPlane, path: Path) -> Path:
    """The plane's admin kubeconfig pointed at a port where nothing listens."""
    path.write_text(plane.kubeconfig.read_text().replace(plane.server, "https://127.0.0.1:9"))
    return path


def condition(found: dict[str, Any], kind: str) -> dict[str, str] | None:
    return next((c for c in found.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def service_account_kubeconfig(plane: control_plane.ControlPlane, namespace: str, account: str,
                               path: Path) -> Path:
    """A kubeconfig holding the token Kubernetes 1.20's token controller gave `account` (a Secret it makes as
    the account appears: waited for, as the account itself may be), so a test acts with exactly that account's
    rights."""
    from lab.errors import LabError

    deadline = time.monotonic() + 60
    while True:
        try:  # the namespace's `default` account is made by a controller, after the namespace
            found = plane.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}")
        except LabError as exc:
            if "HTTP 404" not in str(exc) or time.monotonic() > deadline:
                raise
            found = {}
        if found.get("secrets"):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no token Secret for {namespace}/{account} within 60 s")
        time.sleep(0.2)
    secret = plane.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{found['secrets'][0]['name']}")
    token = base64.b64decode(secret["data"]["token"]).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "lab", "cluster": {"server": plane.server, **(
            {"certificate-authority": str(plane.ca_file)} if plane.ca_file else {"insecure-skip-tls-verify": True})}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "lab", "user": account}}]}
    path.write_text(json.dumps(config))
    return path
