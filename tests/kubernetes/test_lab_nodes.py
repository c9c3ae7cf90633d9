"""The lab's GPU hosts as real Kubernetes nodes (`python3 -m lab up --kubernetes`): each host's own kubelet,
containerd and runc (lab/kubernetes/node_kit.py) register it with the lab's control plane under the node's own
identity, and pods run on it: gpucheck's `--full` Job, which a user pod preempts. Two hosts from the bare base (the
kubelet needs no provisioning; the gpucheck image carries the agent), on this worker's own lab instance, beside the
lab chain's."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml

import kubekit
import site_image
from gpucheck.cluster import job_image
from lab import config, hostinit
from lab.errors import LabError
from lab.kubernetes import agent_image, lab_plane, node_host, node_kit, toolkit
from labkit import INVENTORY, REPO, lab_cli, read_inventory, require_root
from support import run_gpucheck, wait_for
from workload_helpers import TF_HOROVOD

pytestmark = [pytest.mark.lab, pytest.mark.kubernetes]
NODES = ("node01", "node02")
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")  # what the kubelet would set
WAIT_S, EVERY_S = 90.0, 0.3  # each event waited for (an API call, or an SSH, per look)
# the DaemonSet's scheduled checks: daily only, one active check (minutes on the lab's simulated GPUs), due again
# in a day
SCHEDULE = "--weekly 0 --daily-args='--full --only gpu.memtest'"


def machine_sysctls() -> dict[str, str]:
    return {key: Path(f"/proc/sys/{key}").read_text().strip() for key in SYSCTLS}


def pods_root(node: str) -> str:
    return node_host.cgroup_root(config.cgroup_name(node))


def pods_cgroups() -> list[Path]:
    """The nodes' pods' cgroups where the hosts see the v1 controllers' trees (those this process, which started
    the lab, is in)."""
    places = hostinit.controller_places(Path("/proc/self/cgroup").read_text())
    return [Path(place, pods_root(node)) for place in places for node in NODES if Path(place, pods_root(node)).exists()]


@pytest.fixture(scope="module")
def before() -> dict[str, str]:
    return machine_sysctls()


def shared() -> tuple[str, ...]:
    """What the nodes share (`up --share`) for the jobs' image: the workload tests' TensorFlow + Horovod virtualenv
    (built once per machine) and the interpreter it was made from where Debian's python3.11 in the image is not it."""
    stack = TF_HOROVOD.ensure()
    return (str(stack.dir), *([sys.base_prefix] if not sys.base_prefix.startswith("/usr") else []))


@pytest.fixture(scope="module")
def plane(before):
    require_root()
    lab_cli("up", "--hosts", "2", "--no-golden", "--kubernetes", *(f"--share={d}" for d in shared()), timeout=1800)
    try:
        yield lab_plane.load()
    finally:
        lab_cli("down", check=False)


def pod(name: str, node: str, command: str, priority_class: str = "", gpus: int = 0) -> dict:
    container = {"name": "c", "image": node_kit.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", command]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 5, "containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def phase(plane, name: str) -> str:
    try:
        return plane.request("GET", f"/api/v1/namespaces/default/pods/{name}")["status"].get("phase", "")
    except LabError as exc:
        return "gone" if "HTTP 404" in str(exc) else f"error: {exc}"


def test_each_gpu_host_registers_itself_and_is_ready(plane) -> None:
    addresses = read_inventory()
    found = {n["metadata"]["name"]: n for n in plane.request("GET", "/api/v1/nodes")["items"]}
    assert sorted(found) == list(NODES)
    for name in NODES:
        node = found[name]
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.20.2" and info["containerRuntimeVersion"].startswith("containerd://")
        assert {"type": "InternalIP", "address": addresses[name]} in node["status"]["addresses"]
        assert node["metadata"]["labels"][node_host.GPU_LABEL] == "true"
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready


def test_a_node_acts_as_itself_and_the_node_authorizer_keeps_it_to_its_own_node(plane) -> None:
    as_node01 = dataclasses.replace(plane, token=plane.node_tokens["node01"])
    label = {"metadata": {"labels": {"gpucheck-test/by": "node01"}}}
    patched = as_node01.request("PATCH", "/api/v1/nodes/node01", label, "application/strategic-merge-patch+json")
    assert patched["metadata"]["labels"]["gpucheck-test/by"] == "node01"
    with pytest.raises(LabError, match="HTTP 403"):
        as_node01.request("PATCH", "/api/v1/nodes/node02", label, "application/strategic-merge-patch+json")


def test_a_pod_runs_on_the_host_under_its_own_cgroups_and_its_log_comes_back(plane, before) -> None:
    command = "echo hello from $(hostname); grep memory /proc/self/cgroup"
    plane.request("POST", "/api/v1/namespaces/default/pods", pod("hello", "node02", command))
    assert wait_for(lambda: phase(plane, "hello") in ("Succeeded", "Failed") and phase(plane, "hello"), WAIT_S,
                    "the pod ended", EVERY_S) == "Succeeded"
    # the apiserver reaches node02's kubelet over the bridge for the log
    said, memory = plane.kubectl("logs", "hello").strip().splitlines()
    assert said == "hello from hello"
    # the pod's cgroups are under the host's own root (the machine's /kubepods is every host's), and the machine's
    # kernel settings are as they were
    assert memory.split(":", 2)[2].startswith(f"/{pods_root('node02')}/kubepods/besteffort/pod")
    places = hostinit.controller_places(Path("/proc/self/cgroup").read_text())
    assert places and all(Path(place, pods_root("node02"), "kubepods").is_dir() for place in places)
    assert machine_sysctls() == before


def kept_reports(node: str) -> list[dict]:
    """The node's kept reports (gpucheck's state dir, a hostPath the Job's pod writes)."""
    cut = "--8<--"
    done = lab_cli("ssh", node, "--", f"for f in /var/lib/gpucheck/reports/*.json; do [ -e $f ] && cat $f && "
                                      f"echo {cut}; done; true")
    return [json.loads(text) for text in done.stdout.split(cut) if text.strip()]


def job_pods(plane, job: str = "gpucheck-full-node01") -> list[dict]:
    return plane.request("GET", f"/api/v1/namespaces/gpucheck/pods?labelSelector=job-name%3D{job}")["items"]


def test_a_user_pod_preempts_gpuchecks_full_job_which_is_kept_as_preempted_and_started_again(plane) -> None:
    """deploy/kubernetes/jobs/full.yaml on node01, the lab's gpucheck image and simulated GPUs (lab/kubernetes/
    toolkit.py) in place of a site's: `gpucheck node --full` runs at gpucheck's PriorityClass holding the node's two
    GPUs; a user pod that needs them preempts it, and the run is kept on the node as preempted (never a failure:
    the Node untouched), and the Job starts it again."""
    for name in ("10-rbac.yaml", "20-priorityclass.yaml"):
        plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes" / name))
    lab_cli("ssh", "node01", "--", "mkdir -p /etc/gpucheck && echo 'profile: lab' > /etc/gpucheck/node.yaml")
    gpus = {"status": {"capacity": {"nvidia.com/gpu": "2"}}}  # what NVIDIA's device plugin would advertise
    plane.request("PATCH", "/api/v1/nodes/node01/status", gpus, "application/strategic-merge-patch+json")
    wait_for(lambda: plane.request("GET", "/api/v1/nodes/node01")["status"]["allocatable"].get("nvidia.com/gpu")
             == "2", WAIT_S, "node01's 2 GPUs allocatable", EVERY_S)
    job = yaml.safe_load((REPO / "deploy/kubernetes/jobs/full.yaml").read_text().replace("NODE", "node01"))
    plane.kubectl("apply", "-f", "-", input=json.dumps(toolkit.for_lab(job, plane.server, gpu_count=2)))
    try:
        [first] = wait_for(lambda: [p["metadata"]["name"] for p in job_pods(plane) if p["status"].get("phase") ==
                                    "Running"], WAIT_S, "gpucheck's --full running", EVERY_S)
        plane.request("POST", "/api/v1/namespaces/default/pods", pod("train", "node01", "echo got the gpus", gpus=2))
        assert wait_for(lambda: phase(plane, "train") == "Succeeded", 120, "the user pod Succeeded", EVERY_S)
        [kept] = wait_for(lambda: [r for r in kept_reports("node01") if r["facts"].get("scheduled", {}).get("job") ==
                                   first], WAIT_S, "the preempted run kept on node01", EVERY_S)
        assert kept["facts"]["scheduled"]["stopped"] == "preempted", kept["facts"]
        [run] = kept["results"]
        assert run["status"] == "error" and run["reason"].startswith(
            "preempted: Kubernetes stopped this scheduled on-demand check (stopped by SIGTERM; pod "
            f"{first}: Preempted by default/train on node node01); its Job starts it again"), run["reason"]
        node = plane.request("GET", "/api/v1/nodes/node01")
        assert kubekit.gpuchecks_taint(node) == [] and not kubekit.condition(node, "GPUCheckHealthy")
        wait_for(lambda: [p for p in job_pods(plane) if p["metadata"]["name"] != first], WAIT_S,
                 "the Job's run started again", EVERY_S)
    finally:  # its next run would burn the simulated GPUs for minutes
        plane.request("DELETE", "/apis/batch/v1/namespaces/gpucheck/jobs/gpucheck-full-node01?propagationPolicy="
                      "Background")


ADMIN = kubekit.ADMIN_TAINT
PASSIVE = kubekit.gpucheck_taint("passive")
# The profile for a check's container (no host MPI or frameworks), and a breaker that lets one node of two go: with
# the default 25 % of the fleet, a two-node cluster could never be tainted (the condition and label would be).
NODE_YAML = "profile: lab-kubernetes\nbreaker: {fleet_fraction: 1.0, group_fraction: 1.0}\n"


def scheduled_job(plane, node: str) -> dict:
    try:
        return plane.request("GET", f"/apis/batch/v1/namespaces/gpucheck/jobs/gpucheck-daily-{node}")
    except LabError as exc:
        if "HTTP 404" in str(exc):
            return {}
        raise


DAEMONS = "app.kubernetes.io/component=node-check"


def daemon_pods(plane) -> list[dict]:
    """The DaemonSet's pods."""
    return plane.request("GET", "/api/v1/namespaces/gpucheck/pods?labelSelector=" + DAEMONS.replace("=", "%3D"))[
        "items"]


def scheduling(plane) -> str:
    """What the scheduled checks came to: the Jobs' status, their pods', the DaemonSet pods' last lines."""
    said = [f"job {node}: {scheduled_job(plane, node).get('status')}" for node in NODES]
    for node in NODES:
        said += [f"pod {p['metadata']['name']}: {p['status']}" for p in job_pods(plane, f"gpucheck-daily-{node}")]
    for pod in daemon_pods(plane):
        try:
            logs = plane.kubectl("logs", "-n", "gpucheck", pod["metadata"]["name"], "-c", "gpucheck", "--tail", "15")
        except LabError as exc:
            logs = str(exc)
        said.append(f"daemonset pod on {pod['spec'].get('nodeName')}: {logs[-3000:]}")
    return "\n".join(said)


def gpucheck_says(plane, name: str) -> tuple[list[dict], str, str]:
    """(gpucheck's taint, the health label, the condition's status) on Node `name`."""
    node = plane.request("GET", f"/api/v1/nodes/{name}")
    condition = kubekit.condition(node, "GPUCheckHealthy") or {}
    return (kubekit.gpuchecks_taint(node), node["metadata"].get("labels", {}).get("gpucheck/health", ""),
            condition.get("status", ""))


def test_the_daemonset_taints_the_faulty_node_its_repair_clears_it_and_the_admins_own_stay(plane) -> None:
    """deploy/kubernetes/30-daemonset.yaml on both nodes through the lab's toolkit, a run every 2 s (not 300):
    node02, planted with uncorrectable ECC errors before it starts, gets gpucheck's taint, condition and label from
    its own pod's passive run; node01, cordoned and tainted by its admin, is judged pass with both left as they
    were; once node02's GPUs are healthy again, its next run clears what gpucheck set. Then its SCHEDULE set, each
    pod keeps its own Node's scheduled check as a Job (gpucheck schedule --kubernetes, with the pod's account):
    node02's runs; node01's waits, its admin's cordon keeping it away as it keeps a user's pod."""
    plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/10-rbac.yaml"))
    plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/20-priorityclass.yaml"))
    for name in NODES:
        lab_cli("ssh", name, "--", f"mkdir -p /etc/gpucheck && printf '{NODE_YAML}' > /etc/gpucheck/node.yaml")
    plane.kubectl("cordon", "node01")
    plane.kubectl("taint", "node", "node01", kubekit.kubectl_taint(ADMIN))
    lab_cli("fault", "node02", "scenario", "ecc-uncorrected")  # before the watcher's first look: its own baseline
    daemonset = toolkit.for_lab(yaml.safe_load((REPO / "deploy/kubernetes/30-daemonset.yaml").read_text()),
                                plane.server)
    check = daemonset["spec"]["template"]["spec"]["containers"][0]
    check["env"] = [{"name": "INTERVAL_S", "value": "2"} if e["name"] == "INTERVAL_S" else e for e in check["env"]]
    plane.kubectl("apply", "-f", "-", input=json.dumps(daemonset))
    try:
        wait_for(lambda: gpucheck_says(plane, "node02") == ([PASSIVE], "fail", "False"), WAIT_S,
                 "node02 tainted by its DaemonSet pod", EVERY_S)
        wait_for(lambda: gpucheck_says(plane, "node01") == ([], "pass", "True"), WAIT_S, "node01 judged pass",
                 EVERY_S)
        node01 = plane.request("GET", "/api/v1/nodes/node01")
        assert ADMIN in node01["spec"]["taints"] and node01["spec"]["unschedulable"] is True, node01["spec"]
        lab_cli("fault", "node02", "scenario", config.DEFAULT_SCENARIO)
        wait_for(lambda: gpucheck_says(plane, "node02") == ([], "pass", "True"), WAIT_S,
                 "node02 cleared by its next run", EVERY_S)
        node01 = plane.request("GET", "/api/v1/nodes/node01")
        assert ADMIN in node01["spec"]["taints"] and node01["spec"]["unschedulable"] is True, node01["spec"]
        gpus = {"status": {"capacity": {"nvidia.com/gpu": "2"}}}  # what NVIDIA's device plugin would advertise
        for name in NODES:
            plane.request("PATCH", f"/api/v1/nodes/{name}/status", gpus, "application/strategic-merge-patch+json")
        wait_for(lambda: all(plane.request("GET", f"/api/v1/nodes/{name}")["status"]["allocatable"].get(
            "nvidia.com/gpu") == "2" for name in NODES), WAIT_S, "2 GPUs allocatable on each node", EVERY_S)
        check["env"] = [{"name": "SCHEDULE", "value": SCHEDULE} if e["name"] == "SCHEDULE" else e
                        for e in check["env"]]
        plane.kubectl("apply", "-f", "-", input=json.dumps(daemonset))  # the pods made again, one at a time
        try:  # its run itself burns the lab's simulated GPUs for minutes on a busy machine: its start is the proof
            [running] = wait_for(lambda: [p for p in job_pods(plane, "gpucheck-daily-node02") if p["status"].get(
                "phase") == "Running"], 3 * WAIT_S, "node02's scheduled daily Job running", EVERY_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {scheduling(plane)}") from None
        assert running["spec"]["containers"][0]["command"][:5] == ["gpucheck", "node", "--kubernetes", "--scheduled",
                                                                   "daily"], running["spec"]
        [waiting] = wait_for(lambda: [p for p in job_pods(plane, "gpucheck-daily-node01") if (kubekit.condition(
            p, "PodScheduled") or {}).get("reason") == "Unschedulable"], WAIT_S, "node01's Job unschedulable", EVERY_S)
        assert waiting["status"]["phase"] == "Pending", waiting["status"]
    finally:
        plane.kubectl("delete", "daemonset", "-n", "gpucheck", "gpucheck-node", "--wait=false")
        # the Jobs and their pods before the cordon goes: node01's would start there
        plane.kubectl("delete", "jobs,pods", "-n", "gpucheck", "-l", "app.kubernetes.io/component=scheduled-check")
        plane.kubectl("uncordon", "node01")
        plane.kubectl("taint", "node", "node01", f"{ADMIN['key']}-")


WATCH = kubekit.gpucheck_taint("watch")


def daemon_log(plane, node: str, container: str) -> str:
    """The container's log in the DaemonSet's pod on `node` ("" while there is none)."""
    pods = [p for p in daemon_pods(plane) if p["spec"].get("nodeName") == node and p["status"].get("phase") ==
            "Running"]
    try:
        return plane.kubectl("logs", "-n", "gpucheck", pods[0]["metadata"]["name"], "-c", container) if pods else ""
    except LabError:  # its container not started yet
        return ""


def test_the_daemonsets_watcher_taints_its_node_as_the_fault_appears(plane) -> None:
    """The DaemonSet's `watch` container (gpucheck watch --kubernetes, as deployed): once it watches, and the passive
    run beside it has judged node02 healthy (its next one 300 s later), node02's GPU starts counting uncorrectable
    ECC errors under the running NVML; the watcher taints node02 as the `watch` path's within seconds, with the
    condition and the label, and node01 is left as it was."""
    wait_for(lambda: not daemon_pods(plane), WAIT_S, "the last test's DaemonSet pods gone", EVERY_S)
    for name in ("10-rbac.yaml", "20-priorityclass.yaml"):
        plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes" / name))
    for name in NODES:
        lab_cli("ssh", name, "--", f"mkdir -p /etc/gpucheck && printf '{NODE_YAML}' > /etc/gpucheck/node.yaml")
    daemonset = toolkit.for_lab(yaml.safe_load((REPO / "deploy/kubernetes/30-daemonset.yaml").read_text()),
                                plane.server)
    plane.kubectl("apply", "-f", "-", input=json.dumps(daemonset))
    try:
        for name in NODES:
            wait_for(lambda name=name: "gpucheck watch: watching" in daemon_log(plane, name, "watch") and
                     "gpucheck: kubernetes:" in daemon_log(plane, name, "gpucheck"), WAIT_S,
                     f"{name}'s watcher watching and its passive run told its Node", EVERY_S)
        assert gpucheck_says(plane, "node02") == ([], "pass", "True")
        lab_cli("fault", "node02", "scenario", "ecc-uncorrected")
        wait_for(lambda: gpucheck_says(plane, "node02") == ([WATCH], "fail", "False"), WAIT_S,
                 "node02 tainted by its watcher", EVERY_S)
        assert "gpu.ecc_errors" in kubekit.condition(plane.request("GET", "/api/v1/nodes/node02"),
                                                     "GPUCheckHealthy")["message"]
        assert gpucheck_says(plane, "node01") == ([], "pass", "True")
    finally:
        lab_cli("fault", "node02", "scenario", config.DEFAULT_SCENARIO)
        plane.kubectl("delete", "daemonset", "-n", "gpucheck", "gpucheck-node")
        wait_for(lambda: not daemon_pods(plane), WAIT_S, "its DaemonSet pods gone", EVERY_S)
        if WATCH in kubekit.gpuchecks_taint(plane.request("GET", "/api/v1/nodes/node02")):  # the runs after it
            plane.kubectl("taint", "node", "node02", f"{WATCH['key']}-")


def lab_template(plane, tmp_path: Path, name: str, image: str = agent_image.IMAGE) -> str:
    """deploy/kubernetes/jobs/NAME through the lab's toolkit, as a file for gpucheck cluster's --*-template; the job
    template's pods get the nodes' shared virtualenv, their python named as a site names its image's."""
    path = tmp_path / f"{name}.json"
    base = yaml.safe_load((REPO / "deploy/kubernetes/jobs" / name).read_text())
    made = toolkit.for_lab(base, plane.server, image=image, shared=shared() if name == "mpi.yaml" else ())
    if name == "mpi.yaml":
        made["metadata"]["annotations"] = {job_image.PYTHON_ANNOTATION: str(TF_HOROVOD.python)}
    path.write_text(json.dumps(made))
    return str(path)


def test_the_image_built_from_the_dockerfile_checks_a_node(plane, tmp_path) -> None:
    """deploy/kubernetes/Dockerfile built from this checkout and given to node01's containerd (site_image.py): a
    node check in it, through the lab's toolkit (the host's NVML, the image's own python and dmesg), passes node01."""
    site_image.load(site_image.build(tmp_path), read_inventory()["node01"])
    plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/10-rbac.yaml"))
    done = run_gpucheck(["cluster", "-i", str(INVENTORY), "--limit", "node01", "--launcher", "kubernetes",
                         "--kubeconfig", str(plane.kubeconfig), "--pod-template", lab_template(
                             plane, tmp_path, "check.yaml", site_image.IMAGE), "--profile", "lab-kubernetes",
                         "--stages", "consistency", "--report", str(tmp_path / "report"), "--no-history"], timeout=300)
    node = json.loads((tmp_path / "report" / "report.json").read_text())["nodes"]["node01"]
    assert done.returncode == 0 and (node["status"], node["via"]) == ("pass", "kubernetes"), done.stdout + str(node)


def test_the_mpi_allreduce_and_smoke_stages_run_through_kubernetes_a_rank_on_each_nodes_own_host(plane,
                                                                                                 tmp_path) -> None:
    """`gpucheck cluster --launcher kubernetes --job-template`: the MPI, all-reduce and smoke stages' jobs as pods
    made from deploy/kubernetes/jobs/mpi.yaml (the lab's image, with the nodes' shared TensorFlow + Horovod, standing
    in for a training image): mpirun in a launcher pod on node01 reaches a worker pod's sshd on node02 with the job's
    key, each rank prints its own host's name; the image's probe finds the stack, the workload files come in the
    job's Secret, and Horovod's all-reduce and Keras training pass with a rank on each node. No pod and no Secret of
    the jobs is left."""
    plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/10-rbac.yaml"))
    done = run_gpucheck(["cluster", "-i", str(INVENTORY), "--launcher", "kubernetes", "--kubeconfig",
                         str(plane.kubeconfig), "--pod-template", lab_template(plane, tmp_path, "check.yaml"),
                         "--job-template", lab_template(plane, tmp_path, "mpi.yaml"), "--profile", "lab-kubernetes",
                         "--stages", "consistency,mpi,allreduce,smoke", "--smoke-steps", "10", "--report",
                         str(tmp_path / "report"), "--no-history"], timeout=600)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    found = {r["check"]: r for r in report["cluster"]}
    assert done.returncode == 0, done.stdout + json.dumps(report["cluster"], indent=1)
    mpi, allreduce, smoke = found["cluster.mpi"], found["cluster.allreduce"], found["cluster.smoke.tf-horovod"]
    assert mpi["measured"]["hosts"] == {"node01": "node01", "node02": "node02"}, mpi["measured"]
    assert "2 ranks on 2 nodes through Kubernetes" in mpi["reason"], mpi["reason"]
    assert (allreduce["status"], allreduce["measured"]["tool"], allreduce["measured"]["nodes"]) == (
        "pass", "allreduce_bench", 2), allreduce
    assert smoke["status"] == "pass" and smoke["measured"]["2 nodes"]["hosts"] == list(NODES), smoke
    left = {kind: [item["metadata"]["name"] for item in plane.request(
        "GET", f"/api/v1/namespaces/gpucheck/{kind}?labelSelector=app.kubernetes.io%2Fcomponent%3Dcluster-job")[
        "items"] if not item["metadata"].get("deletionTimestamp")] for kind in ("pods", "secrets")}
    assert left == {"pods": [], "secrets": []}, left


def test_a_cluster_run_through_kubernetes_names_the_faulty_node(plane, tmp_path) -> None:
    """`gpucheck cluster --launcher kubernetes --drain`: each host's checks as a pod on its Node, made from
    deploy/kubernetes/jobs/check.yaml through the lab's toolkit; node02's GPU with uncorrectable ECC errors is the
    one failed node, tainted as the cluster path's, and the stages that start work across the nodes are left out,
    said so."""
    plane.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/10-rbac.yaml"))
    lab_cli("fault", "node02", "scenario", "ecc-uncorrected")
    done = run_gpucheck(["cluster", "-i", str(INVENTORY), "--launcher", "kubernetes", "--kubeconfig",
                         str(plane.kubeconfig), "--pod-template", lab_template(plane, tmp_path, "check.yaml"),
                         "--profile", "lab-kubernetes",
                         "--report", str(tmp_path / "report"), "--no-history", "--drain"], timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "leaves out stage network, burn (not run through Kubernetes yet)" in done.stdout
    assert "leaves out stage mpi, allreduce, smoke, training (no --job-template)" in done.stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    nodes = {name: node for name, node in report["nodes"].items()}
    assert (nodes["node01"]["status"], nodes["node02"]["status"]) == ("pass", "fail"), nodes
    assert nodes["node02"]["via"] == "kubernetes" and "gpu.ecc_errors" in nodes["node02"]["reason"]
    assert (tmp_path / "report" / "drain.txt").read_text().split()[0] == "node02"
    assert "kubernetes: tainted node02 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors" in done.stdout, done.stdout
    assert {a["node"]: a["action"] for a in report["kubernetes"]} == {"node01": "keep", "node02": "drain"}
    taints = {name: [t for t in plane.request("GET", f"/api/v1/nodes/{name}")["spec"].get("taints") or []
                     if t["key"] == "gpucheck/unhealthy"] for name in ("node01", "node02")}
    assert taints == {"node01": [], "node02": [{"key": "gpucheck/unhealthy", "value": "active",
                                                "effect": "NoSchedule"}]}, taints
    left = plane.request("GET", "/api/v1/namespaces/gpucheck/pods?labelSelector=app.kubernetes.io%2Fcomponent%3D"
                                "cluster-check")["items"]
    assert [p for p in left if not p["metadata"].get("deletionTimestamp")] == []  # each pod deleted once read


def test_down_leaves_no_plane_no_pod_cgroups_and_the_machine_as_it_was(plane, before) -> None:
    lab_cli("down")
    assert lab_plane.running() == [] and pods_cgroups() == []
    assert machine_sysctls() == before
