"""`gpucheck node --kubernetes` against a real kube-apiserver with RBAC on (tests/kubekit.py): the verdict of a run
on the fake NVML becomes the Node's condition, label and taint; an admin's cordon and taint survive every run; a
run that could not judge writes nothing; the agent acts with deploy/kubernetes/10-rbac.yaml's rights and no more."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import kubekit
from gpucheck.config import BreakerSettings
from gpucheck.kubernetes import api, node_rule
from lab.fakenvml import build_library, env_for, scenario_path
from support import ROOT, run_gpucheck

ADMIN = kubekit.ADMIN_TAINT
PASSES = ("dgx-h100", ["--only", "gpu.ecc_errors"])
FAILS = ("ecc-uncorrected", ["--only", "gpu.ecc_errors"])
CANNOT_JUDGE = ("hang", ["--only", "gpu.temperature", "--timeout", "1"])  # NVML never answers for GPU2


@pytest.fixture(scope="module")
def nvml() -> Path:
    return build_library()


def gpucheck(kube, nvml: Path, node: str, run: tuple[str, list[str]], *extra: str, kubeconfig: Path | None = None):
    """`gpucheck node --kubernetes` for Node `node`, the fake NVML playing `run`'s scenario, no breaker."""
    scenario, args = run
    env = env_for(scenario_path(scenario), nvml)
    config = kube.run_dir / "node.yaml"  # more of these tests' Nodes are tainted within 10 min than the default 25 %
    config.write_text("breaker: {fleet_fraction: 1.0, group_fraction: 1.0}\n")
    env["GPUCHECK_CONFIG"] = str(config)
    return run_gpucheck(["node", "--profile", "dgx-h100", *args, "--kubernetes", "--kubernetes-node", node,
                         "--kubeconfig", str(kubeconfig or kube.kubeconfig), *extra], env)


def not_kubernetes_own(found: dict) -> list[dict]:
    """The Node's taints but those its controllers keep (node.kubernetes.io/unschedulable for a cordon, not-ready
    for a Node no kubelet keeps ready)."""
    return [t for t in found["spec"].get("taints") or [] if not t["key"].startswith("node.kubernetes.io/")]


def test_a_failure_taints_and_a_pass_untaints_while_the_admins_cordon_and_taint_stay(kube, nvml):
    kubekit.add_node(kube, "gpu-1", {"rack": "B"}, [ADMIN], cordoned=True)
    failed = gpucheck(kube, nvml, "gpu-1", FAILS)
    assert failed.returncode == 2, failed.stderr
    assert "gpucheck: kubernetes: tainted gpu-1 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors" in failed.stderr
    found = kubekit.node(kube, "gpu-1")
    assert kubekit.gpuchecks_taint(found) == [{"key": "gpucheck/unhealthy", "value": "passive", "effect": "NoSchedule"}]
    assert ADMIN in found["spec"]["taints"] and found["spec"]["unschedulable"] is True
    assert found["metadata"]["labels"] == {"rack": "B", "gpucheck/health": "fail"}
    condition = kubekit.condition(found, "GPUCheckHealthy")
    assert condition["status"] == "False" and condition["reason"] == "ChecksFailed", condition
    assert condition["message"].startswith("gpu.ecc_errors ") and "uncorrected" in condition["message"], condition

    passed = gpucheck(kube, nvml, "gpu-1", PASSES)
    assert passed.returncode == 0 and "removed gpucheck/unhealthy from gpu-1" in passed.stderr, passed.stderr
    found = kubekit.node(kube, "gpu-1")
    assert not_kubernetes_own(found) == [ADMIN] and found["spec"]["unschedulable"] is True  # the admin's, as they were
    assert found["metadata"]["labels"]["gpucheck/health"] == "pass"
    after = kubekit.condition(found, "GPUCheckHealthy")
    assert after["status"] == "True" and after["lastTransitionTime"] >= condition["lastTransitionTime"], after


def test_a_run_that_could_not_judge_writes_nothing_to_the_node(kube, nvml):
    kubekit.add_node(kube, "gpu-2")
    assert gpucheck(kube, nvml, "gpu-2", FAILS).returncode == 2
    before = kubekit.node(kube, "gpu-2")
    done = gpucheck(kube, nvml, "gpu-2", CANNOT_JUDGE)
    assert done.returncode == 0 and "could not judge the node: nothing changed" in done.stderr, done.stderr
    assert kubekit.node(kube, "gpu-2")["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_a_passive_pass_leaves_a_taint_an_active_check_set(kube, nvml):
    active = kubekit.gpucheck_taint("active")
    kubekit.add_node(kube, "gpu-3", taints=[active])
    done = gpucheck(kube, nvml, "gpu-3", PASSES)
    assert done.returncode == 0 and "taint is the active check's" in done.stderr, done.stderr
    assert kubekit.gpuchecks_taint(kubekit.node(kube, "gpu-3")) == [active]


def test_an_admins_taint_made_between_read_and_write_is_kept(kube, monkeypatch):
    """The write carries the resourceVersion the decision was made on: a taint added meanwhile makes it a conflict,
    the Node is read again and the decision made again, never written over."""
    kubekit.add_node(kube, "gpu-4")
    reads, read = [], api.read_node

    def read_then_an_admin_taints(client, name):
        found = read(client, name)
        if not reads:
            kube.kubectl("taint", "node", name, kubekit.kubectl_taint(ADMIN))
        reads.append(found["metadata"]["resourceVersion"])
        return found

    monkeypatch.setattr(api, "read_node", read_then_an_admin_taints)
    change = api.tell("health-check", 2, ["gpu.xid Xid 79 on GPU2"], "gpu-4", str(kube.kubeconfig))
    assert change.verb == "drain" and len(reads) == 2 and reads[0] != reads[1], reads
    taints = not_kubernetes_own(kubekit.node(kube, "gpu-4"))
    assert {(t["key"], t.get("value")) for t in taints} == {("maintenance", "psu-swap"), ("gpucheck/unhealthy",
                                                                                         "passive")}, taints


def test_the_service_account_of_deploy_kubernetes_may_do_this_and_no_less(kube, nvml, tmp_path):
    kube.kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes" / "10-rbac.yaml"))
    kubekit.add_node(kube, "gpu-5")
    mine = kubekit.service_account_kubeconfig(kube, "gpucheck", "gpucheck", tmp_path / "gpucheck.kubeconfig")
    done = gpucheck(kube, nvml, "gpu-5", FAILS, kubeconfig=mine)
    assert done.returncode == 2 and "tainted gpu-5" in done.stderr, done.stderr
    found = kubekit.node(kube, "gpu-5")
    assert kubekit.gpuchecks_taint(found) and kubekit.condition(found, "GPUCheckHealthy")["status"] == "False"
    # the namespace's default account holds no such right: one line, exit 3, nothing written
    other = kubekit.service_account_kubeconfig(kube, "gpucheck", "default", tmp_path / "default.kubeconfig")
    refused = gpucheck(kube, nvml, "gpu-5", PASSES, kubeconfig=other)
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("gpucheck: kubernetes: cannot read Node gpu-5: 403 "), refused.stderr
    assert "deploy/kubernetes/10-rbac.yaml" in refused.stderr and "Traceback" not in refused.stderr
    assert kubekit.gpuchecks_taint(kubekit.node(kube, "gpu-5"))


@pytest.mark.parametrize("case, says", [
    ("unknown node", "cannot read Node no-such-node: 404 "),
    ("no kubeconfig", "gpucheck: kubernetes: no Kubernetes configuration from "),
    ("nothing listening", "the API server did not answer"),
])
def test_what_keeps_it_from_the_api_is_one_line_and_exit_3(kube, nvml, tmp_path, case, says):
    node, config = "no-such-node" if case == "unknown node" else "gpu-1", kube.kubeconfig
    if case == "no kubeconfig":
        config = tmp_path / "missing"
    elif case == "nothing listening":
        config = kubekit.unreachable_kubeconfig(kube, tmp_path / "elsewhere")
    done = gpucheck(kube, nvml, node, PASSES, kubeconfig=config)
    assert done.returncode == 3 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_with_three_of_four_nodes_of_a_rack_failing_at_once_the_breaker_holds_the_third_taint(kube):
    """Three runs at once, on three Nodes of rack K (group share 0.5: two of four may go): each orders the recent
    taints by their annotation, then by name, and whichever came third holds its taint (or takes it back)."""
    rack = ("k1", "k2", "k3", "k4")
    for name in rack:
        kubekit.add_node(kube, name, {"rack": "K"})
    settings = BreakerSettings(fleet_fraction=1.0, group_fraction=0.5, groups={"rack": ("K", rack)})
    with ThreadPoolExecutor(3) as pool:
        changes = list(pool.map(lambda name: api.tell("health-check", 2, [f"gpu.xid Xid 79 on {name}"], name,
                                                      str(kube.kubeconfig), held_by=settings), rack[:3]))
    verbs = sorted(change.verb for change in changes)
    assert verbs == ["drain", "drain", "held"], [change.describe() for change in changes]
    (held,) = [change for change in changes if change.verb == "held"]
    assert "held by breaker: 3 of 4 nodes of rack K drained by gpucheck within 10 min" in held.why, held.why
    found = kubekit.node(kube, held.node)
    assert not kubekit.gpuchecks_taint(found) and node_rule.TAINTED_AT not in found["metadata"].get("annotations", {})
    assert kubekit.condition(found, "GPUCheckHealthy")["status"] == "False"  # the failure still said
    tainted = [kubekit.node(kube, change.node) for change in changes if change.verb == "drain"]
    assert all(kubekit.gpuchecks_taint(node) and node_rule.TAINTED_AT in node["metadata"]["annotations"]
               for node in tainted)
