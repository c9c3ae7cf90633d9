"""The multi-GPU programs on 1 to 4 fake GPUs: every ordered pair's peer copy, and the NCCL all-reduce."""

from __future__ import annotations

import pytest
from gpuwork_helpers import CONTRACT_FIGURES, RESULT_KEYS, environment, run_program

from gpucheck.gpuwork import allreduce


def uuids(count: int) -> str:
    return ",".join(f"GPU-{index:04d}" for index in range(count))


@pytest.mark.parametrize("gpus", [2, 4])
def test_p2p_copies_every_ordered_pair(gpus: int) -> None:
    run = run_program("p2p", "--bytes", "1M", env=environment(CUDA_VISIBLE_DEVICES=uuids(gpus)))
    assert run.exit == 0, run.stderr
    assert run.kinds() == ["begin", "start", "result", "end"]
    assert len(run.only("begin")["devices"]) == gpus
    result = run.result("p2p")
    assert set(result) == RESULT_KEYS | CONTRACT_FIGURES["p2p"] | {"bytes"}
    pairs = result["pairs"]
    assert [(p["src"], p["dst"]) for p in pairs] == [(i, j) for i in range(gpus) for j in range(gpus) if i != j]
    assert all(set(p) == {"src", "dst", "GBps", "peer_access"} and p["GBps"] > 0 and p["peer_access"]
               for p in pairs)


def test_pairs_without_peer_access_are_still_copied_and_marked() -> None:
    env = environment(CUDA_VISIBLE_DEVICES=uuids(3), FAKECUPY_NO_PEER="2")
    pairs = run_program("p2p", "--bytes", "1M", env=env).result("p2p")["pairs"]
    marked = {(p["src"], p["dst"]): p["peer_access"] for p in pairs}
    assert marked == {(0, 1): True, (1, 0): True, (0, 2): False, (2, 0): False, (1, 2): False, (2, 1): False}
    assert all(p["GBps"] > 0 for p in pairs)


def test_p2p_with_one_gpu_has_no_pairs() -> None:
    result = run_program("p2p", "--bytes", "1M").result("p2p")
    assert result["error"] is None and result["pairs"] == []


@pytest.mark.parametrize("gpus", [1, 2, 3, 4])
def test_allreduce_sums_exactly_and_reports_bandwidth_by_nccl_tests_formula(gpus: int) -> None:
    run = run_program("allreduce", "--bytes", "1M", "--iterations", "3", "--warmup", "1",
                      env=environment(CUDA_VISIBLE_DEVICES=uuids(gpus)))
    assert run.exit == 0, run.stderr
    result = run.result("allreduce")
    assert set(result) == RESULT_KEYS | CONTRACT_FIGURES["allreduce"]
    assert (result["error"], result["fault"]) == (None, None)
    assert (result["gpus"], result["bytes"], result["wrong"], result["nccl_version"]) == (gpus, 2**20, 0, 22803)
    assert result["algbw_GBps"] == pytest.approx(2**20 / result["seconds_per_iteration"] / 1e9, rel=1e-2)
    assert result["busbw_GBps"] == pytest.approx(result["algbw_GBps"] * 2 * (gpus - 1) / gpus, rel=1e-3)
    if gpus == 1:
        assert result["busbw_GBps"] == 0


def test_allreduce_without_nccl_is_an_error_result() -> None:
    run = run_program("allreduce", "--bytes", "1M", env=environment(FAKECUPY_NCCL="absent"))
    assert run.exit == 0
    assert run.result("allreduce")["error"].startswith("NCCL is not available to CuPy")


def test_busbw_formula() -> None:
    assert allreduce.bus_bandwidth(100.0, 8) == 175.0
    assert allreduce.bus_bandwidth(100.0, 1) == 0.0
