"""The lab's stand-in for NVIDIA's container toolkit, and its image in place of a site's: a gpucheck pod on a lab
node gets the lab's gpucheck image (agent_image.py) and the host's simulated GPUs, mounted from the host as the
toolkit mounts a real driver's libraries into a container: the fake NVML library where the driver's would be, the
host's scenario and reset layer, the fake CuPy and the environment that names it (lab/compute.py), the simulated
PCI bus (GPUCHECK_SYSFS_ROOT). The same image stands in for a site's training image (deploy/kubernetes/jobs/
mpi.yaml's), told to keep OpenMPI's traffic on the lab's subnet as the mpi role tells the lab's hosts.
deploy/kubernetes's manifests are applied through `for_lab`, never edited."""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlsplit

from lab import compute, config, gpus
from lab.kubernetes import agent_image

SITE_IMAGES = ("gpucheck:latest", "training:latest")  # what deploy/kubernetes names
MOUNTS = {"fake-nvml": (config.LAB_NVML_PATH, config.NVML_PATH, "File"),
          "fake-nvml-scenario": (config.FAKENVML_DIR, config.FAKENVML_DIR, "Directory"),
          "fake-nvml-reset": (gpus.RESET_DIR, gpus.RESET_DIR, "Directory"),
          "fake-cupy": (compute.HOST_DIR, compute.HOST_DIR, "Directory")}


def for_lab(manifest: dict[str, Any], server: str, gpu_count: int | None = None,
            image: str = agent_image.IMAGE, shared: tuple[str, ...] = ()) -> dict[str, Any]:
    """A copy of a Job, DaemonSet or Pod manifest whose gpucheck containers run in the lab, in `image` (the lab's
    own, or one a node's containerd was given), and request `gpu_count` GPUs where they request any. The lab has no
    kube-proxy to carry the `kubernetes` Service's address: the pod uses its host's network and reaches the apiserver
    at `server` (its URL), as a cluster without kube-proxy tells its node agents. `shared`: directories the hosts
    have (`up --share`), mounted read-only at their own path, where a training image would hold its frameworks."""
    made = copy.deepcopy(manifest)
    spec = made["spec"]["template"]["spec"] if "template" in made.get("spec", {}) else made["spec"]
    spec["hostNetwork"] = True
    address = urlsplit(server)
    env = [{"name": name, "value": value}
           for name, value in {**compute.environment(), config.SYSFS_ENV: config.FAKE_SYSFS_DIR,
                               "KUBERNETES_SERVICE_HOST": address.hostname or "",
                               "KUBERNETES_SERVICE_PORT": str(address.port),
                               # the hosts' CNI bridge is no way between them (mpirun hands these on)
                               "OMPI_MCA_btl_tcp_if_include": config.DEFAULT_SUBNET,
                               "OMPI_MCA_oob_tcp_if_include": config.DEFAULT_SUBNET}.items()]
    mounts = {**MOUNTS, **{f"shared-{i}": (path, path, "Directory") for i, path in enumerate(shared)}}
    for container in spec["containers"]:
        if container.get("image") not in SITE_IMAGES:
            continue
        container["image"], container["imagePullPolicy"] = image, "Never"
        container["env"] = [*container.get("env", []), *env]
        container["volumeMounts"] = [*container.get("volumeMounts", []), *(
            {"name": name, "mountPath": inside, "readOnly": name != "fake-nvml-reset"}
            for name, (_, inside, _) in mounts.items())]
        limits = container.get("resources", {}).get("limits", {})
        if gpu_count is not None and "nvidia.com/gpu" in limits:
            limits["nvidia.com/gpu"] = gpu_count
    spec["volumes"] = [*spec.get("volumes", []), *(
        {"name": name, "hostPath": {"path": host, "type": kind}} for name, (host, _, kind) in mounts.items())]
    return made
