"""Horovod + TensorFlow/Keras for real on this machine: Debian's OpenMPI, Horovod 0.28.1 built from source,
2 ranks on localhost (CPU), under mpirun and under horovodrun --gloo; the built-in all-reduce benchmark.

Every command line comes from gpucheck.workloads.launch, so what runs here is what the cluster stage
runs (with localhost for the hosts).
"""

from __future__ import annotations

import pytest

from gpucheck.workloads.launch import horovodrun_command, mpirun_command
from gpucheck.workloads.results import judge_allreduce, judge_smoke, parse_results, scaling
from workload_helpers import WAIT_S, WATCHDOG_S, WORKLOADS, Stack, launch

SMOKE = WORKLOADS / "smoke_horovod_keras.py"
BENCH = WORKLOADS / "allreduce_bench.py"
# Lean: a 2-layer MLP, 2 epochs of 12 steps; warm-up 4 steps left out of the throughput.
SMOKE_ARGS = ["--epochs", "2", "--steps", "12", "--batch-size", "32", "--warmup-steps", "4", "--seed", "7",
              "--timeout-s", str(WATCHDOG_S)]
TIMEOUT = WAIT_S


def mpirun(stack: Stack, program: list[str], ranks: int, tag: bool = False):
    cmd = mpirun_command([str(stack.python), *program], [("localhost", ranks)], as_root=True, oversubscribe=True,
                         tcp_if="lo", extra=["--tag-output"] if tag else [])
    return launch(cmd, stack.env(), TIMEOUT)


@pytest.fixture(scope="module")
def mpi_run(tf_horovod: Stack):
    done = mpirun(tf_horovod, [str(SMOKE), *SMOKE_ARGS], 2, tag=True)
    assert done.returncode == 0, done.explain()
    return done


@pytest.fixture(scope="module")
def gloo_run(tf_horovod: Stack):
    cmd = horovodrun_command([str(tf_horovod.python), str(SMOKE), *SMOKE_ARGS], [("localhost", 2)], gloo=True,
                             horovodrun=str(tf_horovod.bin / "horovodrun"), start_timeout_s=120)
    done = launch(cmd, tf_horovod.env(), TIMEOUT)
    assert done.returncode == 0, done.explain()
    return done


def test_mpirun_two_ranks_loss_falls_and_weights_identical(mpi_run):
    results = parse_results(mpi_run.stdout)
    assert sorted(r["rank"] for r in results) == [0, 1], mpi_run.explain()
    verdict = judge_smoke(results, 2)
    assert verdict["passed"], verdict["reasons"]
    for r in results:
        assert r["controller"] == "mpi" and r["size"] == 2 and r["devices"] == ["CPU"]
        assert r["tf_version"] == "2.15.1" and r["horovod_version"] == "0.28.1"
        assert r["loss_last"] < 0.5 * r["loss_first"], r  # it really learned, not just jitter
        assert r["launcher_rank"] == r["rank"]  # mpirun --tag-output's "[1,R]<stdout>:" was parsed
        assert r["samples_per_s"] > 0 and r["timed_steps"] == 2 * 12 - 4
    assert len({r["weights_sha256"] for r in results}) == 1
    assert len({r["local_rank"] for r in results}) == 2


def test_horovodrun_gloo_two_ranks_agree_with_the_mpi_run(gloo_run, mpi_run):
    results = parse_results(gloo_run.stdout)
    verdict = judge_smoke(results, 2)
    assert verdict["passed"], verdict["reasons"]
    assert {r["controller"] for r in results} == {"gloo"}
    # deterministic given the seed: same data, same initial weights, and a 2-rank sum is exact in either
    # order, so Gloo and MPI end with the very same weights
    assert {r["weights_sha256"] for r in results} == {r["weights_sha256"] for r in parse_results(mpi_run.stdout)}


def test_one_rank_vs_two_ranks_scaling(tf_horovod, mpi_run):
    single = mpirun(tf_horovod, [str(SMOKE), *SMOKE_ARGS], 1)
    assert single.returncode == 0, single.explain()
    one = parse_results(single.stdout)
    assert judge_smoke(one, 1)["passed"]
    two = parse_results(mpi_run.stdout)
    got = scaling(one, two)
    total = sum(r["samples_per_s"] for r in two)
    assert got["ranks"] == 2
    assert got["efficiency"] == pytest.approx(total / (2 * one[0]["samples_per_s"]), abs=1e-4)
    assert got["speedup"] == pytest.approx(total / one[0]["samples_per_s"], abs=1e-4)
    assert got["efficiency"] > 0  # on 2 shared cores it is poor: the figure is asserted, not the speed
    print(f"\nscaling 1 -> 2 ranks (Horovod/MPI, CPU, 2 cores): {got['single_samples_per_s']} -> "
          f"{got['multi_samples_per_s']} samples/s, speed-up {got['speedup']}, efficiency {got['efficiency']}")


def test_judge_flags_doctored_real_results(mpi_run):
    results = parse_results(mpi_run.stdout)
    doctored = [dict(r) for r in results]
    one = next(r for r in doctored if r["rank"] == 1)
    one["weights_sha256"] = "0" * 64
    verdict = judge_smoke(doctored, 2)
    assert not verdict["passed"]
    assert any("rank 1 on" in r and one["hostname"] in r for r in verdict["reasons"]), verdict["reasons"]
    verdict = judge_smoke([r for r in results if r["rank"] != 1], 2)
    assert verdict["missing_ranks"] == [1] and not verdict["passed"]


def test_a_hung_rank_reports_a_timeout(tf_horovod):
    """--timeout-s fires while the rank is still busy (here: importing TensorFlow): a line, exit 124."""
    done = launch([str(tf_horovod.python), str(SMOKE), "--timeout-s", "0.5"], tf_horovod.env(), 120)
    assert done.returncode == 124, done.explain()
    (result,) = parse_results(done.stdout)
    assert result["ok"] is False and result["error"].startswith("timeout after 0.5 s")


def test_allreduce_bench_two_ranks_mpi(tf_horovod):
    done = mpirun(tf_horovod, [str(BENCH), "--framework", "horovod", "--warmup", "2", "--iters", "5"], 2)
    assert done.returncode == 0, done.explain()
    results = parse_results(done.stdout)
    verdict = judge_allreduce(results, 2)
    assert verdict["passed"], verdict["reasons"]
    for r in results:
        assert r["bytes"] == 64 * 2 ** 20 and r["count"] == 16 * 2 ** 20  # the default: 64 MiB of float32
        assert r["wrong"] == 0 and r["max_abs_err"] == 0.0 and r["backend"] == "mpi"
        # nccl-tests: algbw = bytes / 1e9 / time (time averaged over the ranks); busbw = algbw * 2(n-1)/n
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / 1e9 / (r["time_us"] / 1e6), rel=1e-3)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (2 - 1) / 2, rel=1e-6)
        assert r["busbw_GBps"] > 0
    assert len({r["time_us"] for r in results}) == 1  # the same rank-averaged time everywhere
    print(f"\nallreduce_bench horovod/mpi 2 ranks 64 MiB: busbw {verdict['busbw_GBps']} GB/s")


def test_allreduce_bench_check_catches_a_wrong_element(tf_horovod):
    done = mpirun(tf_horovod, [str(BENCH), "--framework", "horovod", "--size", "1M", "--warmup", "1",
                               "--iters", "2", "--inject-corruption", "1"], 2)
    assert done.returncode != 0, done.explain()
    results = parse_results(done.stdout)
    assert [r["wrong"] for r in results] == [1, 1], done.explain()  # the sum is wrong on every rank
    verdict = judge_allreduce(results, 2)
    assert not verdict["passed"] and "1 wrong element(s)" in verdict["reasons"][0]
