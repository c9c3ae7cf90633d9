"""--launcher kubernetes's MPI jobs, the way Kubeflow's MPI Operator (v2) runs them: a worker pod on every node of
the job but the first, each running sshd on a port of the job's own; a launcher pod on the first node running
mpirun, which reaches the workers over SSH with a key made for this job alone (a Secret, deleted with the pods), as
mpirun reaches the nodes from the first one over SSH (launchers/ssh.py). Every pod is made from the site's job
template (--job-template: its training image, with OpenMPI and sshd), bound to its Node by name and on the Node's
own network (hostNetwork: the ranks' traffic and mpirun's daemons go node to node, as on bare metal). The job's
output is the launcher's log, its exit code the launcher container's. Core/v1 Pod and Secret only."""

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
from .layout import Layout
from .ssh.result import Remote

KEY_DIR = "/etc/gpucheck-mpi"  # the job's key pair in every pod (the Secret)
PORTS = (20000, 30000)  # each job's sshd listens on one of these, on the Node's own network
# ssh as mpirun starts it in the launcher: the workers' sshd may still be starting (ConnectionAttempts: one a second),
# and their host keys are new for every job.
SSH_OPTIONS = ("-o BatchMode=yes -o ConnectTimeout=5 -o ConnectionAttempts=30 -o StrictHostKeyChecking=no "
               "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
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


def secret(name: str, namespace: str, private: bytes, public: bytes) -> dict[str, Any]:
    data = {"id": private, "authorized_keys": public}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
            "type": "Opaque", "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


def pod(base: dict[str, Any], name: str, node: str, command: list[str], env: Mapping[str, str], key: str,
        deadline_s: float) -> dict[str, Any]:
    """One of the job's pods: the template bound to `node` (pods.bound), on the Node's network, with `env` and the
    job's key."""
    made = pods.bound(base, name, node, command, deadline_s)
    made["metadata"]["labels"] = {**made["metadata"].get("labels", {}), **LABELS}
    spec = made["spec"]
    spec["hostNetwork"] = True
    container = spec["containers"][0]
    container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": "gpucheck-mpi-key", "mountPath": KEY_DIR, "readOnly": True}]
    spec["volumes"] = [*spec.get("volumes", []),
                       {"name": "gpucheck-mpi-key", "secret": {"secretName": key, "defaultMode": 0o400}}]
    return made


def mpi_job(client: Any, base: dict[str, Any], lay: Layout, addresses: Mapping[str, str], program: Sequence[str],
            env: Mapping[str, str], timeout: float) -> Remote:
    """The job start to end, its pods and Secret deleted after it: never raises."""
    began = time.monotonic()
    first = lay.slots[0][0]
    job = f"gpucheck-mpi-{secrets.token_hex(3)}"
    namespace = base.get("metadata", {}).get("namespace") or pods.NAMESPACE
    port = PORTS[0] + secrets.randbelow(PORTS[1] - PORTS[0])
    argv = launcher_command(lay, addresses, program, env, port)
    shown = shlex.join(argv)
    deadline_s = timeout + pods.SCHEDULE_GRACE_S  # the workers outlive the launcher, limited to `timeout` itself
    made: list[str] = []
    try:
        private, public = key_pair()
        api.call(f"create Secret {namespace}/{job}", client.create_namespaced_secret, namespace,
                 secret(job, namespace, private, public))
        for node, _ in lay.slots[1:]:
            made.append(f"{job}-worker-{pods.dns_name(node)}")
            api.call(f"create Pod {namespace}/{made[-1]}", client.create_namespaced_pod, namespace,
                     pod(base, made[-1], node, sshd_command(port), {}, job, deadline_s))
        launcher = f"{job}-launcher"
        made.append(launcher)
        api.call(f"create Pod {namespace}/{launcher}", client.create_namespaced_pod, namespace,
                 pod(base, launcher, first, argv, env, job, timeout))
        status, over = pods.ended(client, launcher, namespace, began + deadline_s)
        log = pods.read_log(client, launcher, namespace)
        wall_s = time.monotonic() - began
        if over is None:
            return Remote(first, shown, log, error=f"timed out: the launcher pod {launcher} did not end within "
                          f"{deadline_s:g} s ({pods.conditions(status)})", kind="timeout", wall_s=wall_s)
        if over.get("exitCode") is not None:
            return Remote(first, shown, log, exit=int(over["exitCode"]), wall_s=wall_s)
        if status.get("reason") == "DeadlineExceeded":  # ended by the kubelet after `timeout`
            return Remote(first, shown, log, error=f"timed out: mpirun did not end within {timeout:g} s",
                          kind="timeout", wall_s=wall_s)
        return Remote(first, shown, log, error=f"the launcher pod {launcher} ended without an exit code "
                      f"({pods.conditions(status)})", kind="kubernetes", wall_s=wall_s)
    except (api.KubernetesError, NoKey) as exc:
        return Remote(first, shown, error=str(exc), kind="kubernetes", wall_s=time.monotonic() - began)
    finally:
        for name in made:
            with contextlib.suppress(api.KubernetesError):  # one left behind ends by its activeDeadlineSeconds
                api.call(f"delete Pod {namespace}/{name}", client.delete_namespaced_pod, name, namespace)
        with contextlib.suppress(api.KubernetesError):
            api.call(f"delete Secret {namespace}/{job}", client.delete_namespaced_secret, job, namespace)

