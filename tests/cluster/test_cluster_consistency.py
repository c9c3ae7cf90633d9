"""Consistency across nodes: the majority value, the odd nodes named with theirs, ties, missing keys."""

from __future__ import annotations

from cluster_helpers import node_report

from gpucheck.cluster.consistency import compare
from gpucheck.model import Status


def facts(n: int = 26, **changes: dict) -> dict[str, dict]:
    fleet = {f"node{i:02d}": node_report(f"node{i:02d}")["facts"] for i in range(1, n + 1)}
    for node, change in changes.items():
        fleet[node].update(change)
    return fleet


def by_check(results) -> dict:
    return {r.check: r for r in results}


def test_a_uniform_fleet_passes_every_key() -> None:
    results = by_check(compare(facts(4)))
    assert all(r.status == Status.PASS for r in results.values())
    assert results["cluster.consistency.driver_version"].reason == "all 4 nodes: driver 535.183.01"
    assert {"cluster.consistency.libraries.nccl.tf", "cluster.consistency.frameworks.tf.horovod",
            "cluster.consistency.gpu_models", "cluster.consistency.gpu_count",
            "cluster.consistency.profile", "cluster.consistency.cuda_driver_version"} <= set(results)


def test_the_odd_node_is_named_with_its_value_and_the_majority() -> None:
    result = by_check(compare(facts(26, node07={"driver_version": "535.161.08"})))["cluster.consistency.driver_version"]
    assert result.status == Status.FAIL
    assert result.reason == "node07: driver 535.161.08, 25 others: 535.183.01"
    assert result.expected == "535.183.01"
    assert result.nodes == {"node07": "driver 535.161.08 (majority 535.183.01)"}


def test_several_odd_groups_are_each_named() -> None:
    fleet = facts(10, node03={"gpu_count": 7}, node04={"gpu_count": 7}, node09={"gpu_count": 6})
    result = by_check(compare(fleet))["cluster.consistency.gpu_count"]
    assert result.reason == "node03, node04: GPU count 7; node09: GPU count 6, 7 others: 8"
    assert set(result.nodes) == {"node03", "node04", "node09"}


def test_a_tie_says_so_and_blames_nobody() -> None:
    fleet = facts(4, node03={"driver_version": "550.54.15"}, node04={"driver_version": "550.54.15"})
    result = by_check(compare(fleet))["cluster.consistency.driver_version"]
    assert result.status == Status.FAIL and result.nodes == {}
    assert result.reason.startswith("no majority for driver: ")
    assert "2 nodes (node01, node02) 535.183.01" in result.reason
    assert "2 nodes (node03, node04) 550.54.15" in result.reason


def test_a_key_missing_on_some_nodes_is_a_difference() -> None:
    fleet = facts(5)
    for node in ("node01", "node02", "node03", "node04"):
        fleet[node]["frameworks"] = {**fleet[node]["frameworks"], "torch": {"torch": "2.3.1"}}
    result = by_check(compare(fleet))["cluster.consistency.frameworks.torch.torch"]
    assert result.status == Status.FAIL
    assert result.reason == "node05: torch (torch stack) (missing), 4 others: 2.3.1"


def test_a_version_not_found_differs_from_a_version() -> None:
    fleet = facts(3, node02={"libraries": {"nccl": {"tf": None}, "mpi": {"tf": "Open MPI 4.1.4"}}})
    result = by_check(compare(fleet))["cluster.consistency.libraries.nccl.tf"]
    assert result.reason == "node02: nccl (tf) (not found), 2 others: 2.18.3"


def test_one_node_has_nothing_to_compare_against() -> None:
    results = compare(facts(1))
    assert [r.status for r in results] == [Status.SKIP]
