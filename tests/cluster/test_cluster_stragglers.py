"""Stragglers: measured figures against the fleet median."""

from __future__ import annotations

from cluster_helpers import node_report

from gpucheck.cluster.stages.stragglers import find, node_figures
from gpucheck.model import Status


def test_figures_come_from_bw_checks_and_per_port_dicts() -> None:
    reports = {
        "node01": node_report("node01", measured={"bw.nccl_allreduce": 480.0, "host.read_throughput": 2100,
                                                  "bw.ib_loopback": {"mlx5_0/1": 390.0, "mlx5_1/1": 391.0}}),
        "node02": node_report("node02", measured={"bw.nccl_allreduce": 470.5}),
    }
    figures = node_figures(reports)
    assert figures == {"bw.nccl_allreduce": {"node01": 480.0, "node02": 470.5},
                       "host.read_throughput": {"node01": 2100.0},
                       "bw.ib_loopback[mlx5_0/1]": {"node01": 390.0}, "bw.ib_loopback[mlx5_1/1]": {"node01": 391.0}}


def test_a_node_below_the_fraction_of_the_median_is_a_named_straggler() -> None:
    values = {f"node{i:02d}": 480.0 + i for i in range(1, 8)}
    values["node05"] = 300.0
    [result] = find({"bw.nccl_allreduce": values}, fraction=0.9)
    assert result.check == "cluster.straggler.bw.nccl_allreduce"
    assert result.status == Status.WARN
    assert list(result.nodes) == ["node05"]
    assert result.reason.startswith("node05: 300 (62% of median)")


def test_within_the_fraction_passes_and_one_node_is_not_compared() -> None:
    [result] = find({"bw.x": {"a": 100.0, "b": 95.0, "c": 91.0}, "bw.only": {"a": 1.0}}, fraction=0.9)
    assert result.check == "cluster.straggler.bw.x" and result.status == Status.PASS


def test_the_fraction_is_the_knob() -> None:
    values = {"a": 100.0, "b": 100.0, "c": 85.0}
    assert find({"m": values}, 0.9)[0].status == Status.WARN
    assert find({"m": values}, 0.8)[0].status == Status.PASS
