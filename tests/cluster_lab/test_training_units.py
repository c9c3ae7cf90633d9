"""The training stage (docs/training.md) on a fake RemoteHosts: which runs it starts with what model, and how it
judges the per-rank results it reads back: the fleet median, the SKU's published figure, scaling minimums, CPU
ranks. No SSH, no lab: each rank's GPUCHECK_RESULT line is made from a model of the cluster's speeds."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import pytest
from cluster_lab_helpers import make_ctx, runner_for

from gpucheck.cluster.context import ClusterContext
from gpucheck.cluster.stages import training, training_verdict
from gpucheck.model import Status
from gpucheck.report.cluster.markdown import render_markdown

NODES = ["node01", "node02", "node03", "node04"]
A100_40GB = "NVIDIA A100-SXM4-40GB"  # checks/gpus.yaml a100-sxm4-40gb: tf-horovod 2,375 images/s published
H100 = "NVIDIA H100 80GB HBM3"  # no published ResNet-50 figure


def gpu_ctx(model: str = A100_40GB, names: list[str] = NODES, **options: Any) -> ClusterContext:
    ctx = make_ctx(names, profile="dgx-a100", gpus=8, **options)
    for n in names:
        ctx.nodes[n].report["facts"]["gpu_models"] = [model] * 8
    return ctx


def ranks(speed: Callable[[str, int], float], precision: str = "amp", bad: Callable[[str, int], str | None] = None):
    """rank_result for the fake runner: a healthy benchmark rank at speed(host, world size) images/s."""
    def result(host: str, rank: int, size: int, script: str) -> dict[str, Any]:
        assert script.endswith("/resnet_horovod_keras.py"), script
        value = speed(host, size)
        row = {"ok": True, "workload": "resnet_horovod_keras", "rank": rank, "size": size, "hostname": host,
               "images_per_s": value, "iteration_images_per_s": [value * 0.98, value, value * 1.01],
               "loss_first": 6.9, "loss_last": 6.8, "loss_finite": True, "weights_sha256": "cd" * 32,
               "precision": precision}
        error = bad(host, size) if bad else None
        if error:
            row.update(ok=False, error=error)
        return row
    return result


def by_size(single: float, node: float, cluster: float, slow: dict[str, float] | None = None):
    """Per-rank images/s by run: 1 rank, one node's 8, every node's; `slow` scales a node's own run."""
    def speed(host: str, size: int) -> float:
        if size == 1:
            return single
        if size == 8:
            return node * (slow or {}).get(host, 1.0)
        return cluster
    return speed


def run_stage(ctx: ClusterContext, result) -> tuple[list, Any]:
    fake = runner_for(ctx, rank_result=result)
    return training.training_stage(ctx, fake), fake


def programs(fake) -> list[list[str]]:
    return [shlex.split(c) for _, c in fake.commands if "mpirun" in c]


def test_healthy_gpu_fleet_passes_with_three_runs_and_the_published_model() -> None:
    ctx = gpu_ctx()
    (bench, scaling), fake = run_stage(ctx, ranks(by_size(2000.0, 1900.0, 1800.0)))
    assert bench.check == "cluster.training.tf-horovod" and bench.status == Status.PASS, bench.reason
    argvs = programs(fake)
    assert len(argvs) == 1 + 4 + 1  # 1 GPU, each node's own job, every node
    nps = sorted(int(a[a.index("-np") + 1]) for a in argvs)
    assert nps == [1, 8, 8, 8, 8, 32]
    words = argvs[0]
    assert words[words.index("--width") + 1] == "64" and words[words.index("--image-size") + 1] == "224"
    assert words[words.index("--batch-size") + 1] == "256"
    rows = {r["node"]: r for r in ctx.training["nodes"]}
    assert set(rows) == set(NODES)
    assert rows["node02"]["images_per_s_per_gpu"] == 1900.0 and rows["node02"]["reference"] == 2375
    assert rows["node02"]["of_reference"] == pytest.approx(1900 / 2375, abs=1e-3)
    table = {r["run"]: r for r in ctx.training["runs"]}
    assert table["1 GPU"]["images_per_s"] == 2000.0
    assert table["4 nodes"]["images_per_s"] == pytest.approx(32 * 1800.0)
    assert table["4 nodes"]["efficiency"] == pytest.approx(0.9)
    assert table["node01"]["iteration_min"] == pytest.approx(8 * 1900 * 0.98)
    assert scaling.check == training_verdict.SCALING and scaling.status == Status.PASS, scaling.reason
    points = [(p["gpus"], p["efficiency"]) for p in ctx.scaling]
    assert points == [(1, 1.0), (8, pytest.approx(0.95)), (32, pytest.approx(0.9))]
    assert all(p["device"] == "GPU" and p["label"] == "ResNet-50 tf-horovod" for p in ctx.scaling)


def test_a_slow_node_is_named_against_the_fleet_median_and_not_drained() -> None:
    ctx = gpu_ctx()
    (bench, _), _ = run_stage(ctx, ranks(by_size(2000.0, 1900.0, 1800.0, slow={"node03": 0.7})))
    assert bench.status == Status.WARN, bench.reason
    assert bench.reason.startswith("node03 trains at 1330 images/s per GPU, 0.70 x the fleet median 1900")
    assert bench.nodes == {}
    assert [r["node"] for r in ctx.training["nodes"] if r["status"] == "warn"] == ["node03"]


def test_a_node_below_the_published_figure_fails_and_is_blamed() -> None:
    ctx = gpu_ctx()
    (bench, _), _ = run_stage(ctx, ranks(by_size(2000.0, 1900.0, 1800.0, slow={"node04": 0.5})))
    assert bench.status == Status.FAIL, bench.reason
    assert list(bench.nodes) == ["node04"]
    assert "0.40 x the published 2375 for the NVIDIA A100 SXM4 40GB (minimum 0.5 x)" in bench.nodes["node04"]


def test_every_node_below_the_published_figure_fails_without_draining_the_fleet() -> None:
    ctx = gpu_ctx()
    (bench, _), _ = run_stage(ctx, ranks(by_size(900.0, 880.0, 850.0)))
    assert bench.status == Status.FAIL and bench.nodes == {}
    assert bench.reason.startswith("every node trains below the published figure")


def test_a_sku_without_a_published_figure_is_judged_against_the_median_only() -> None:
    ctx = gpu_ctx(model=H100)
    (bench, _), _ = run_stage(ctx, ranks(by_size(300.0, 290.0, 280.0)))
    assert bench.status == Status.PASS, bench.reason
    assert all(r["reference"] is None and r["sku"] == "h100-sxm5-80gb" for r in ctx.training["nodes"])
    assert "none published" in render_markdown({"training": ctx.training, "cluster": [], "nodes": {}})


@pytest.mark.parametrize("options, precision", [({"train_width": 32}, "amp"), ({}, "fp32")])
def test_other_settings_than_the_published_ones_are_not_set_beside_it(options: dict, precision: str) -> None:
    ctx = gpu_ctx(**options)
    (bench, _), _ = run_stage(ctx, ranks(by_size(500.0, 480.0, 470.0), precision=precision))
    assert bench.status == Status.PASS, bench.reason
    assert all(r["reference"] is None for r in ctx.training["nodes"])


def test_scaling_below_the_profiles_minimums_warns() -> None:
    ctx = gpu_ctx()
    (_, scaling), _ = run_stage(ctx, ranks(by_size(2000.0, 1400.0, 1000.0)))
    assert scaling.status == Status.WARN
    assert "node 70% < 75%" in scaling.reason and "cluster 50% < 70%" in scaling.reason


def test_a_failed_rank_in_one_nodes_run_blames_that_node_and_stops_the_cluster_run() -> None:
    ctx = gpu_ctx()
    bad = lambda host, size: "CUDA error: an illegal memory access" if (host, size) == ("node02", 8) else None  # noqa: E731
    (bench,), fake = run_stage(ctx, ranks(by_size(2000.0, 1900.0, 1800.0), bad=bad))
    assert bench.status == Status.FAIL
    assert list(bench.nodes) == ["node02"] and "illegal memory access" in bench.nodes["node02"]
    assert "not run: 4 nodes" in bench.reason
    assert 32 not in [int(a[a.index("-np") + 1]) for a in programs(fake)]


def test_cpu_ranks_skip_unless_asked_then_run_the_small_model_and_judge_nothing_against_gpus() -> None:
    ctx = make_ctx(NODES[:3], gpus=8)  # the lab profile: frameworks.gpu_required false
    (skipped,), fake = run_stage(ctx, ranks(by_size(40.0, 0, 20.0), precision="fp32"))
    assert skipped.status == Status.SKIP and "--stages ...,training" in skipped.reason
    assert not programs(fake)

    ctx = make_ctx(NODES[:3], gpus=8, stages_asked=("smoke", "training"))
    speeds = {1: 40.0, 3: 20.0}
    (bench, scaling), fake = run_stage(ctx, ranks(lambda host, size: speeds.get(size, 30.0), precision="fp32"))
    words = programs(fake)[0]
    assert words[words.index("--width") + 1] == "8" and words[words.index("--image-size") + 1] == "32"
    assert sorted(int(a[a.index("-np") + 1]) for a in programs(fake)) == [1, 1, 1, 1, 3]
    assert bench.status == Status.PASS and "CPU ranks, not a GPU measurement" in bench.reason
    assert all(r["reference"] is None for r in ctx.training["nodes"])
    assert scaling.status == Status.SKIP and scaling.reason.startswith("measured, not judged")
    assert all(p["device"] == "CPU" and p["label"].endswith("(CPU ranks)") for p in ctx.scaling)
    text = render_markdown({"training": ctx.training, "cluster": [], "nodes": {}})
    assert "**CPU ranks, not GPUs.**" in text and "| run | ranks | images/s | per rank |" in text
