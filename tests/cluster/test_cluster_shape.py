"""Stage `shape` (cluster/stages/shape.py): failures and slow pairs that gather behind one rack, leaf switch or PDU
are blamed on it, and only beyond what chance explains; on contexts as the fan-out and the earlier stages leave
them, with the inventory's rack/leaf_switch/pdu on the hosts as cluster/inventory.py reads them."""

from __future__ import annotations

import math

import pytest

from gpucheck.cluster.context import ClusterContext, ClusterResult, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.stages.shape import CHANCE_MAX, chance_at_least, gathered, shape_stage
from gpucheck.model import Status


def prod_like(bad: dict[str, str] = (), pairs: list[dict] = (), nodes: int = 26, per_rack: int = 4,
              leaf_of_rack: int = 2, failed_stage: dict[str, str] = ()) -> ClusterContext:
    """node01..nodeNN, rack A.. (per_rack each), a leaf switch per leaf_of_rack racks, a PDU per half rack;
    `bad`: node -> the check it fails in its own report."""
    hosts, names = [], [f"node{i:02d}" for i in range(1, nodes + 1)]
    for i, name in enumerate(names):
        rack = chr(ord("A") + i // per_rack)
        leaf = f"leaf{i // (per_rack * leaf_of_rack) + 1}"
        hosts.append(Host(name, f"10.0.0.{i + 1}", 22, "root", None, (), True,
                          vars={"rack": rack, "leaf_switch": leaf, "pdu": f"{rack}-pdu{i % per_rack // 2 + 1}"}))
    ctx = ClusterContext(Options(), Inventory(["test"], "all", None, hosts))
    for name in names:
        check = dict(bad).get(name)
        results = [{"check": "gpu.count", "status": "pass"}] + ([{"check": check, "status": "fail"}] if check else [])
        ctx.nodes[name] = NodeOutcome(name, Status.FAIL if check else Status.PASS, "", "report",
                                      report={"host": name, "results": results})
    ctx.pairs = list(pairs)
    for check, blamed in dict(failed_stage).items():
        ctx.results.append(ClusterResult(check, Status.WARN, reason="slow", nodes={blamed: "slow"}))
    return ctx


def only(results):
    (result,) = results
    return result


def test_the_chance_is_the_hypergeometric_tail():
    # 3 of the 4 bad nodes of 26 in one rack of 4: (C(4,3) C(22,1) + C(4,4)) / C(26,4) = 89 / 14950
    assert chance_at_least(26, 4, 4, 3) == pytest.approx(89 / 14950)
    assert chance_at_least(26, 4, 4, 0) == pytest.approx(1.0)
    assert chance_at_least(10, 2, 5, 2) == pytest.approx(math.comb(8, 3) / math.comb(10, 5))


def test_three_of_four_nodes_of_one_rack_failing_alike_are_blamed_on_the_rack():
    ctx = prod_like({"node05": "gpu.burn", "node06": "gpu.burn", "node07": "gpu.burn", "node20": "gpu.ecc_errors"})
    result = only(shape_stage(ctx))
    assert result.status == Status.WARN
    assert result.reason == ("rack B: 3 of 4 nodes (node05, node06, node07), 1 of 22 elsewhere (by chance: 0.60%): "
                             "all in gpu.burn")
    assert result.nodes == dict.fromkeys(("node05", "node06", "node07"), result.reason)  # node20: on its own
    assert result.measured["rack"]["G"] == 2


def test_failures_spread_over_the_racks_blame_no_rack():
    ctx = prod_like({"node01": "gpu.burn", "node06": "gpu.burn", "node11": "gpu.xid", "node16": "gpu.burn"})
    result = only(shape_stage(ctx))
    assert result.status == Status.PASS and "4 of 26 node(s) failed or warned; none gather" in result.reason
    assert result.nodes == {}


def test_two_bad_nodes_in_a_rack_of_four_are_not_enough_when_others_fail_elsewhere():
    # 2 of 4 in rack A with 3 more elsewhere: P = 10.6 %, chance explains it
    ctx = prod_like({"node01": "gpu.burn", "node02": "gpu.burn", "node09": "gpu.burn", "node13": "gpu.burn",
                     "node21": "gpu.burn"})
    assert only(shape_stage(ctx)).status == Status.PASS


def test_a_small_cluster_blames_the_rack_whose_every_node_and_no_other_failed():
    """4 nodes in 2 racks of 2 (the lab): both of rack A fail and nothing else. Chance alone says 1 in 6, but
    every node of the rack and no other is the rack's signature."""
    ctx = prod_like({"node01": "gpu.burn", "node02": "gpu.burn"}, nodes=4, per_rack=2, leaf_of_rack=2)
    result = only(shape_stage(ctx))
    assert result.status == Status.WARN and result.reason.startswith("rack A: 2 of 2 nodes (node01, node02), 0 of 2 "
                                                                      "elsewhere (by chance: 16.67%)")
    # the PDU feeding just these two is as much to blame (the report cannot tell them apart); the leaf switch of all
    # four is not
    assert "; PDU A-pdu1: 2 of 2 nodes (node01, node02)" in result.reason and "leaf switch" not in result.reason


def test_a_stage_that_blamed_nodes_counts_as_their_failure():
    ctx = prod_like(failed_stage={"cluster.straggler.bw.nccl_allreduce": "node09"})
    for name in ("node10", "node11"):
        ctx.results.append(ClusterResult("cluster.network", Status.FAIL, reason="slow", nodes={name: "slow"}))
    result = only(shape_stage(ctx))
    assert result.status == Status.WARN and result.reason.startswith("rack C: 3 of 4 nodes (node09, node10, node11)")
    assert result.reason.endswith(": different checks")


def test_slow_pairs_behind_one_leaf_switch_blame_it_and_the_nodes_behind_it():
    """leaf2 holds node09..node16; every pair from it to the others is slow, pairs among the others are not."""
    ctx = prod_like(nodes=24)
    names = sorted(ctx.nodes)
    behind = {f"node{i:02d}" for i in range(9, 17)}
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            crossing = (a in behind) != (b in behind)
            pairs.append({"a": a, "b": b, "value": 9.0 if crossing else 23.0, "unit": "Gb/s",
                          "status": "warn" if crossing else "pass"})
    ctx.pairs = pairs
    result = only(shape_stage(ctx))
    assert result.status == Status.WARN
    assert result.reason.startswith("leaf switch leaf2: 128 of 156 pairs (")  # 8 x 16 crossing, of 8 x 16 + 28
    assert " and 120 more), 0 of 120 elsewhere (by chance: 0.00%)" in result.reason
    assert set(result.nodes) == behind  # the far ends are behind other switches


def test_one_slow_node_is_the_network_stages_to_blame_not_its_switch():
    """node03's pairs all fail (the network stage blamed it): no leaf switch is blamed for them."""
    ctx = prod_like(nodes=8, per_rack=2, leaf_of_rack=1)
    names = sorted(ctx.nodes)
    ctx.pairs = [{"a": a, "b": b, "status": "fail" if "node03" in (a, b) else "pass"}
                 for i, a in enumerate(names) for b in names[i + 1:]]
    assert only(shape_stage(ctx)).status == Status.PASS


def test_no_rack_leaf_or_pdu_in_the_inventory_is_a_skip_saying_so():
    ctx = prod_like({"node05": "gpu.burn"})
    for host in ctx.inventory.hosts:
        host.vars.clear()
    result = only(shape_stage(ctx))
    assert result.status == Status.SKIP and "rack, leaf_switch or pdu" in result.reason


def test_a_component_holding_the_whole_cluster_is_never_blamed():
    groups = {"A": ["n1", "n2", "n3"]}
    assert gathered("rack", groups, {"n1", "n2", "n3"}) == []
    assert CHANCE_MAX == 0.01


def test_the_prod_inventory_places_its_26_nodes_in_racks_leaf_switches_and_pdus():
    from pathlib import Path

    from gpucheck.cluster.inventory import load

    inventory = load([str(Path(__file__).resolve().parents[2] / "inventory" / "prod" / "hosts.yml")])
    assert len(inventory.hosts) == 26
    racks = {h.vars["rack"] for h in inventory.hosts}
    assert racks == set("ABCDEFG") and {h.vars["leaf_switch"] for h in inventory.hosts} == {
        "leaf01", "leaf02", "leaf03", "leaf04"}
    assert all(h.vars["pdu"].startswith(h.vars["rack"] + "-") for h in inventory.hosts)


def test_infiniband_counters_rising_behind_one_leaf_switch_blame_the_switch_though_every_node_passed():
    """Five nodes of leaf1's eight whose symbol errors rose this run, each within its limit (ib.counters passed):
    no node is bad, but ports moving together behind one switch point at the switch; a node elsewhere whose counters
    rose alone does not move the blame."""
    ctx = prod_like()
    for name in ("node01", "node03", "node05", "node07", "node08", "node20"):
        ctx.nodes[name].report["results"].append({"check": "ib.counters", "status": "pass", "measured": {
            "rose": {"mlx5_0/1": {"symbol_error": 4}}}})
    result = only(shape_stage(ctx))
    assert result.status == Status.WARN
    assert result.reason.startswith("leaf switch leaf1: 5 of 8 nodes whose InfiniBand error counters rose (node01, "
                                    "node03, node05, node07, node08), 1 of 18 elsewhere (by chance: 0.45%)"), (
        result.reason)
    assert set(result.nodes) == {"node01", "node03", "node05", "node07", "node08"}


def test_counters_that_rose_on_nodes_spread_over_the_switches_blame_none():
    ctx = prod_like()
    for name in ("node01", "node10", "node19", "node25"):
        ctx.nodes[name].report["results"].append({"check": "ib.counters", "status": "pass", "measured": {
            "rose": {"mlx5_0/1": {"link_error_recovery": 1}}}})
    assert only(shape_stage(ctx)).status == Status.PASS
