#!/usr/bin/env python3
"""A kubelet (v1.20.2, built from Debian's source package like lab/kubernetes/build.py) + Debian's containerd 1.6 and
runc 1.1 + CNI bridge, registered with the project's control plane, on this machine itself (no systemd, cgroup v1).

Usage, as root (each step is idempotent-ish; `all` runs them in order):
  kubelet_lab.py prepare   # debs (containerd, runc, CNI, busybox-static) -> root/; kubelet -> bin/; images/*.tar
  kubelet_lab.py up        # containerd, the control plane (lab/kubernetes/control_plane.start), kubelet; waits Ready
  kubelet_lab.py test      # a pod, a Job, a Guaranteed pod, priority preemption on nvidia.com/gpu; prints figures
  kubelet_lab.py down      # stops all of it, unmounts, removes cgroups, link, address, restores sysctls
  kubelet_lab.py all       # prepare, up, test, down

Everything lives under /tmp/kubelet-try (TOP) except what kubelet/containerd hard-code: /var/log/pods,
/var/log/containers, /var/lib/kubelet/device-plugins, /var/lib/cni, /run/containerd (shim sockets), the bridge kt0,
/sys/fs/cgroup/*/kubepods, 10.244.78.1/32 on lo, and four sysctls kubelet sets (restored by `down`).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TOP = Path("/tmp/kubelet-try")
ROOT, BIN, IMAGES = (TOP / d for d in ("root", "bin", "images"))
# KT_STATE/KT_LOGS/KT_CONF: elsewhere, e.g. on a systemd-nspawn container's own root (nspawn_try.sh)
STATE, LOGS, CONF = (Path(os.environ.get(f"KT_{d.upper()}", TOP / d)) for d in ("state", "logs", "conf"))
SOCK = STATE / "run/containerd.sock"
NODE, NODE_IP = "kt-node", "10.244.78.1"
KUBELET_PORT, KUBELET_HEALTHZ = 10350, 10348
PAUSE, BUSYBOX = "lab.local/pause:3.4.1", "lab.local/busybox:1.35"
DEBS = ("containerd", "runc", "containernetworking-plugins", "busybox-static")
SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops")
# overlayfs cannot put its upperdir on an overlay root (a lab host's): "native" there (KT_SNAPSHOTTER=native)
SNAPSHOTTER = os.environ.get("KT_SNAPSHOTTER", "overlayfs")
NO_NEW_KEYRING = "true" if os.environ.get("KT_NO_NEW_KEYRING") else "false"
PATH_ENV = {**os.environ, "PATH": f"{ROOT}/usr/bin:{ROOT}/usr/sbin:{os.environ['PATH']}"}
sys.path.insert(0, "/work/main")


def sh(*cmd, check=True, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=check, text=True, **kw)


def out(*cmd) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True).stdout


# ---------------------------------------------------------------------------------------------------- prepare
CONTAINERD_TOML = f"""\
version = 2
root = "{STATE}/containerd/root"
state = "{STATE}/containerd/state"
[grpc]
  address = "{SOCK}"
[ttrpc]
  address = "{SOCK}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  # the machine gives root no CAP_SYS_RESOURCE: runc init cannot set a negative oom_score_adj (the sandbox's -998,
  # a Guaranteed container's -997) and dies ("can't get final child's PID from pipe: EOF"); clamp them to ours (0)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{SNAPSHOTTER}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{ROOT}/usr/sbin/runc"
        # systemd-nspawn's seccomp filter refuses keyctl(): runc's per-container session keyring fails with
        # "unable to join session keyring: unable to create session key: operation not permitted"
        NoNewKeyring = {NO_NEW_KEYRING}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{ROOT}/usr/lib/cni"
    conf_dir = "{CONF}/net.d"
    max_conf_num = 1
"""
CONFLIST = {"cniVersion": "0.4.0", "name": "kt", "plugins": [
    {"type": "bridge", "bridge": "kt0", "isGateway": False, "ipMasq": False, "hairpinMode": False,
     "ipam": {"type": "host-local", "dataDir": f"{STATE}/cni-ipam", "ranges": [[{"subnet": "10.244.77.0/24"}]]}},
    {"type": "loopback"}]}
KUBELET_CONFIG = f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}             # on lo: kubelet refuses a loopback node IP, the apiserver must reach it for logs/exec
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {KUBELET_HEALTHZ}
authentication:
  anonymous: {{enabled: true}}   # the apiserver has no kubelet client certificate
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
makeIPTablesUtilChains: false  # no iptables installed, no kube-proxy
evictionHard: {{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"}}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
nodeStatusUpdateFrequency: 10s
volumePluginDir: {STATE}/volume-plugins
resolvConf: /etc/resolv.conf
"""


def configs() -> None:
    for d in (STATE / "run", LOGS, CONF / "net.d"):
        d.mkdir(parents=True, exist_ok=True)
    (CONF / "containerd.toml").write_text(CONTAINERD_TOML)
    (CONF / "net.d/10-kt.conflist").write_text(json.dumps(CONFLIST, indent=2) + "\n")
    (CONF / "kubelet-config.yaml").write_text(KUBELET_CONFIG)


def prepare() -> None:
    for d in (ROOT, BIN, IMAGES, TOP / "debs"):
        d.mkdir(parents=True, exist_ok=True)
    if not (ROOT / "usr/bin/containerd").exists():
        sh("apt-get", "download", *DEBS, cwd=TOP / "debs")
        for deb in sorted((TOP / "debs").glob("*.deb")):
            sh("dpkg-deb", "-x", deb, ROOT)
    if not (BIN / "kubelet").exists():
        sh(sys.executable, TOP / "build_kubelet.py")  # build.py's functions; ~370-550 CPU-s cold
    configs()
    pause_c = TOP / "pause.c"
    if not pause_c.exists():
        tree = TOP / "kbuild/gopath/src/k8s.io/kubernetes"
        shutil.copy(tree / "build/pause/linux/pause.c", pause_c)
    sh("gcc", "-static", "-Os", "-DVERSION=3.4.1-lab", "-o", IMAGES / "pause", pause_c)
    sh("strip", IMAGES / "pause")
    mk = [sys.executable, TOP / "mkimage.py"]
    sh(*mk, IMAGES / "pause.tar", PAUSE, "--entrypoint", "/pause", "--file", f"/pause={IMAGES / 'pause'}")
    applets = "sh echo sleep cat ls date hostname env true false id ps kill printf wc grep head tail touch mkdir rm"
    sh(*mk, IMAGES / "busybox.tar", BUSYBOX, "--cmd", "/bin/sh", "--file", f"/bin/busybox={ROOT / 'bin/busybox'}",
       *(f"--link=/bin/{a}=busybox" for a in applets.split()))


# ---------------------------------------------------------------------------------------------------- up
PROCS: dict = {}


def spawn(name: str, argv: list, env=None) -> int:
    log = open(LOGS / f"{name}.log", "a")
    proc = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True, cwd=TOP)
    (STATE / f"{name}.pid").write_text(str(proc.pid))
    PROCS[name] = proc
    return proc.pid


def kubectl(*args, check=True, input=None) -> str:
    plane = json.loads((STATE / "plane/plane.json").read_text())
    return subprocess.run([f"{plane['bin_dir']}/kubectl", f"--kubeconfig={plane['kubeconfig']}", *args],
                          check=check, text=True, capture_output=True, input=input).stdout


def wait(what: str, pred, timeout=120.0, every=0.25) -> float:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - t0


def up() -> None:
    figures: dict = {}
    (STATE / "sysctl-before.json").exists() or (STATE / "sysctl-before.json").write_text(
        json.dumps({k: out("sysctl", "-n", k).strip() for k in SYSCTLS}))
    if NODE_IP not in out("ip", "-br", "addr", "show", "lo"):
        sh("ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo", check=False)
    t0 = time.monotonic()
    spawn("containerd", [ROOT / "usr/bin/containerd", "--config", CONF / "containerd.toml"], env=PATH_ENV)
    figures["containerd_ready_s"] = round(wait("containerd socket", SOCK.exists), 2)
    ctr = [ROOT / "usr/bin/ctr", "--address", SOCK, "-n", "k8s.io"]
    for tar in ("pause.tar", "busybox.tar"):
        sh(*ctr, "images", "import", "--snapshotter", SNAPSHOTTER, IMAGES / tar)
    # the project's control plane, held by plane.py, plus --kubelet-preferred-address-types so the apiserver dials
    # the kubelet's InternalIP (its default tries the Hostname first, which does not resolve)
    spawn("plane", [sys.executable, TOP / "plane.py", STATE / "plane"])
    def plane_up() -> bool:
        if PROCS["plane"].poll() is not None:
            raise RuntimeError("control plane exited: " + (LOGS / "plane.log").read_text()[-600:])
        return (STATE / "plane/plane.json").exists()
    wait("control plane", plane_up, timeout=180)
    figures["control_plane_ready_s"] = json.loads((STATE / "plane/plane.json").read_text())["ready_s"]
    t1 = time.monotonic()
    spawn("kubelet", [BIN / "kubelet", f"--config={CONF / 'kubelet-config.yaml'}",
                      f"--kubeconfig={STATE / 'plane/kubeconfig'}", "--container-runtime=remote",
                      f"--container-runtime-endpoint=unix://{SOCK}", f"--pod-infra-container-image={PAUSE}",
                      f"--root-dir={STATE / 'kubelet'}", f"--cert-dir={STATE / 'kubelet/pki'}",
                      f"--hostname-override={NODE}", f"--node-ip={NODE_IP}", "--v=2"])

    def ready() -> bool:
        if PROCS["kubelet"].poll() is not None:
            tail = [ln for ln in (LOGS / "kubelet.log").read_text().splitlines() if ln[:1] in "EF"][-6:]
            raise RuntimeError(f"kubelet exited ({PROCS['kubelet'].returncode}):\n" + "\n".join(tail))
        raw = kubectl("get", "node", NODE, "-o", "json", check=False)
        conds = {c["type"]: c["status"] for c in json.loads(raw)["status"].get("conditions", [])} if raw else {}
        return conds.get("Ready") == "True"
    figures["kubelet_start_to_node_ready_s"] = round(wait("Node Ready", ready), 1)
    figures["total_up_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(figures, indent=2))
    (STATE / "figures-up.json").write_text(json.dumps(figures, indent=2))


# ---------------------------------------------------------------------------------------------------- test
def phase(pod: str) -> str:
    return kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}", check=False).strip()


def test() -> None:
    figures: dict = {}
    m = TOP / "manifests"
    t0 = time.monotonic()
    kubectl("apply", "-f", m / "pod-hello.yaml")
    figures["pod_create_to_succeeded_s"] = round(wait("hello Succeeded", lambda: phase("hello") == "Succeeded"), 1)
    figures["hello_logs"] = kubectl("logs", "hello", check=False).strip().splitlines()[:2]
    t0 = time.monotonic()
    kubectl("apply", "-f", m / "job.yaml")
    kubectl("wait", "--for=condition=complete", "job/count", "--timeout=120s")
    figures["job_create_to_complete_s"] = round(time.monotonic() - t0, 1)
    kubectl("apply", "-f", m / "guaranteed.yaml")
    wait("guaranteed Succeeded", lambda: phase("guaranteed") == "Succeeded")
    figures["guaranteed_logs(oom_score_adj,memory.limit)"] = kubectl("logs", "guaranteed").split()
    # kubectl exec needs a running container: the low-priority pod below
    token = json.loads((STATE / "plane/kubeconfig").read_text())["users"][0]["user"]["token"]
    server = json.loads((STATE / "plane/plane.json").read_text())["server"]
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    req = urllib.request.Request(f"{server}/api/v1/nodes/{NODE}/status", method="PATCH",
                                 data=json.dumps([{"op": "add", "path": "/status/capacity/nvidia.com~1gpu",
                                                   "value": "2"}]).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json-patch+json"})
    urllib.request.urlopen(req, context=ctx).read()
    wait("allocatable nvidia.com/gpu", lambda: "nvidia.com/gpu" in kubectl(
        "get", "node", NODE, "-o", "jsonpath={.status.allocatable}"), timeout=60)
    kubectl("apply", "-f", m / "priority.yaml", "-f", m / "gpu-low.yaml")
    wait("gpu-low Running", lambda: phase("gpu-low") == "Running")
    figures["exec_in_gpu_low"] = kubectl("exec", "gpu-low", "--", "/bin/sh", "-c", "echo exec ok; id -u",
                                         check=False).split()
    low_pid = out("pgrep", "-f", "echo low started").split()
    t0 = time.monotonic()
    kubectl("apply", "-f", m / "gpu-high.yaml")
    figures["preempt:low_container_gone_s"] = round(wait("low container killed", lambda: subprocess.run(
        ["pgrep", "-f", "echo low started"], capture_output=True).returncode != 0), 1)
    figures["preempt:low_pod_deleted_s"] = round(time.monotonic() - t0 + wait(
        "gpu-low deleted", lambda: phase("gpu-low") == ""), 1)
    figures["preempt:high_succeeded_s"] = round(time.monotonic() - t0 + wait(
        "gpu-high Succeeded", lambda: phase("gpu-high") == "Succeeded"), 1)
    figures["preempt:events"] = [line for line in kubectl("get", "events", "-o",
                                 "custom-columns=R:.reason,O:.involvedObject.name,M:.message").splitlines()
                                 if "Preempt" in line or ("Killing" in line and "gpu-low" in line)]
    figures["preempt:low_pids_before"] = low_pid
    figures["rss_kib"] = {n: int(out("ps", "-o", "rss=", "-p", (STATE / f"{n}.pid").read_text()).strip())
                          for n in ("kubelet", "containerd")}
    print(json.dumps(figures, indent=2))
    (STATE / "figures-test.json").write_text(json.dumps(figures, indent=2))


# ---------------------------------------------------------------------------------------------------- down
def stop(name: str, timeout=20.0) -> None:
    pidfile = STATE / f"{name}.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pidfile.unlink()
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink()


def down() -> None:
    if (STATE / "plane/plane.json").exists() and (STATE / "kubelet.pid").exists():
        for kind in ("jobs", "pods"):
            kubectl("delete", kind, "--all", "--wait=false", check=False)
        try:
            wait("pods gone", lambda: not kubectl("get", "pods", "-o", "name", check=False).strip(), timeout=60)
        except TimeoutError as exc:
            print(exc)
    stop("kubelet")
    ctr = [ROOT / "usr/bin/ctr", "--address", SOCK, "-n", "k8s.io"]
    if SOCK.exists():  # whatever the kubelet left: kill tasks, remove containers (their shims exit)
        for cid in out(*ctr, "containers", "ls", "-q").split():
            sh(*ctr, "tasks", "kill", "-s", "SIGKILL", cid, check=False, capture_output=True)
            time.sleep(0.5)
            sh(*ctr, "tasks", "delete", cid, check=False, capture_output=True)
            sh(*ctr, "containers", "delete", cid, check=False, capture_output=True)
    stop("containerd")
    stop("plane", timeout=60)
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(str(STATE)) or m.startswith("/run/netns/cni-")
                          or m.startswith("/var/run/netns/cni-")), key=len, reverse=True):
        sh("umount", "-l", target, check=False)
    for hier in Path("/sys/fs/cgroup").iterdir():  # kubelet's and ctr's cgroups, deepest first
        for top in (hier / "kubepods", hier / "k8s.io"):
            if top.is_dir():
                for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                                reverse=True) + [top]:
                    try:
                        d.rmdir()
                    except OSError as exc:
                        print(f"cannot remove {d}: {exc}")
    sh("ip", "link", "del", "kt0", check=False, capture_output=True)
    sh("ip", "addr", "del", f"{NODE_IP}/32", "dev", "lo", check=False, capture_output=True)
    before = STATE / "sysctl-before.json"
    if before.exists():
        for key, value in json.loads(before.read_text()).items():
            sh("sysctl", "-qw", f"{key}={value}", check=False)
        before.unlink()
    for path in ("/var/log/pods", "/var/log/containers", "/var/lib/kubelet", "/var/lib/cni", "/run/containerd"):
        shutil.rmtree(path, ignore_errors=True)
    for path in (STATE / "kubelet", STATE / "containerd", STATE / "cni-ipam", STATE / "plane", STATE / "run"):
        shutil.rmtree(path, ignore_errors=True)
    print("down: done")


if __name__ == "__main__":
    steps = {"prepare": prepare, "configs": configs, "up": up, "test": test, "down": down}
    todo = ["prepare", "up", "test", "down"] if sys.argv[1:] == ["all"] else sys.argv[1:]
    if not todo or any(s not in steps for s in todo):
        sys.exit(__doc__)
    for step in todo:
        print(f"=== {step}", flush=True)
        steps[step]()
