"""Consistency across nodes: the majority value, the odd nodes named with theirs, ties, missing keys."""

from __future__ import annotations

import hashlib

from cluster_helpers import node_report

from gpucheck.cluster.stages.consistency import compare, required_libraries
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


# ---------------------------------------------------------------- a library the profile requires, found nowhere

NCCL_AND_MPI = {"libraries": {"required": ["cudart", "libnccl", "mpi"]}}  # a profile's thresholds ("lib" allowed)


def without_nccl(*nodes: str) -> dict:
    return {node: {"libraries": {"nccl": {"tf": None}, "mpi": {"tf": "Open MPI 4.1.4"}}} for node in nodes}


def test_required_libraries_come_from_the_thresholds_without_their_lib_prefix() -> None:
    assert required_libraries(NCCL_AND_MPI) == {"cudart", "nccl", "mpi"}
    assert required_libraries(None) == frozenset()  # an older agent's report: no thresholds
    assert required_libraries({"libraries": {"required": "nccl"}}) == frozenset()  # not a list: nothing read


def test_a_required_library_found_on_no_node_fails_naming_it_and_every_node() -> None:
    fleet = facts(3, **without_nccl("node01", "node02", "node03"))
    required = {node: required_libraries(NCCL_AND_MPI) for node in fleet}
    result = by_check(compare(fleet, required))["cluster.consistency.libraries.nccl.tf"]
    assert result.status == Status.FAIL
    assert result.reason == ("nccl (tf) not found on node01, node02, node03 (every node), and their profile "
                             "requires nccl")
    assert result.nodes == {n: "nccl (tf) not found (the profile requires nccl)" for n in fleet}
    assert result.measured == {"(not found)": ["node01", "node02", "node03"]}
    assert "libs.nccl" in result.remediation
    assert by_check(compare(fleet, required))["cluster.consistency.libraries.mpi.tf"].status == Status.PASS


def test_a_library_no_profile_requires_found_on_no_node_passes_and_says_so() -> None:
    fleet = facts(3, **without_nccl("node01", "node02", "node03"))
    required = {node: frozenset({"mpi"}) for node in fleet}
    result = by_check(compare(fleet, required))["cluster.consistency.libraries.nccl.tf"]
    assert result.status == Status.PASS and result.nodes == {}
    assert result.reason == "all 3 nodes: nccl (tf) (not found) (not required by their profile)"


def test_the_nodes_lacking_a_required_library_are_blamed_not_the_one_that_has_it() -> None:
    # a majority without the library must not make the node with it the odd one
    fleet = facts(4, **without_nccl("node01", "node02", "node03"))
    required = {node: required_libraries(NCCL_AND_MPI) for node in fleet}
    result = by_check(compare(fleet, required))["cluster.consistency.libraries.nccl.tf"]
    assert result.status == Status.FAIL and set(result.nodes) == {"node01", "node02", "node03"}
    assert result.reason == ("nccl (tf) not found on node01, node02, node03, and their profile requires nccl; "
                             "1 other: 2.18.3")
    assert result.expected == "2.18.3"


def test_only_the_nodes_whose_profile_requires_the_library_are_blamed() -> None:
    fleet = facts(3, **without_nccl("node01", "node02", "node03"))
    required = {"node01": required_libraries(NCCL_AND_MPI), "node02": frozenset(), "node03": frozenset()}
    result = by_check(compare(fleet, required))["cluster.consistency.libraries.nccl.tf"]
    assert result.status == Status.FAIL and list(result.nodes) == ["node01"]
    assert result.reason.startswith("nccl (tf) not found on node01, and their profile requires nccl; 2 others: ")


def test_the_consistency_stage_reads_each_nodes_required_libraries_from_its_report() -> None:
    from gpucheck.cluster import handoff
    from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
    from gpucheck.cluster.inventory import Host, Inventory
    from gpucheck.cluster.stages.consistency import consistency_stage

    names = ["node01", "node02"]
    hosts = [Host(n, "127.0.0.1", 2200 + i, "root", None, (), True) for i, n in enumerate(names)]
    ctx = ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))
    for name in names:
        report = node_report(name)
        report["facts"].update(without_nccl(name)[name])
        report["thresholds"] = NCCL_AND_MPI
        ctx.nodes[name] = NodeOutcome(name, Status.PASS, "x", "report", 1.0, 0, report)
    ctx.results.extend(consistency_stage(ctx))
    assert by_check(ctx.results)["cluster.consistency.libraries.nccl.tf"].status == Status.FAIL
    assert [node for node, _ in handoff.drain(ctx)] == names
    assert handoff.overall_exit(ctx) == 2


# ---------------------------------------------------------------- gpu.sdc: the same bits across nodes

GOOD = hashlib.sha256(b"the seeded bf16 GEMM's result").hexdigest()
BAD = hashlib.sha256(b"one flipped bit").hexdigest()
OTHER = hashlib.sha256(b"the same GEMM under another cuBLAS").hexdigest()
KEY = "h100-sxm5-80gb | cupy 14.2.0 | cuBLAS 120804 | driver 580.159.04"
KEY2 = "h100-sxm5-80gb | cupy 14.2.0 | cuBLAS 120902 | driver 580.159.04"


def sdc(checksum: str = GOOD, key: str = KEY, disagree: list[str] | None = None) -> dict:
    return {"burnin": {"gpus": {}, "sdc": {"checksum": checksum, "key": key, "disagree": disagree or []}}}


def sdc_results(fleet: dict[str, dict]) -> dict:
    return {r.check: r for r in compare(fleet) if r.check.startswith("cluster.consistency.sdc")}


def test_sdc_same_bits_on_every_node_passes() -> None:
    results = sdc_results(facts(4, **{f"node0{i}": sdc() for i in range(1, 5)}))
    assert list(results) == [f"cluster.consistency.sdc[{KEY}]"]
    result = results[f"cluster.consistency.sdc[{KEY}]"]
    assert result.status == Status.PASS and result.nodes == {}
    assert result.reason == f"all 4 nodes compute the same bits ({GOOD[:16]})"


def test_sdc_the_node_computing_other_bits_is_named_and_blamed() -> None:
    fleet = facts(5, **{f"node0{i}": sdc(BAD if i == 3 else GOOD) for i in range(1, 6)})
    result = sdc_results(fleet)[f"cluster.consistency.sdc[{KEY}]"]
    assert result.status == Status.FAIL and result.expected == GOOD
    assert result.reason == f"different bits: node03: {BAD[:16]}, 4 others: {GOOD[:16]}"
    assert result.nodes == {"node03": f"computes different bits: {BAD[:16]}, not {GOOD[:16]} as 4 others"}
    assert result.measured == {GOOD: ["node01", "node02", "node04", "node05"], BAD: ["node03"]}


def test_sdc_nodes_with_other_library_versions_are_not_compared() -> None:
    fleet = facts(4, node01=sdc(), node02=sdc(), node03=sdc(OTHER, KEY2), node04=sdc(OTHER, KEY2))
    results = sdc_results(fleet)
    assert set(results) == {f"cluster.consistency.sdc[{KEY}]", f"cluster.consistency.sdc[{KEY2}]"}
    assert all(r.status == Status.PASS and not r.nodes for r in results.values())
    assert results[f"cluster.consistency.sdc[{KEY2}]"].reason == f"all 2 nodes compute the same bits ({OTHER[:16]})"


def test_sdc_nodes_without_a_checksum_are_listed_not_compared() -> None:
    fleet = facts(4, node01=sdc(), node02=sdc(), node03=sdc())
    fleet["node02"]["burnin"]["sdc"] = None  # its gpu.sdc could not run
    result = sdc_results(fleet)["cluster.consistency.sdc"]
    assert result.status == Status.SKIP and result.measured == {"not_compared": ["node02", "node04"]}
    assert result.reason == ("not compared: node02, node04 reported no gpu.sdc checksum (their own gpu.sdc result "
                             "says why)")
    assert sdc_results(fleet)[f"cluster.consistency.sdc[{KEY}]"].reason.startswith("all 2 nodes")


def test_sdc_a_split_without_majority_fails_and_blames_nobody() -> None:
    result = sdc_results(facts(2, node01=sdc(GOOD), node02=sdc(BAD)))[f"cluster.consistency.sdc[{KEY}]"]
    assert result.status == Status.FAIL and result.nodes == {} and result.expected is None
    assert result.reason.startswith("different bits and no majority to say which are wrong: ")
    assert f"node01: {GOOD[:16]}" in result.reason and f"node02: {BAD[:16]}" in result.reason
    assert "rerun with a third node of the same key" in result.reason


def test_sdc_a_key_only_one_node_has_is_not_compared() -> None:
    fleet = facts(3, node01=sdc(), node02=sdc(), node03=sdc(OTHER, KEY2))
    result = sdc_results(fleet)[f"cluster.consistency.sdc[{KEY2}]"]
    assert result.status == Status.SKIP and result.nodes == {}
    assert result.reason == f"only node03 has {KEY2}: no other node to compare its checksum with"


def test_sdc_a_node_whose_own_gpus_disagree_is_blamed_by_the_cluster_too() -> None:
    fleet = facts(3, node01=sdc(), node02=sdc(disagree=["GPU3"]), node03=sdc())
    result = sdc_results(fleet)[f"cluster.consistency.sdc[{KEY}]"]
    assert result.status == Status.FAIL
    assert result.nodes == {"node02": "its own GPUs compute different bits (GPU3): see its gpu.sdc"}
    assert result.reason == (f"all 3 nodes compute the same bits ({GOOD[:16]}); node02: its own GPUs compute "
                             "different bits (GPU3): see its gpu.sdc")


def test_sdc_nothing_when_no_node_ran_the_burn_in() -> None:
    assert sdc_results(facts(4)) == {}


def test_sdc_the_odd_node_is_drained_by_the_consistency_stage() -> None:
    from gpucheck.cluster import handoff
    from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
    from gpucheck.cluster.inventory import Host, Inventory
    from gpucheck.cluster.stages import order as stages

    names = ["node01", "node02", "node03"]
    hosts = [Host(n, "127.0.0.1", 2200 + i, "root", None, (), True) for i, n in enumerate(names)]
    ctx = ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))
    for name in names:
        report = node_report(name)
        report["facts"].update(sdc(BAD if name == "node02" else GOOD))
        ctx.nodes[name] = NodeOutcome(name, Status.PASS, "x", "report", 1.0, 0, report)
    stages.run_stage("consistency", stages.consistency, ctx)
    assert handoff.drain(ctx) == [("node02", f"gpucheck: cluster.consistency.sdc[{KEY}] computes different bits: "
                                             f"{BAD[:16]}, not {GOOD[:16]} as 2 others")]
    assert handoff.overall_exit(ctx) == 2
