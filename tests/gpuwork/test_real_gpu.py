"""The GPU programs on a real GPU with the real CuPy (marked `gpu`: skipped where CuPy sees no CUDA device).

They check what the fake cannot: the real kernels, cuBLAS's gemmEx calls, pinned copies, NCCL, NVML's real
bus id. Reference: an H100 SXM measured 740 fp16 TFLOP/s, 3,026 GB/s copy, 54 GB/s host copies
(tests/fixtures/measured/h100-sxm-80gb-driver580/README.md); the bounds here only say "sane"."""

from __future__ import annotations

import pytest
from gpuwork_helpers import FILL_CORRUPT_VERIFY, PERTURB_ONE_ELEMENT, environment, last_json, run_program, run_python

pytestmark = pytest.mark.gpu

BUS_ID = "import cupy; print(cupy.cuda.Device(0).pci_bus_id)"


@pytest.fixture(scope="module")
def real_run():
    """Every worker test at its real size, but a 10 s burn; NVML sampled on the GPU's own bus id."""
    env = environment(fake=False)
    bus_id = run_python(BUS_ID, env).stdout.strip()
    run = run_program("worker", "--burn-seconds", "10", "--bus-id", bus_id, env=env, timeout=600)
    assert run.exit == 0, run.stderr
    return run


@pytest.mark.parametrize("test", ["sdc", "gemm", "memory_bandwidth", "host_bandwidth", "memtest", "burn"])
def test_every_worker_test_runs_on_the_gpu(real_run, test: str) -> None:
    result = real_run.result(test)
    assert (result["error"], result["fault"]) == (None, None), result


def test_gemm_fp16_is_within_sane_bounds(real_run) -> None:
    gemm = real_run.result("gemm")
    assert 5 < gemm["tflops"]["fp16"] < 5000, gemm
    assert gemm["n"]["fp16"] >= 4096


def test_bandwidths_are_within_sane_bounds(real_run) -> None:
    memory, host = real_run.result("memory_bandwidth"), real_run.result("host_bandwidth")
    assert 50 < memory["copy_GBps"] < 20_000 and 50 < memory["stream_add_GBps"] < 20_000
    assert 1 < host["h2d_GBps"] < 500 and 1 < host["d2h_GBps"] < 500


def test_memtest_covers_most_of_the_gpus_memory_and_finds_nothing_on_a_healthy_gpu(real_run) -> None:
    memtest = real_run.result("memtest")
    assert memtest["coverage"] >= 0.85  # of the whole memory: an idle GPU leaves the driver little
    assert memtest["bad_words"] == 0


def test_burn_samples_nvml(real_run) -> None:
    burn = real_run.result("burn")
    assert burn["nvml_error"] is None, burn
    assert burn["samples"] >= 10 and burn["nvml"]["sm_clock_MHz"]["max"] > 0
    assert len(burn["windows_TFLOPS"]) >= 8


def test_sdc_checksum_is_the_same_run_after_run() -> None:
    env = environment(fake=False)
    first, second = (run_program("worker", "--tests", "sdc", env=env).result("sdc") for _ in range(2))
    assert first["checksum"] == second["checksum"]


def test_words_changed_on_the_gpu_are_found_at_their_offsets() -> None:
    found = last_json(run_python(FILL_CORRUPT_VERIFY, environment(fake=False), timeout=300))
    for pattern in ("alternating", "address"):
        assert found[pattern] == {"clean": 0, "bad": 3, "positions": [12_345, 250_001, 299_999]}, pattern


def test_one_changed_input_element_changes_the_checksum_on_the_gpu() -> None:
    found = last_json(run_python(PERTURB_ONE_ELEMENT, environment(fake=False), timeout=300))
    assert found["first"] == found["again"] != found["changed"]


def test_p2p_and_allreduce_run_on_the_visible_gpus() -> None:
    env = environment(fake=False)
    p2p = run_program("p2p", env=env, timeout=300).result("p2p")
    assert p2p["error"] is None and all(pair["GBps"] > 0 for pair in p2p["pairs"])
    result = run_program("allreduce", "--bytes", "256M", env=env, timeout=300).result("allreduce")
    assert (result["error"], result["wrong"]) == (None, 0), result
    assert result["algbw_GBps"] > 1
