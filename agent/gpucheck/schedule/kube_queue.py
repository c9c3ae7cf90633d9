"""`gpucheck schedule --kubernetes`: each GPU Node's scheduled checks as Jobs (kube_jobs.py), through the API with
the official client, read and written as JSON (as kubernetes/api.py does). Its rights are deploy/kubernetes/
10-rbac.yaml's Role gpucheck-schedule: get the DaemonSet, get, list, create and delete Jobs, in gpucheck's
namespace; and list Nodes (the ClusterRole's)."""

from __future__ import annotations

import datetime as dt
import functools
import shlex
from typing import Any

from ..kubernetes import api
from . import jobs, kube_jobs


class Queue:
    """The scheduled checks' Jobs in `namespace`, made from DaemonSet `daemonset`'s pod."""

    def __init__(self, kubeconfig: str | None, namespace: str, daemonset: str) -> None:
        self.core = api.connect(kubeconfig)  # says so in one line where the client is not installed
        from kubernetes import client

        self.batch = client.BatchV1Api(self.core.api_client)
        self.apps = client.AppsV1Api(self.core.api_client)
        self.namespace, self.daemonset = namespace, daemonset

    def gpu_nodes(self, names: list[str]) -> list[dict[str, Any]]:
        """The Nodes named, or every Node the DaemonSet's nodeSelector picks (its GPU nodes)."""
        if names:
            return [api.read_node(self.core, name) for name in names]
        selector = self.template.get("spec", {}).get("nodeSelector") or {}
        listed = api.call("list Nodes", self.core.list_node,
                          label_selector=",".join(f"{k}={v}" for k, v in selector.items()))
        return listed.get("items") or []

    @functools.cached_property
    def template(self) -> dict[str, Any]:
        """The DaemonSet's pod template, read once."""
        found = api.call(f"read DaemonSet {self.namespace}/{self.daemonset}", self.apps.read_namespaced_daemon_set,
                         self.daemonset, self.namespace)
        return found.get("spec", {}).get("template") or {}

    def scheduled(self) -> dict[str, dict[str, Any]]:
        """Every scheduled check's Job in the namespace, by name."""
        selector = ",".join(f"{k}={v}" for k, v in kube_jobs.COMPONENT.items())
        listed = api.call(f"list the Jobs in {self.namespace}", self.batch.list_namespaced_job, self.namespace,
                          label_selector=selector)
        return {job["metadata"]["name"]: job for job in listed.get("items") or []}

    def job(self, name: str) -> dict[str, Any] | None:
        try:
            return api.call(f"read Job {self.namespace}/{name}", self.batch.read_namespaced_job, name,
                            self.namespace)
        except api.NotFound:
            return None

    def create(self, manifest: dict[str, Any]) -> None:
        api.call(f"create Job {self.namespace}/{manifest['metadata']['name']}", self.batch.create_namespaced_job,
                 self.namespace, manifest)

    def delete(self, name: str) -> None:
        # its pods with it (Background: the Job goes at once, the garbage collector takes the pods)
        api.call(f"delete Job {self.namespace}/{name}", self.batch.delete_namespaced_job, name, self.namespace,
                 body={"propagationPolicy": "Background"})


def queue_due(settings: jobs.Settings, queue: Queue, names: list[str], dry_run: bool) -> int:
    """Each node and kind: a Job made where there is none, replaced where the last one ended EVERY ago, else kept;
    a line each. A node the API refuses is said and the others go on; 3 if any was refused, else 0."""
    nodes = queue.gpu_nodes(names)
    if not nodes:
        print(f"no GPU node to schedule: none matches DaemonSet {queue.namespace}/{queue.daemonset}'s nodeSelector")
        return 0
    # named nodes (a DaemonSet pod asks for its own, every round): their Jobs by name, not every Job listed
    present = queue.scheduled() if not names else {
        name: job for node in nodes for kind in settings.kinds()
        if (job := queue.job(name := jobs.job_name(kind, node["metadata"]["name"]))) is not None}
    now = dt.datetime.now(dt.timezone.utc)
    refused = 0
    for node in nodes:
        name = node["metadata"]["name"]
        gpus = kube_jobs.gpus_of(node)
        for kind in settings.kinds():
            job_name = jobs.job_name(kind, name)
            if not gpus:
                print(f"{job_name}: not scheduled: Node {name} offers no {api.GPU_RESOURCE} (is NVIDIA's device "
                      "plugin running there?)")
                continue
            decision = kube_jobs.decide(present.get(job_name), settings.every_s[kind], now)
            what = f"{shlex.join(settings.args[kind])}, every {settings.every_s[kind]} s, {gpus} GPUs"
            if decision.verb == "keep":
                print(f"{job_name}: kept: {decision.why}")
                continue
            if dry_run:
                print(f"{job_name}: would {decision.verb} ({decision.why}): {what}")
                continue
            try:
                if decision.verb == "replace":
                    queue.delete(job_name)
                queue.create(kube_jobs.job_manifest(queue.template, kind, name, settings.args[kind], gpus,
                                                    queue.namespace, settings.gpucheck))
            except api.Everywhere:
                raise
            except api.KubernetesError as exc:
                print(f"{job_name}: not {decision.verb}d: {exc}")
                refused += 1
                continue
            print(f"{job_name}: {'replaced' if decision.verb == 'replace' else 'created'} ({decision.why}): {what}")
    return 3 if refused else 0


def cancel_all(queue: Queue, dry_run: bool) -> int:
    present = queue.scheduled()
    for name in sorted(present):
        if not dry_run:
            queue.delete(name)
        print(f"{name}: {'would be ' if dry_run else ''}deleted")
    if not present:
        print(f"no scheduled check's Job in namespace {queue.namespace}")
    return 0
