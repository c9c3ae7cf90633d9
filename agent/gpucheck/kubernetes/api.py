"""gpucheck's conversation with the Kubernetes API: read this node's Node, write what node_rule decided.

Through the official client (the `kubernetes` package: its kubeconfig and in-cluster configuration, its transport),
without its models: the Node is read and patched as JSON, so a field an older or newer API server has or lacks is
never a model error. Only core/v1: the Node, its status subresource and the list of the pods on it, stable
from 1.20 to today's releases.

Its rights are deploy/kubernetes/10-rbac.yaml's and no more: get, list and patch nodes, patch nodes/status, list
pods (a repair waits for the pods holding its node's GPUs). An
automatic path's taint is first put to the circuit breaker (breaker.py: the Nodes listed, gpucheck's recent taints
ordered by their annotation), and asked again once made, as drain_rule.tell does for Slurm. Labels and the taint go
in one merge patch carrying the resourceVersion it was decided on (a change made meanwhile, an admin's
taint say, is a conflict: read again and decide again, never overwritten); the condition in a strategic merge patch
of the status (merged by type: the kubelet's own conditions stay).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from typing import Any

from .. import breaker
from ..config import BreakerSettings
from . import node_rule

TIMEOUT_S = 10.0  # per request
TRIES = 5  # reads and decisions, when a write meets a change made meanwhile
GPU_RESOURCE = "nvidia.com/gpu"  # what NVIDIA's device plugin advertises and a pod requests


class KubernetesError(Exception):
    """The API could not be asked or refused. str(e) is one line."""


class Conflict(KubernetesError):
    """The Node changed since it was read."""


class NotFound(KubernetesError):
    """The object asked for does not exist (404)."""


class Everywhere(KubernetesError):
    """A refusal that every Node would meet: the API server does not answer, or refuses the credentials or the
    rights."""


def this_node(name: str | None = None) -> str:
    """The Node's name: given, or the pod's spec.nodeName (NODE_NAME, deploy/kubernetes), or the host's name as the
    kubelet registers it by default."""
    return name or os.environ.get("NODE_NAME") or socket.gethostname().lower()


def connect(kubeconfig: str | None = None) -> Any:
    """A CoreV1Api: from `kubeconfig`, else in a pod from its service account, else $KUBECONFIG or ~/.kube/config."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise KubernetesError("the Kubernetes client is not installed here: pip install 'gpucheck[kubernetes]' "
                              "(the `kubernetes` package)") from None
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
    except Exception as exc:  # ConfigException, a file that cannot be read or parsed: the client raises all kinds
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubernetesError(f"no Kubernetes configuration from {where}: {_one_line(exc)} (give --kubeconfig, set "
                              "KUBECONFIG, or run in a pod)") from None
    return client.CoreV1Api()


def read_node(api: Any, name: str) -> dict[str, Any]:
    return call(f"read Node {name}", api.read_node, name)


def gpu_pods(api: Any, name: str) -> list[str]:
    """The pods on Node `name` that hold GPUs (`nvidia.com/gpu` requested or limited) and have not ended, as
    namespace/name: the work a repair waits for, as it waits for a Slurm node's jobs."""
    listed = call(f"list the pods on Node {name}", api.list_pod_for_all_namespaces,
                  field_selector=f"spec.nodeName={name}").get("items") or []
    held = []
    for pod in listed:
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        spec = pod.get("spec", {})
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            resources = container.get("resources") or {}
            if GPU_RESOURCE in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}:
                held.append(f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}")
                break
    return held


def tell(path: str, exit_code: int, findings: list[str], node: str | None = None, kubeconfig: str | None = None,
         active_passed: bool = False, held_by: BreakerSettings | None = None) -> node_rule.Change:
    """What `path`'s run did to this node's Node (or `node`'s): decided by node_rule, an automatic path's taint put
    to the breaker (`held_by`, node.yaml's), written. Raises KubernetesError."""
    return tell_node(connect(kubeconfig), this_node(node), path, exit_code, findings, active_passed, held_by)


def tell_node(api: Any, name: str, path: str, exit_code: int, findings: list[str], active_passed: bool = False,
              held_by: BreakerSettings | None = None) -> node_rule.Change:
    """tell() through a client already connected, for Node `name` (gpucheck cluster --drain: one client, every
    node)."""
    held_by = held_by if path in breaker.AUTOMATIC_PATHS else None  # `cluster --drain` has a person reading it
    change = _decided(api, name, lambda current: node_rule.decide(current, path, exit_code, findings, active_passed),
                      held_by)
    if change.verb != "drain" or held_by is None:
        return change
    stamp = dt.datetime.fromisoformat(str(change.annotations[node_rule.TAINTED_AT]))
    if change.holder == "nobody" and (why := breaker.second_look(
            stamp, lambda: _held(api, held_by, name), lambda: _decided(api, name, node_rule.taken_back),
            lambda: dt.datetime.now(dt.timezone.utc))):
        return change.held(f"{why} (its taint taken back)")
    return change


def _decided(api: Any, name: str, decide: Any, held_by: BreakerSettings | None = None) -> node_rule.Change:
    """Read the Node, decide, write; again from the read when the Node changed meanwhile."""
    for _ in range(TRIES):
        current = read_node(api, name)
        change = decide(current)
        if change.verb == "drain" and held_by is not None and (why := _held(api, held_by, name)):
            change = change.held(why)
        try:
            write(api, change, current)
        except Conflict:
            continue
        return change
    raise KubernetesError(f"Node {name} kept changing while gpucheck wrote to it ({TRIES} tries): nothing written")


def _held(api: Any, settings: BreakerSettings, name: str) -> str | None:
    nodes = call("list Nodes", api.list_node).get("items") or []
    stamps = {node["metadata"]["name"]: node_rule.tainted_at(node) for node in nodes}
    return breaker.held(settings, stamps, name, dt.datetime.now(dt.timezone.utc))


def write(api: Any, change: node_rule.Change, current: dict[str, Any]) -> None:
    name = change.node
    if change.labels or change.taints is not None:
        body: dict[str, Any] = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"],
                                             "labels": change.labels, "annotations": change.annotations}}
        if change.taints is not None:
            body["spec"] = {"taints": change.taints}
        call(f"patch Node {name}", api.patch_node, name, body, _content_type="application/merge-patch+json")
    if change.condition is not None:
        condition = node_rule.condition_with_times(change, current, dt.datetime.now(dt.timezone.utc))
        call(f"patch Node {name}'s status", api.patch_node_status, name, {"status": {"conditions": [condition]}},
              _content_type="application/strategic-merge-patch+json")


def call(what: str, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = method(*args, _preload_content=False, _request_timeout=TIMEOUT_S, **kwargs)
        return json.loads(response.data or b"{}")
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict(f"cannot {what}: it changed meanwhile") from None
        kind = Everywhere if exc.status in (401, 403) else NotFound if exc.status == 404 else KubernetesError
        raise kind(f"cannot {what}: {_refusal(exc)}") from None
    except json.JSONDecodeError as exc:  # something answered, not an API server (a proxy's page, another service)
        raise Everywhere(f"cannot {what}: the answer is not the API server's (not JSON: {_one_line(exc)})") from None
    except (HTTPError, OSError) as exc:
        raise Everywhere(f"cannot {what}: the API server did not answer ({_one_line(exc)})") from None
    except ValueError as exc:  # the client refused the call itself, before asking (a missing argument)
        raise KubernetesError(f"cannot {what}: {_one_line(exc)}") from None


def _refusal(exc: Any) -> str:
    try:
        message = json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        message = exc.reason
    hint = {401: " (the credentials were refused)",
            403: " (the account's rights: gpucheck's own are deploy/kubernetes/10-rbac.yaml's)",
            404: " (give the Node's name with --kubernetes-node, or NODE_NAME from the pod's spec.nodeName)"}
    return f"{exc.status} {_one_line(message)}{hint.get(exc.status, '')}"


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
