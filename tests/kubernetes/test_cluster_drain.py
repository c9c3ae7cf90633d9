"""`gpucheck cluster --launcher kubernetes --drain` against a real kube-apiserver with RBAC on (tests/kubekit.py): the
written report's verdicts become each Node's taint, condition and label as the `cluster` path's (node_rule), an
admin's cordon and taints stay, a node that could not be checked is left as it was, and a refusal every Node would
meet is said once. The whole run on real kubelets: tests/kubernetes/test_lab_nodes.py."""

from __future__ import annotations

import pytest

import kubekit
from gpucheck.cluster.context import ClusterContext, Options
from gpucheck.cluster.inventory import Inventory
from gpucheck.cluster.launchers import named

ADMIN = kubekit.ADMIN_TAINT
ACTIVE = kubekit.gpucheck_taint("active")
ECC = "gpucheck: gpu.ecc_errors 3 uncorrectable ECC errors on GPU2"


def report(**statuses: str) -> dict:
    """A written cluster report's nodes and drain list, as handoff.document writes them: a failed node is on it."""
    return {"nodes": {node: {"status": status} for node, status in statuses.items()},
            "drain": [{"node": node, "reason": ECC} for node, status in statuses.items() if status == "fail"]}


def drain(kubeconfig, doc: dict) -> tuple[list[dict[str, str]], str | None]:
    ctx = ClusterContext(Options(launcher="kubernetes", drain=True, kubeconfig=str(kubeconfig)),
                         Inventory([], "all", None, []))
    return named("kubernetes").drain(ctx, doc)


def test_the_verdicts_taint_untaint_and_leave_each_node_as_the_cluster_path_may(kube):
    kubekit.add_node(kube, "drain-1", taints=[ADMIN], cordoned=True)  # fails: gpucheck's taint beside the admin's
    kubekit.add_node(kube, "drain-2", taints=[ACTIVE])  # passes: the active check's taint goes
    kubekit.add_node(kube, "drain-3", taints=[ACTIVE])  # could not be checked: nothing changes
    done, error = drain(kube.kubeconfig, report(**{"drain-1": "fail", "drain-2": "warn", "drain-3": "error",
                                                  "drain-9": "pass"}))
    actions = {d["node"]: d["action"] for d in done}
    assert actions == {"drain-1": "drain", "drain-2": "resume", "drain-3": "keep", "drain-9": "error"}, done
    assert error and error.startswith("1 node(s) not updated: cannot read Node drain-9: 404 "), error

    failed = kubekit.node(kube, "drain-1")
    assert kubekit.gpuchecks_taint(failed) == [ACTIVE] and ADMIN in failed["spec"]["taints"]
    assert failed["spec"]["unschedulable"] is True and failed["metadata"]["labels"]["gpucheck/health"] == "fail"
    condition = kubekit.condition(failed, "GPUCheckHealthy")
    assert (condition["status"], condition["message"]) == ("False", ECC.removeprefix("gpucheck: ")), condition
    assert next(d["text"] for d in done if d["node"] == "drain-1").startswith(
        "tainted drain-1 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors")

    passed = kubekit.node(kube, "drain-2")
    assert not kubekit.gpuchecks_taint(passed) and passed["metadata"]["labels"]["gpucheck/health"] == "warn"
    unjudged = kubekit.node(kube, "drain-3")  # its controllers change it (not-ready): gpucheck's parts are the same
    assert kubekit.gpuchecks_taint(unjudged) == [ACTIVE]
    assert "gpucheck/health" not in unjudged["metadata"].get("labels", {})
    assert kubekit.condition(unjudged, "GPUCheckHealthy") is None


@pytest.mark.parametrize("case", ["rights", "nothing listening"])
def test_a_refusal_every_node_would_meet_stops_it_said_once(kube, tmp_path, case):
    kubekit.add_node(kube, f"drain-{case[0]}1")
    kubekit.add_node(kube, f"drain-{case[0]}2")
    if case == "rights":  # the namespace's default account: no right on Nodes
        config = kubekit.service_account_kubeconfig(kube, "default", "default", tmp_path / "default.kubeconfig")
    else:
        config = kubekit.unreachable_kubeconfig(kube, tmp_path / "elsewhere")
    done, error = drain(config, report(**{f"drain-{case[0]}1": "fail", f"drain-{case[0]}2": "fail"}))
    assert [d["action"] for d in done] == ["error"], done
    says = " 403 " if case == "rights" else "the API server did not answer"
    assert error and error.startswith(f"cannot read Node drain-{case[0]}1:") and says in error, error
    assert not kubekit.gpuchecks_taint(kubekit.node(kube, f"drain-{case[0]}2"))
