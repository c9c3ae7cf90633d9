"""`gpucheck watch --kubernetes` against the real control plane (tests/kubekit.py), with the rights of
deploy/kubernetes' service account: a planted Xid line taints the node's Node at once (the watch path's taint, the
condition, the label), the report it keeps says so (facts.kubernetes: the history's transitions), a pass after it
never untaints, and an API it cannot reach is said while it goes on watching. Its repairs, as on Slurm
(tests/watch/test_repair_command.py): a reset that clears an ECC fault gives the Node back after its proof; a pod
holding the Node's GPUs is waited for, and one that never ends keeps the repair from starting."""

from __future__ import annotations

import json
import socket

import pytest

import kubekit
from gpucheck.kubernetes import node_rule
from support import ROOT, wait_for
from watchkit import ECC_ON_GPU3, Watch, fault, repairable

XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x404490=0x80000002"


@pytest.fixture
def account(kube, tmp_path):
    kube.kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes" / "10-rbac.yaml"))
    return kubekit.service_account_kubeconfig(kube, "gpucheck", "gpucheck", tmp_path / "gpucheck.kubeconfig")


# more of this module's Nodes are tainted within 10 min than the breaker's default share of the fleet
BREAKER = "breaker: {fleet_fraction: 1.0, group_fraction: 1.0}\n"


def told(node: str, kubeconfig) -> tuple[str, ...]:
    return ("--kubernetes", "--kubernetes-node", node, "--kubeconfig", str(kubeconfig))


def watching(tmp_path, node: str, kubeconfig) -> Watch:
    return Watch(tmp_path, {}, site=BREAKER, told=told(node, kubeconfig))


def test_an_xid_line_taints_the_node_at_once_and_a_pass_after_it_leaves_the_taint(kube, account, tmp_path):
    kubekit.add_node(kube, "watched-1")
    watch = watching(tmp_path, "watched-1", account)
    watch.start()
    try:
        watch.plant(XID79)
        said = watch.wait("kubernetes: tainted")
        assert "tainted watched-1 gpucheck/unhealthy:NoSchedule: gpu.xid" in said, said
        found = kubekit.node(kube, "watched-1")
        taints = kubekit.gpuchecks_taint(found)
        assert taints == [{"key": node_rule.TAINT_KEY, "value": "watch", "effect": "NoSchedule"}], taints
        assert found["metadata"]["labels"]["gpucheck/health"] == "fail"
        condition = kubekit.condition(found, "GPUCheckHealthy")
        assert condition["status"] == "False" and condition["message"].startswith("gpu.xid "), condition
        (kept,) = wait_for(watch.reports, 10, "the kept report")  # kept just after the Node was told
        facts = json.loads(kept.read_text())["facts"]
        assert facts["watch"]["source"] == "kernel_log" and facts["kubernetes"]["action"] == "drain", facts
        host = f'host="{socket.gethostname()}"'
        wait_for(lambda: f'gpucheck_watch_kubernetes_actions_total{{{host},action="drain"}} 1'
                 in watch.metrics.read_text(), 10, "the watcher's metrics")
        watch.plant(XID13)  # an application's Xid: judged, passes; a pass never untaints (the watch path)
        watch.wait("gpu.xid pass")
        assert [t["value"] for t in kubekit.gpuchecks_taint(kubekit.node(kube, "watched-1"))] == ["watch"]
    finally:
        watch.stop()


def test_a_node_it_cannot_reach_is_said_and_it_goes_on_watching(kube, account, tmp_path):
    watch = watching(tmp_path, "no-such-node", account)
    watch.start()
    try:
        watch.plant(XID79)
        said = watch.wait("kubernetes: cannot read Node no-such-node: 404")
        assert "Traceback" not in said, said
        # judged and kept all the same (just after the scheduler was asked): the history has the failure
        (kept,) = wait_for(watch.reports, 10, "the kept report")
        assert "kubernetes" not in json.loads(kept.read_text())["facts"]
    finally:
        watch.stop()


def test_a_reset_that_clears_the_fault_takes_the_taint_back_after_its_proof(kube, account, tmp_path):
    kubekit.add_node(kube, "repaired-1")
    watch = repairable(tmp_path, {}, site=BREAKER, told=told("repaired-1", account))
    watch.start()
    try:
        fault(watch, ECC_ON_GPU3)
        said = watch.wait("repair: returned", timeout=180)
        assert "kubernetes: tainted repaired-1 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors" in said, said
        assert "repair: repairing: reset-gpu GPU3 after gpu.ecc_errors" in said and "GPU3 reset" in said
        assert "kubernetes: removed gpucheck/unhealthy from repaired-1 (its repair run passed)" in said, said
        found = kubekit.node(kube, "repaired-1")
        assert kubekit.gpuchecks_taint(found) == [] and found["metadata"]["labels"]["gpucheck/health"] == "pass"
        assert kubekit.condition(found, "GPUCheckHealthy")["status"] == "True"
        [last] = wait_for(lambda: [facts for facts in (json.loads(p.read_text())["facts"] for p in watch.reports())
                                   if "repair" in facts], 10, "the report that ends the attempt, kept after it is said")
        assert last["kubernetes"]["path"] == "repair" and last["kubernetes"]["action"] == "resume", last
        assert [step["state"] for step in last["repair"]["steps"]] == ["repairing", "proving", "returned"]
    finally:
        watch.stop()


def test_a_pod_holding_the_gpus_is_waited_for_and_one_that_never_ends_keeps_the_repair_away(kube, account,
                                                                                            tmp_path):
    """No kubelet runs here: a pod bound to the Node stays Pending, as a job that does not end."""
    kubekit.add_node(kube, "repaired-2")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "default"},
           "spec": {"nodeName": "repaired-2", "containers": [{"name": "c", "image": "trainer", "resources": {
               "limits": {"nvidia.com/gpu": "8"}}}]}}
    kube.request("POST", "/api/v1/namespaces/default/pods", pod)
    watch = repairable(tmp_path, {}, site=BREAKER, told=told("repaired-2", account), repair="jobs_wait_s: 2")
    watch.start()
    try:
        fault(watch, ECC_ON_GPU3)
        said = watch.wait("repair: not started", timeout=120)
        assert "repair: waiting: for the jobs on repaired-2 to end" in said, said
        assert "jobs still run on repaired-2" in said, said
        found = kubekit.node(kube, "repaired-2")
        assert [t["value"] for t in kubekit.gpuchecks_taint(found)] == ["watch"]
        assert "GPU3 reset" not in watch.said()
    finally:
        watch.stop()
        kube.request("DELETE", "/api/v1/namespaces/default/pods/train?gracePeriodSeconds=0")
