"""kubernetes/node_rule: what a run does to its Node, decided from the Node as the API gives it (JSON), by
drain_rule's table: gpucheck's taint set, replaced or removed only by the paths that may; an admin's taints and
cordon never touched; a run that could not judge changes nothing."""

from __future__ import annotations

import datetime as dt

from gpucheck.kubernetes import node_rule
from gpucheck.model import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN

NOW = dt.datetime(2026, 11, 30, 1, 2, 3, tzinfo=dt.timezone.utc)
ADMIN = {"key": "maintenance", "value": "psu", "effect": "NoExecute"}
FINDING = "gpu.ecc_errors GPU3: 2 uncorrected"


def a_node(*taints: dict[str, str], cordoned: bool = False) -> dict:
    return {"metadata": {"name": "gpu-7", "resourceVersion": "41"},
            "spec": {"taints": list(taints), **({"unschedulable": True} if cordoned else {})}}


def ours(kind: str) -> dict[str, str]:
    return {"key": node_rule.TAINT_KEY, "value": kind, "effect": node_rule.EFFECT}


def test_a_failure_adds_gpuchecks_taint_beside_an_admins_and_says_why():
    change = node_rule.decide(a_node(ADMIN, cordoned=True), "health-check", EXIT_FAIL, [FINDING], now=NOW)
    assert change.verb == "drain" and change.taints == [ADMIN, ours("passive")]
    assert change.condition == {"type": "GPUCheckHealthy", "status": "False", "reason": "ChecksFailed",
                                "message": FINDING}
    assert change.labels == {"gpucheck/health": "fail"}
    assert change.annotations == {"gpucheck/tainted-at": "2026-11-30T01:02:03+00:00"}  # the breaker's order
    tainted = {"metadata": {"name": "gpu-7", "annotations": change.annotations}, "spec": {"taints": change.taints}}
    assert node_rule.tainted_at(tainted) == NOW
    back = node_rule.taken_back(tainted)
    assert back.taints == [ADMIN] and back.annotations == {"gpucheck/tainted-at": None}
    assert back.condition is None and back.labels == {}  # the failure still said


def test_a_pass_removes_only_a_taint_its_kind_may_remove():
    passive = node_rule.decide(a_node(ADMIN, ours("passive")), "health-check", EXIT_WARN, [])
    assert passive.verb == "resume" and passive.taints == [ADMIN] and passive.labels["gpucheck/health"] == "warn"
    assert passive.annotations == {"gpucheck/tainted-at": None}
    assert passive.condition["status"] == "True" and passive.condition["reason"] == "ChecksPassedWithWarnings"
    # what an active check or the watcher saw waits for an active check's pass, as on Slurm (docs/slurm.md)
    for kind in ("active", "watch"):
        kept = node_rule.decide(a_node(ours(kind)), "health-check", EXIT_OK, [])
        assert kept.verb == "keep" and not kept.changes_anything, kept
    active = node_rule.decide(a_node(ours("watch")), "scheduled", EXIT_OK, [], active_passed=True, now=NOW)
    assert active.verb == "resume" and active.taints == []
    assert active.labels == {"gpucheck/last-active-pass": "2026-11-30T01-02-03Z", "gpucheck/health": "pass"}


def test_an_active_failure_takes_over_a_passive_taint_and_a_passive_one_never_an_active():
    taken = node_rule.decide(a_node(ours("passive")), "scheduled", EXIT_FAIL, [FINDING])
    assert taken.verb == "drain" and taken.taints == [ours("active")]
    kept = node_rule.decide(a_node(ours("active")), "health-check", EXIT_FAIL, ["gpu.xid Xid 79"])
    assert kept.verb == "keep" and kept.taints is None and kept.condition is None


def test_a_run_that_could_not_judge_changes_nothing():
    for node in (a_node(), a_node(ours("passive"))):
        change = node_rule.decide(node, "health-check", EXIT_UNKNOWN, [])
        assert change.verb == "keep" and not change.changes_anything


def test_gpuchecks_key_with_a_value_it_never_writes_is_someone_elses():
    theirs = {"key": node_rule.TAINT_KEY, "value": "rma-4411", "effect": "NoSchedule"}
    change = node_rule.decide(a_node(theirs), "scheduled", EXIT_OK, [], active_passed=True)
    assert change.holder == "admin-drain" and change.verb == "keep" and change.taints is None
    assert "someone else's" in change.describe()


def test_the_condition_keeps_its_transition_time_while_its_status_stays():
    before = {"type": "GPUCheckHealthy", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}
    node = {**a_node(), "status": {"conditions": [before]}}
    again = node_rule.decide(node, "health-check", EXIT_OK, [])
    assert node_rule.condition_with_times(again, node, NOW)["lastTransitionTime"] == "2026-11-01T00:00:00Z"
    failed = node_rule.decide(node, "health-check", EXIT_FAIL, [FINDING])
    times = node_rule.condition_with_times(failed, node, NOW)
    assert times["lastTransitionTime"] == times["lastHeartbeatTime"] == "2026-11-30T01:02:03Z"
