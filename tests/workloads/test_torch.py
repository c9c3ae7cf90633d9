"""PyTorch DDP for real: 2 ranks under torchrun on localhost (Gloo on CPU), and the all-reduce benchmark."""

from __future__ import annotations

import pytest

from gpucheck.workloads.launch import torchrun_command
from gpucheck.workloads.results import judge_allreduce, judge_smoke, parse_results, scaling
from workload_helpers import WAIT_S, WATCHDOG_S, WORKLOADS, Stack, free_ports, launch

SMOKE = WORKLOADS / "smoke_torch_ddp.py"
BENCH = WORKLOADS / "allreduce_bench.py"
SMOKE_ARGS = ["--epochs", "2", "--steps", "12", "--batch-size", "32", "--warmup-steps", "4", "--seed", "7",
              "--timeout-s", str(WATCHDOG_S)]
TIMEOUT = WAIT_S


def torchrun(stack: Stack, script, args: list[str], ranks: int):
    cmd = torchrun_command(script, args, nnodes=1, node_rank=0, nproc_per_node=ranks, master_addr="127.0.0.1",
                           master_port=free_ports(1), torchrun=str(stack.bin / "torchrun"))
    return launch(cmd, stack.env(), TIMEOUT)


@pytest.fixture(scope="module")
def ddp_run(torch_stack: Stack):
    done = torchrun(torch_stack, SMOKE, SMOKE_ARGS, 2)
    assert done.returncode == 0, done.explain()
    return done


def test_torchrun_ddp_two_ranks_loss_falls_and_weights_identical(ddp_run):
    results = parse_results(ddp_run.stdout)
    verdict = judge_smoke(results, 2)
    assert verdict["passed"], verdict["reasons"]
    assert sorted(r["rank"] for r in results) == [0, 1]
    for r in results:
        assert r["backend"] == "gloo" and r["devices"] == ["CPU"] and r["size"] == 2
        assert r["torch_version"].startswith("2.13.0")
        assert r["loss_last"] < 0.5 * r["loss_first"], r
        assert r["samples_per_s"] > 0 and r["timed_steps"] == 2 * 12 - 4
    assert len({r["weights_sha256"] for r in results}) == 1
    assert results[0]["epoch_loss"] == results[1]["epoch_loss"]  # rank-averaged, so the same everywhere


def test_ddp_is_deterministic_given_the_seed_and_one_rank_scales(torch_stack, ddp_run):
    again = torchrun(torch_stack, SMOKE, SMOKE_ARGS, 2)
    assert again.returncode == 0, again.explain()
    first = {r["weights_sha256"] for r in parse_results(ddp_run.stdout)}
    assert {r["weights_sha256"] for r in parse_results(again.stdout)} == first
    single = torchrun(torch_stack, SMOKE, SMOKE_ARGS, 1)
    assert single.returncode == 0, single.explain()
    got = scaling(parse_results(single.stdout), parse_results(ddp_run.stdout))
    assert got["ranks"] == 2 and got["efficiency"] > 0
    print(f"\nscaling 1 -> 2 ranks (DDP/Gloo, CPU): efficiency {got['efficiency']}, speed-up {got['speedup']}")


def test_allreduce_bench_two_ranks_torch(torch_stack):
    done = torchrun(torch_stack, BENCH, ["--framework", "torch", "--warmup", "2", "--iters", "5"], 2)
    assert done.returncode == 0, done.explain()
    results = parse_results(done.stdout)
    verdict = judge_allreduce(results, 2)
    assert verdict["passed"], verdict["reasons"]
    for r in results:
        assert r["backend"] == "gloo" and r["wrong"] == 0 and r["bytes"] == 64 * 2 ** 20
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / 1e9 / (r["time_us"] / 1e6), rel=1e-3)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"], rel=1e-6)  # 2 (n-1)/n = 1 at n = 2
        assert r["busbw_GBps"] > 0
    print(f"\nallreduce_bench torch/gloo 2 ranks 64 MiB: busbw {verdict['busbw_GBps']} GB/s")


def test_allreduce_bench_torch_check_catches_a_wrong_element(torch_stack):
    done = torchrun(torch_stack, BENCH, ["--framework", "torch", "--size", "1M", "--warmup", "1", "--iters", "2",
                                         "--inject-corruption", "0"], 2)
    assert done.returncode != 0
    assert [r["wrong"] for r in parse_results(done.stdout)] == [1, 1], done.explain()
