"""--launcher kubernetes's node checks: on each host's Node, a pod made from the site's pod template (its image, its
NVIDIA runtime, its mounts: deploy/kubernetes/jobs/check.yaml), bound to the Node by name as a DaemonSet's pods are
(so a cordon or gpucheck's own NoSchedule taint does not keep the check away), running `gpucheck node --format json`;
its report read from the pod's log, its exit code from the container's state. Each pod is deleted once read. Core/v1
Pod and its log only, stable from 1.20 to today's releases."""

from __future__ import annotations

import contextlib
import copy
import re
import secrets
import time
from pathlib import Path
from typing import Any

import yaml

from ..kubernetes import api
from ..model import Status
from .context import NodeOutcome, Options
from .fanout import TAIL_CHARS, agent_argv, interpret
from .ssh.result import tail

SCHEDULE_GRACE_S = 120.0  # beyond --host-timeout: the pod bound, its image there, its container started
POLL_S = 0.5
NAMESPACE = "gpucheck"  # deploy/kubernetes/10-rbac.yaml's, where a template names none


class TemplateError(Exception):
    """The pod template cannot be used (one line)."""


WANTED = {"--pod-template": "the Pod a node's checks run in, with your gpucheck image and runtime "
                            "(deploy/kubernetes/jobs/check.yaml)",
          "--job-template": "the Pod the MPI, all-reduce, smoke and training jobs' launcher and workers run in, with "
                            "your training image, OpenMPI and sshd (deploy/kubernetes/jobs/mpi.yaml)"}


def template(path: str | None, option: str = "--pod-template") -> dict[str, Any]:
    """The Pod read from `option`'s file: TemplateError (one line) if it is not one."""
    if not path:
        raise TemplateError(f"give {option} FILE: {WANTED[option]}")
    try:
        found = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TemplateError(f"{option} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    containers = (found or {}).get("spec", {}).get("containers") if isinstance(found, dict) else None
    if not isinstance(found, dict) or found.get("kind") != "Pod" or not containers:
        raise TemplateError(f"{option} {path}: not a Pod with a container (kind: Pod, spec.containers)")
    return found


def bound(base: dict[str, Any], name: str, node: str, command: list[str], deadline_s: float) -> dict[str, Any]:
    """A copy of the template named `name` (in its namespace, else gpucheck's), bound to Node `node` by name (as a
    DaemonSet's pods are: a cordon or a NoSchedule taint does not keep it away), run once, its first container
    running `command`, ended by the kubelet after `deadline_s`."""
    pod = copy.deepcopy(base)
    meta = pod.setdefault("metadata", {})
    meta["name"] = name
    meta.setdefault("namespace", NAMESPACE)
    spec = pod["spec"]
    spec["nodeName"], spec["restartPolicy"] = node, "Never"
    spec["activeDeadlineSeconds"] = int(deadline_s)
    spec["containers"][0]["command"] = command
    spec["containers"][0].pop("args", None)
    return pod


def pod_for(base: dict[str, Any], node: str, options: Options) -> dict[str, Any]:
    # the same command as over SSH; the kubelet ends a hung agent
    return bound(base, f"gpucheck-check-{dns_name(node)}-{secrets.token_hex(3)}", node, agent_argv(options),
                 options.host_timeout)


def dns_name(node: str) -> str:
    """A host's name as a part of a pod's name (lower case, letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9-]", "-", node.lower())[:40].strip("-")


def check(client: Any, base: dict[str, Any], node: str, options: Options) -> NodeOutcome:
    """One node, start to end: never raises."""
    began = time.monotonic()
    pod = pod_for(base, node, options)
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    try:
        api.call(f"create Pod {namespace}/{name}", client.create_namespaced_pod, namespace, pod)
        return _outcome(client, node, name, namespace, options, began)
    except api.KubernetesError as exc:
        return NodeOutcome(node, Status.ERROR, str(exc), "kubernetes", time.monotonic() - began, via="kubernetes")
    finally:  # (a pod never made: a 404, passed over)
        with contextlib.suppress(api.KubernetesError):  # one left behind ends by its activeDeadlineSeconds
            api.call(f"delete Pod {namespace}/{name}", client.delete_namespaced_pod, name, namespace)


def ended(client: Any, name: str, namespace: str, deadline: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Wait for the pod's end, up to `deadline` (monotonic): (its status, its first container's `terminated` state
    or None when it had not ended by then)."""
    while True:
        found = api.call(f"read Pod {namespace}/{name}", client.read_namespaced_pod, name, namespace)
        status = found.get("status", {})
        over = [s["state"]["terminated"] for s in status.get("containerStatuses") or []
                if s.get("state", {}).get("terminated")]
        if status.get("phase") in ("Succeeded", "Failed") or over:
            return status, (over[0] if over else {})
        if time.monotonic() > deadline:
            return status, None
        time.sleep(POLL_S)


def conditions(status: dict[str, Any]) -> str:
    """A pod's phase and conditions in a few words: why it is not done."""
    said = "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}".strip()
                     for c in status.get("conditions") or [])
    return f"{status.get('phase', 'not placed')}: {said or 'no condition'}"


def _outcome(client: Any, node: str, name: str, namespace: str, options: Options, began: float) -> NodeOutcome:
    status, over = ended(client, name, namespace, began + options.host_timeout + SCHEDULE_GRACE_S)
    if over is None:
        return NodeOutcome(node, Status.FAIL, f"timed out: no report within {options.host_timeout:g} s "
                           f"(pod {name} {conditions(status)})", "timeout", time.monotonic() - began,
                           via="kubernetes")
    log = read_log(client, name, namespace)
    code = over.get("exitCode")
    if code is None and status.get("reason") == "DeadlineExceeded":
        return NodeOutcome(node, Status.FAIL, f"timed out: no report within {options.host_timeout:g} s (hung "
                           "agent?)", "timeout", time.monotonic() - began, evidence=tail(log, TAIL_CHARS),
                           via="kubernetes")
    outcome = interpret(node, log, "", code, time.monotonic() - began, options.host_timeout)
    outcome.via = "kubernetes"
    return outcome


def read_log(client: Any, name: str, namespace: str) -> str:
    """The container's output: stdout and stderr as the kubelet kept them, interleaved (the report ends it)."""
    from kubernetes.client.exceptions import ApiException

    try:
        answer = client.read_namespaced_pod_log(name, namespace, _preload_content=False,
                                                _request_timeout=api.TIMEOUT_S)
        return answer.data.decode(errors="replace")
    except (ApiException, OSError) as exc:
        return f"the pod's log could not be read: {exc}"
