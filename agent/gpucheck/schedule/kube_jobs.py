"""What `gpucheck schedule --kubernetes` keeps in the API (docs/kubernetes.md): each GPU Node's scheduled active
checks as batch/v1 Jobs, one per node and kind (daily, weekly), gpucheck-KIND-NODE in gpucheck's namespace.

A Job's pod is the DaemonSet's `gpucheck` container (the site's image, environment and mounts, so what a site
changed there holds here too) running `gpucheck node --kubernetes --scheduled KIND ARGS` on its Node alone, at the
PriorityClass gpucheck-active that every user pod is above, holding the Node's GPUs: a user pod that needs them
preempts it (kept among the node's reports as preempted, never a failure: kubernetes/pod_stop.py) and the Job
starts it again once they are free. A Job that ended stays (kubectl shows how; its pod's log has the report) until
its kind is due again, EVERY after it ended: then it is replaced. Kubernetes 1.20 has no stable CronJob (batch/v1
from 1.21), so the schedule is asked again on an interval: by each node's DaemonSet pod for its own Node
(deploy/kubernetes/30-daemonset.yaml's SCHEDULE), or from the admin node.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..kubernetes.api import GPU_RESOURCE
from ..kubernetes.node_rule import EFFECT, TAINT_KEY
from .jobs import job_name

PRIORITY_CLASS = "gpucheck-active"  # deploy/kubernetes/20-priorityclass.yaml: below every user pod
COMPONENT = {"app.kubernetes.io/name": "gpucheck", "app.kubernetes.io/component": "scheduled-check"}
KIND_LABEL = "gpucheck/scheduled"
NODE_ANNOTATION = "gpucheck/node"  # a Node's name need not be a valid label value
CONTAINER = "gpucheck"  # the DaemonSet's container the Job's pod is made from
BACKOFF_LIMIT = 6  # a preempted pod may count as failed (it exits 3): the Job still starts it again
GRACE_S = 30  # time to ask how the pod was stopped and keep the report


def job_manifest(template: dict[str, Any], kind: str, node: str, node_args: list[str], gpus: int,
                 namespace: str, gpucheck: str = "gpucheck") -> dict[str, Any]:
    """The Job of `node`'s scheduled `kind` check, its pod made from the DaemonSet's pod `template`
    (spec.template)."""
    pod = copy.deepcopy(template.get("spec") or {})
    containers = pod.get("containers") or []
    container = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else None)
    if container is None:
        raise ValueError("the DaemonSet's pod has no container to run the check in")
    container.pop("args", None)
    container["command"] = [gpucheck, "node", "--kubernetes", "--scheduled", kind, *node_args]
    own = {"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    env = [e for e in container.get("env") or [] if e.get("name") not in (*own, "INTERVAL_S", "SCHEDULE")]
    container["env"] = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in own.items()] + env
    # the DaemonSet's limits are a passive run's (512 MiB would end a burn-in): the Job holds the GPUs, nothing else
    container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}  # a quantity
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        container.pop(probe, None)
    pod.update(containers=[container], restartPolicy="Never", priorityClassName=PRIORITY_CLASS,
               terminationGracePeriodSeconds=GRACE_S,
               # gpucheck's own taint tolerated (only an active check's pass takes an active check's taint back);
               # an admin's cordon or taint keeps the check away, as it keeps a user's pod
               tolerations=[{"key": TAINT_KEY, "operator": "Exists", "effect": EFFECT}],
               # the Node by its name, as the DaemonSet controller binds its pods (a hostname label may differ)
               affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                   {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}})
    for key in ("nodeSelector", "nodeName"):
        pod.pop(key, None)
    labels = {**COMPONENT, KIND_LABEL: kind}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name(kind, node), "namespace": namespace, "labels": labels,
                         "annotations": {NODE_ANNOTATION: node}},
            "spec": {"backoffLimit": BACKOFF_LIMIT, "template": {"metadata": {"labels": labels}, "spec": pod}}}


def gpus_of(node: dict[str, Any]) -> int:
    """The GPUs the Node offers (NVIDIA's device plugin advertises them as allocatable nvidia.com/gpu)."""
    try:
        return int((node.get("status", {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
    except (TypeError, ValueError):
        return 0


def ended_at(job: dict[str, Any]) -> dt.datetime | None:
    """When the Job completed or failed for good (its condition Complete or Failed), or None while it lives."""
    end = _end(job)
    return end[1] if end else None


def _end(job: dict[str, Any]) -> tuple[str, dt.datetime] | None:
    """(Complete or Failed, when) of a Job that ended, or None."""
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            when = condition.get("lastTransitionTime") or job["status"].get("completionTime")
            return condition["type"], _time(when) if when else dt.datetime.now(dt.timezone.utc)
    return None


@dataclass(frozen=True)
class Decision:
    verb: str  # create, replace (delete the ended Job, then create), keep
    why: str


def decide(job: dict[str, Any] | None, every_s: int, now: dt.datetime) -> Decision:
    if job is None:
        return Decision("create", "none yet")
    end = _end(job)
    if end is None:
        return Decision("keep", "waiting or running (a user pod preempts it)")
    how, ended = {"Complete": "completed", "Failed": "failed"}[end[0]], end[1]
    due = ended + dt.timedelta(seconds=every_s)
    if now >= due:
        return Decision("replace", f"the last one {how} {_stamp(ended)}")
    return Decision("keep", f"the last one {how} {_stamp(ended)}; the next is due {_stamp(due)}")


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
