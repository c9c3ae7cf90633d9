"""What makes a lab host a Kubernetes node: the node kit bound in read-only, containerd and the kubelet as systemd
units of the host, their configuration, and the kubeconfig of the node's own identity (system:node:NAME, judged by
the apiserver's Node authorizer). host.spec() merges parts() into the host's spec; hostinit.py writes the files.

A lab host is a systemd-nspawn container on a machine shared with other hosts, so four things differ from a real
node, each confined to the host (docs/kubernetes.md says why each is needed):
- the v1 cgroup controllers, which systemd-nspawn mounts read-only, are remounted writable in the host's mount
  namespace, and the pods' cgroups live under a root of the host's own (CGROUP_ROOT), never the machine's
  shared /kubepods (the hosts would share one tree, as they once shared one systemd tree);
- the kubelet reads the kernel settings it wants (vm.overcommit_memory=1, kernel.panic=10, ...) from files bound
  over /proc/sys: it would otherwise set them on the machine, whose kernel every host shares (and /proc/sys is
  read-only in a host);
- it opens /dev/kmsg for its OOM watcher, which a host has not: /dev/null is bound there (the host's kernel log is
  the lab's file, lab/kernel_log.py);
- these binds are made in the host's own mount namespace, not in one of the kubelet's: the volumes it mounts for a
  pod (its service account's token) must be seen by containerd and runc;
- containerd stores images with the native snapshotter (overlayfs cannot stack on the host's overlay root), clamps
  oom_score_adj (root here has no CAP_SYS_RESOURCE) and makes no session keyring (nspawn's seccomp refuses keyctl).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from lab.kubernetes import node_kit

KIT = "/opt/gpucheck-lab/kubernetes"  # the node kit, bound read-only
AGENT_IMAGE = "/opt/gpucheck-lab/images/gpucheck.tar"  # the lab's gpucheck image (agent_image.py), bound read-only
CONF = "/etc/gpucheck-lab/kubernetes"
UNITS = "/etc/systemd/system"
SOCKET = "/run/containerd/containerd.sock"
CAPABILITIES = ("CAP_NET_ADMIN",)  # the CNI bridge plugin makes a bridge and a veth per pod
GPU_LABEL = "nvidia.com/gpu.present"  # as NVIDIA's GPU Feature Discovery labels a GPU node
# The kernel settings the kubelet 1.20 makes sure of (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables)
SYSCTLS = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
           "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000"}
PREPARE, CONTAINERD, KUBELET = "gpucheck-lab-k8s-prepare", "gpucheck-lab-containerd", "gpucheck-lab-kubelet"


@dataclass(frozen=True)
class Join:
    """How a node reaches the control plane: the apiserver's URL, its CA (PEM) and the node's token."""
    server: str
    ca_pem: str
    token: str


def cgroup_root(host_cgroup: str) -> str:
    """The pods' cgroup root in every v1 controller, named after the host's own cgroup (lab/hostinit.py)."""
    return f"{host_cgroup}-pods"


def pod_subnet(address: str) -> str:
    return f"10.244.{address.rsplit('.', 1)[1]}.0/24"


def parts(name: str, address: str, host_cgroup: str, kit: Path, join: Join, agent_image: Path) -> dict:
    """The host spec's additions: files (path, content, mode), binds, links, capabilities, and the pods' cgroup
    root the host removes from the machine's controllers as it ends."""
    files = [(f"{CONF}/containerd.toml", containerd_toml(), 0o644),
             (f"{CONF}/kubelet.yaml", kubelet_yaml(address, cgroup_root(host_cgroup)), 0o644),
             (f"{CONF}/kubeconfig", kubeconfig(name, join), 0o600),
             ("/etc/cni/net.d/10-gpucheck-lab.conflist", conflist(address), 0o644),
             (f"{CONF}/prepare.sh", prepare_script(cgroup_root(host_cgroup)), 0o755),
             (f"{UNITS}/{PREPARE}.service", prepare_unit(), 0o644),
             (f"{UNITS}/{CONTAINERD}.service", containerd_unit(), 0o644),
             (f"{UNITS}/{KUBELET}.service", kubelet_unit(address), 0o644)]
    files += [(f"{CONF}/sysctl/{key.replace('/', '.')}", value + "\n", 0o444) for key, value in SYSCTLS.items()]
    return {"files": files,
            "binds": [{"source": str(kit), "target": KIT}, {"source": str(agent_image), "target": AGENT_IMAGE}],
            "links": [{"path": f"{UNITS}/multi-user.target.wants/{KUBELET}.service",
                       "target": f"{UNITS}/{KUBELET}.service"}],
            "capabilities": list(CAPABILITIES), "pod_cgroup": cgroup_root(host_cgroup)}


def containerd_toml() -> str:
    return f"""\
# gpucheck lab (lab/kubernetes/node_host.py): containerd for the kubelet, inside a systemd-nspawn host
version = 2
[grpc]
  address = "{SOCKET}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{node_kit.PAUSE_IMAGE}"
  # root has no CAP_SYS_RESOURCE here: runc cannot set the sandbox's -998 and dies; negative values are clamped
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"  # overlayfs cannot stack on the host's overlay root
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{KIT}/bin/runc"
        NoNewKeyring = true  # systemd-nspawn's seccomp filter refuses keyctl()
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{KIT}/cni"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
"""


def conflist(address: str) -> str:
    # No gateway, no masquerade: the pods that talk to the API (gpucheck's) use the host's network, as the anchors'
    # node agents do; the others need none. The bridge leaves ip_forward alone.
    return json.dumps({"cniVersion": "0.4.0", "name": "gpucheck-lab", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": False, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_subnet(address)}]]}},
        {"type": "loopback"}]}, indent=2) + "\n"


def kubelet_yaml(address: str, root: str) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": address, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        # the apiserver has no client certificate for the kubelets: logs and exec reach them anonymously, on the
        # lab's bridge only
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{root}", "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False, "makeIPTablesUtilChains": False,  # no iptables, no kube-proxy in a lab host
        # the machine's disk and memory are shared by every host: evict only when really short
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
        "nodeStatusUpdateFrequency": "10s", "resolvConf": "/etc/resolv.conf"}
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML


def kubeconfig(name: str, join: Join) -> str:
    cluster: dict[str, object] = {"server": join.server}
    if join.ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(join.ca_pem.encode()).decode()
    else:  # the apiserver made its own certificate (control_plane: no `cryptography` here)
        cluster["insecure-skip-tls-verify"] = True
    user = f"system:node:{name}"
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "lab",
              "clusters": [{"name": "lab", "cluster": cluster}],
              "users": [{"name": user, "user": {"token": join.token}}],
              "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}]}
    return json.dumps(config, indent=2) + "\n"


def prepare_script(root: str) -> str:
    binds = "\n".join(f"bind {CONF}/sysctl/{key.replace('/', '.')} /proc/sys/{key}" for key in SYSCTLS)
    return f"""\
#!/bin/sh
# gpucheck lab (lab/kubernetes/node_host.py): what a kubelet needs and a systemd-nspawn host lacks, in this host's
# mount namespace (the kubelet's mounts must reach containerd's, so it gets none of its own)
set -e
bind() {{
    mountpoint -q "$2" && return
    [ -e "$2" ] || touch "$2"
    mount --bind "$1" "$2" && mount -o remount,bind,ro "$2"
}}
# the v1 cgroup controllers writable, and the pods' cgroup root of this host's own in each
mount -o remount,rw /sys/fs/cgroup
for dir in /sys/fs/cgroup/*/; do
    case "$dir" in */unified/|*/systemd/) ;; *) mount -o remount,bind,rw "$dir" ;; esac
    mkdir -p "${{dir}}{root}"
done
# the kernel settings the kubelet wants, read from files (it would set them on the machine every host shares)
{binds}
# its OOM watcher's /dev/kmsg: the host's kernel log is the lab's file (lab/kernel_log.py)
bind /dev/null /dev/kmsg
"""


def prepare_unit() -> str:
    return f"""\
[Unit]
Description=gpucheck lab: cgroups for the kubelet
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={CONF}/prepare.sh
"""


def containerd_unit() -> str:
    tars = [f"{KIT}/images/{tar}" for tar in node_kit.IMAGES] + [AGENT_IMAGE]
    imports = "\n".join(f"ExecStartPost={KIT}/bin/ctr --address {SOCKET} -n k8s.io images import "
                        f"--snapshotter native {tar}" for tar in tars)
    return f"""\
[Unit]
Description=containerd (gpucheck lab's node kit)
Requires={PREPARE}.service
After={PREPARE}.service network.target
[Service]
Environment=PATH={KIT}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart={KIT}/bin/containerd --config {CONF}/containerd.toml
Type=notify
{imports}
Delegate=yes
KillMode=process
Restart=always
RestartSec=2
"""


def kubelet_unit(address: str) -> str:
    return f"""\
[Unit]
Description=kubelet (gpucheck lab's node kit)
Requires={CONTAINERD}.service
After={CONTAINERD}.service
[Service]
ExecStart={KIT}/bin/kubelet --config={CONF}/kubelet.yaml --kubeconfig={CONF}/kubeconfig \\
  --container-runtime=remote --container-runtime-endpoint=unix://{SOCKET} \\
  --pod-infra-container-image={node_kit.PAUSE_IMAGE} --node-ip={address} --node-labels={GPU_LABEL}=true
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
"""
