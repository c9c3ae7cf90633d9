"""The training benchmark's figures from recorded per-rank result lines (workloads/training_results.py)."""

from __future__ import annotations

import pytest

from gpucheck.workloads.results import judge_smoke, parse_results
from gpucheck.workloads.training_results import efficiency, fleet_median, per_gpu_by_rank, run_figures

# Two ranks of resnet_horovod_keras as mpirun --tag-output prints them (3 timed iterations each).
RECORDED = """\
[1,0]<stdout>:GPUCHECK_RESULT {"ok":true,"workload":"resnet_horovod_keras","rank":0,"size":2,"hostname":"n1",\
"images_per_s":101.0,"iteration_images_per_s":[99.0,101.0,103.0],"loss_finite":true,"loss_first":6.9,\
"loss_last":6.91,"weights_sha256":"aa","precision":"fp32"}
[1,1]<stdout>:GPUCHECK_RESULT {"ok":true,"workload":"resnet_horovod_keras","rank":1,"size":2,"hostname":"n2",\
"images_per_s":97.0,"iteration_images_per_s":[95.0,97.0,98.0],"loss_finite":true,"loss_first":6.9,\
"loss_last":6.92,"weights_sha256":"aa","precision":"fp32"}
"""


def test_a_runs_total_per_gpu_and_iteration_spread_come_from_its_ranks():
    figures = run_figures(parse_results(RECORDED))
    assert figures["images_per_s"] == 198.0 and figures["images_per_s_per_gpu"] == 99.0 and figures["ranks"] == 2
    assert figures["iteration_images_per_s"] == [194.0, 198.0, 201.0]
    assert (figures["min"], figures["max"]) == (194.0, 201.0)
    assert per_gpu_by_rank(parse_results(RECORDED)) == {0: 101.0, 1: 97.0}


def test_failed_ranks_and_odd_figures_count_for_nothing():
    rows = parse_results(RECORDED)
    rows[1].update(ok=False)
    rows.append({"ok": True, "rank": 2, "images_per_s": float("nan")})
    rows.append({"ok": True, "rank": 3, "images_per_s": True})
    figures = run_figures(rows)
    assert figures["images_per_s"] == 101.0 and figures["ranks"] == 1
    assert run_figures([])["images_per_s"] is None and run_figures([])["min"] is None


def test_the_benchmarks_loss_need_only_stay_finite_and_the_weights_agree():
    rows = parse_results(RECORDED)
    assert judge_smoke(rows, 2, "resnet_horovod_keras", loss_rule="loss_finite")["passed"]
    assert not judge_smoke(rows, 2, "resnet_horovod_keras")["passed"]  # the smoke rule: the loss must fall
    rows[0]["loss_finite"] = False
    verdict = judge_smoke(rows, 2, "resnet_horovod_keras", loss_rule="loss_finite")
    assert not verdict["passed"] and "loss was not finite on rank 0 on n1" in verdict["reasons"][0]


@pytest.mark.parametrize("total,gpus,single,expected", [
    (16621.0, 8, 2470.0, 0.8411),  # NVIDIA's DGX A100 PyTorch AMP run: 6.72x of 1 GPU
    (17400.0, 8, 2375.0, 0.9158),  # the TensorFlow AMP + XLA run
    (None, 8, 2470.0, None), (100.0, 0, 10.0, None), (100.0, 2, None, None),
])
def test_efficiency_is_the_runs_images_over_gpus_times_one_gpu(total, gpus, single, expected):
    assert efficiency(total, gpus, single) == (pytest.approx(expected, abs=1e-4) if expected else None)


def test_the_fleet_median_ignores_nodes_without_a_figure():
    assert fleet_median({"a": 100.0, "b": 90.0, "c": 10.0, "d": None}) == 90.0
    assert fleet_median({}) is None
