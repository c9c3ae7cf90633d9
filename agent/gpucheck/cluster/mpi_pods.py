"""--launcher kubernetes's MPI jobs, the way Kubeflow's MPI Operator (v2) runs them: a worker pod on every node of
the job but the first, each running sshd on a port of the job's own; a launcher pod on the first node running
mpirun, which reaches the workers over SSH with a key made for this job alone (a Secret, deleted with the pods), as
mpirun reaches the nodes from the first one over SSH (launchers/ssh.py). Every pod is made from the site's job
template (--job-template: its training image, with OpenMPI and sshd), bound to its Node by name and on the Node's
own network (hostNetwork: the ranks' traffic and mpirun's daemons go node to node, as on bare metal). The workload
files the job runs (Launcher.distribute's) travel in the same Secret, mounted where the SSH path copies them
(jobs.REMOTE_DIR). The job's output is the launcher's log, its exit code the launcher container's. A probe (a shell
command in the job's image on one node, `run_pod`) is one such pod alone. Core/v1 Pod and Secret only."""

from __future__ import annotations

import base64
import contextlib
import secrets
import shlex
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..kubernetes import api
from ..workloads import launch
from . import pods
from .jobs import REMOTE_DIR
from .layout import Layout
from .ssh.result import Remote

KEY_DIR = "/etc/gpucheck-mpi"  # the job's key pair in every pod (the Secret)
PORTS = (20000, 30000)  # each job's sshd listens on one of these, on the Node's own network
# ssh as mpirun starts it in the launcher: the workers' sshd may still be starting (ConnectionAttempts: one a second),
# and their host keys are new for every job.
SSH_OPTIONS = ("-o BatchMode=yes -o ConnectTimeout=5 -o ConnectionAttempts=30 -o StrictHostKeyChecking=no "
               "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
KEY, AUTHORIZED = "id", "authorized_keys"  # the Secret's keys for the pair (a workload file is never named so)
LABELS = {"app.kubernetes.io/name": "gpucheck", "app.kubernetes.io/component": "cluster-job"}


class NoKey(Exception):
    """No key pair for the job (one line)."""


def sshd_command(port: int) -> list[str]:
    """A worker: sshd in the foreground, nothing of the image's own configuration read, the job's key its only
    way in (root: mpirun's daemons run as the launcher's user)."""
    return ["/bin/sh", "-c", "mkdir -p -m 0755 /run/sshd /etc/ssh && ssh-keygen -A >/dev/null && exec /usr/sbin/sshd "
            f"-D -e -f /dev/null -p {port} -o UsePAM=no -o StrictModes=no -o PermitRootLogin=prohibit-password "
            f"-o AuthorizedKeysFile={KEY_DIR}/authorized_keys"]


def launcher_command(lay: Layout, addresses: Mapping[str, str], program: Sequence[str], env: Mapping[str, str],
                     port: int) -> list[str]:
    """mpirun from the first node's pod: every rank with `env`, the workers reached on the job's port."""
    rsh = f"-p {port} -i {KEY_DIR}/id {SSH_OPTIONS}"
    return launch.mpirun_command(list(program), [(addresses[node], k) for node, k in lay.slots], as_root=True,
                                 oversubscribe=True, env_names=list(env),
                                 extra=("--tag-output", "--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args", rsh,
                                        "--mca", "plm_rsh_no_tree_spawn", "1"))


def key_pair() -> tuple[bytes, bytes]:
    """(private, public) OpenSSH ed25519 keys made for one job, with the ssh-keygen of this machine."""
    with tempfile.TemporaryDirectory(prefix="gpucheck-mpi-") as scratch:
        key = Path(scratch) / "id"
        try:
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpucheck-mpi", "-f", str(key)],
                           check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NoKey(f"cannot make the MPI job's SSH key with ssh-keygen: {exc}") from None
        return key.read_bytes(), key.with_suffix(".pub").read_bytes()


def secret(name: str, namespace: str, private: bytes, public: bytes,
           files: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """The job's key pair and its workload files (by name: a file is read at REMOTE_DIR/NAME)."""
    data = {**(files or {}), KEY: private, AUTHORIZED: public}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
            "type": "Opaque", "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def pod(base: dict[str, Any], name: str, node: str, command: list[str], env: Mapping[str, str], key: str | None,
        deadline_s: float, files: Sequence[str] = ()) -> dict[str, Any]:
    """One of the job's pods: the template bound to `node` (pods.bound), on the Node's network, with `env`, and from
    the job's Secret `key` (None: a probe's pod, which has none) the key pair (owner-read-only) and the workload
    `files` at REMOTE_DIR."""
    made = pods.bound(base, name, node, command, deadline_s)
    made["metadata"]["labels"] = {**made["metadata"].get("labels", {}), **LABELS}
    spec = made["spec"]
    spec["hostNetwork"] = True
    container = spec["containers"][0]
    container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    if key is None:
        return made
    volumes = {"gpucheck-mpi-key": (KEY_DIR, [(KEY, 0o400), (AUTHORIZED, 0o400)]),
               **({"gpucheck-job-files": (REMOTE_DIR, [(f, 0o444) for f in files])} if files else {})}
    container["volumeMounts"] = [*container.get("volumeMounts", []), *(
        {"name": volume, "mountPath": where, "readOnly": True} for volume, (where, _) in volumes.items())]
    spec["volumes"] = [*spec.get("volumes", []), *(
        {"name": volume, "secret": {"secretName": key, "items": [{"key": k, "path": k, "mode": mode}
                                                                 for k, mode in items]}}
        for volume, (_, items) in volumes.items())]
    return made


def mpi_job(client: Any, base: dict[str, Any], lay: Layout, addresses: Mapping[str, str], program: Sequence[str],
            env: Mapping[str, str], timeout: float, files: Mapping[str, bytes] | None = None) -> Remote:
    """The job start to end, its pods and Secret deleted after it: never raises."""
    began = time.monotonic()
    first = lay.slots[0][0]
    job = f"gpucheck-mpi-{secrets.token_hex(3)}"
    namespace = base.get("metadata", {}).get("namespace") or pods.NAMESPACE
    port = PORTS[0] + secrets.randbelow(PORTS[1] - PORTS[0])
    argv = launcher_command(lay, addresses, program, env, port)
    shown = shlex.join(argv)
    deadline_s = timeout + pods.SCHEDULE_GRACE_S  # the workers outlive the launcher, limited to `timeout` itself
    files = files or {}
    made: list[str] = []
    try:
        private, public = key_pair()
        api.call(f"create Secret {namespace}/{job}", client.create_namespaced_secret, namespace,
                 secret(job, namespace, private, public, files))
        for node, _ in lay.slots[1:]:
            made.append(f"{job}-worker-{pods.dns_name(node)}")
            api.call(f"create Pod {namespace}/{made[-1]}", client.create_namespaced_pod, namespace,
                     pod(base, made[-1], node, sshd_command(port), {}, job, deadline_s, list(files)))
        made.append(f"{job}-launcher")
        api.call(f"create Pod {namespace}/{made[-1]}", client.create_namespaced_pod, namespace,
                 pod(base, made[-1], first, argv, env, job, timeout, list(files)))
        return _ended(client, first, made[-1], namespace, shown, began, deadline_s, "mpirun", timeout)
    except (api.KubernetesError, NoKey) as exc:
        return Remote(first, shown, error=str(exc), kind="kubernetes", wall_s=time.monotonic() - began)
    finally:
        _delete(client, namespace, made, job)


def run_pod(client: Any, base: dict[str, Any], node: str, command: str, timeout: float) -> Remote:
    """`command` (a shell command) in a pod of the job template on `node`, as a stage asks the nodes before a job
    (which all_reduce_perf there, which frameworks): start to end, the pod deleted after it; never raises."""
    began = time.monotonic()
    name = f"gpucheck-probe-{pods.dns_name(node)}-{secrets.token_hex(3)}"
    namespace = base.get("metadata", {}).get("namespace") or pods.NAMESPACE
    made: list[str] = []
    try:
        made.append(name)
        api.call(f"create Pod {namespace}/{name}", client.create_namespaced_pod, namespace,
                 pod(base, name, node, ["/bin/sh", "-c", command], {}, None, timeout))
        return _ended(client, node, name, namespace, command, began, timeout + pods.SCHEDULE_GRACE_S, "the probe",
                      timeout)
    except api.KubernetesError as exc:
        return Remote(node, command, error=str(exc), kind="kubernetes", wall_s=time.monotonic() - began)
    finally:
        _delete(client, namespace, made)


def _ended(client: Any, node: str, name: str, namespace: str, shown: str, began: float, deadline_s: float,
           what: str, timeout: float) -> Remote:
    """Pod `name`'s end as a Remote: its log, its container's exit code, or why it has none."""
    status, over = pods.ended(client, name, namespace, began + deadline_s)
    log = pods.read_log(client, name, namespace)
    wall_s = time.monotonic() - began
    if over is None:
        return Remote(node, shown, log, error=f"timed out: the pod {name} did not end within {deadline_s:g} s "
                      f"({pods.conditions(status)})", kind="timeout", wall_s=wall_s)
    if over.get("exitCode") is not None:
        return Remote(node, shown, log, exit=int(over["exitCode"]), wall_s=wall_s)
    if status.get("reason") == "DeadlineExceeded":  # ended by the kubelet after `timeout`
        return Remote(node, shown, log, error=f"timed out: {what} did not end within {timeout:g} s", kind="timeout",
                      wall_s=wall_s)
    return Remote(node, shown, log, error=f"the pod {name} ended without an exit code ({pods.conditions(status)})",
                  kind="kubernetes", wall_s=wall_s)


def _delete(client: Any, namespace: str, names: list[str], secret_name: str = "") -> None:
    for name in names:
        with contextlib.suppress(api.KubernetesError):  # one left behind ends by its activeDeadlineSeconds
            api.call(f"delete Pod {namespace}/{name}", client.delete_namespaced_pod, name, namespace)
    if secret_name:
        with contextlib.suppress(api.KubernetesError):
            api.call(f"delete Secret {namespace}/{secret_name}", client.delete_namespaced_secret, secret_name,
                     namespace)
