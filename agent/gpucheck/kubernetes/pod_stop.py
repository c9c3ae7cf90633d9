"""How Kubernetes stopped the pod a scheduled active check ran in (deploy/kubernetes/jobs/full.yaml): preempted by a
user pod that needed its GPUs, deleted by someone, or not known. The scheduler preempts a pod by deleting it and
recording the event `Preempted` on it (core/v1 Pod and Event, stable from 1.20 to today's releases; the pod
condition DisruptionTarget is 1.26's); the event may come after the SIGTERM, so it is asked for again for a few
seconds, well inside the pod's grace period. Its rights: get pods and list events in gpucheck's own namespace
(deploy/kubernetes/10-rbac.yaml's Role)."""

from __future__ import annotations

import os
import time
from typing import Any

from . import api

SETTLE_S = 10.0
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def this_pod() -> tuple[str, str]:
    """(pod, namespace): POD_NAME and POD_NAMESPACE (the manifest sets them from the pod's metadata), else the
    host name a pod has and its service account's namespace."""
    namespace = os.environ.get("POD_NAMESPACE")
    if not namespace:
        try:
            with open(NAMESPACE_FILE) as fh:
                namespace = fh.read().strip()
        except OSError:
            namespace = "gpucheck"
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", "?"), namespace


def how_stopped(kubeconfig: str | None = None, settle_s: float = SETTLE_S) -> tuple[str, str]:
    """(outcome, what Kubernetes said): preempted, cancelled (deleted, no preemption said) or stopped (the pod is
    not being deleted: a signal from elsewhere). Raises api.KubernetesError."""
    pod, namespace = this_pod()
    client = api.connect(kubeconfig)
    deadline = time.monotonic() + settle_s
    while True:
        found = api.call(f"read Pod {namespace}/{pod}", client.read_namespaced_pod, pod, namespace)
        deleted = found.get("metadata", {}).get("deletionTimestamp")
        preempted = _preempted_by(client, pod, namespace) if deleted else None
        if preempted is not None:
            return "preempted", f"pod {pod}: {preempted}"
        if not deleted or time.monotonic() > deadline:
            return ("cancelled", f"pod {pod} deleted at {deleted}, no preemption said") if deleted else (
                "stopped", f"pod {pod} is not being deleted")
        time.sleep(0.5)


def _preempted_by(client: Any, pod: str, namespace: str) -> str | None:
    events = api.call(f"list the events of Pod {namespace}/{pod}", client.list_namespaced_event, namespace,
                       field_selector=f"involvedObject.name={pod},involvedObject.kind=Pod")
    said = [e.get("message") or "" for e in events.get("items") or [] if e.get("reason") == "Preempted"]
    return said[-1] if said else None
