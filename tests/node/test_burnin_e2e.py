"""`gpucheck node` runs the real burn-in programs end to end: the fake NVML library for NVML, the fake CuPy
(lab/fakecupy, numpy underneath) or the real CuPy without a CUDA driver for the GPU work, dmesg replayed."""

from __future__ import annotations

import pytest

from lab import compute
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree_for
from support import by_check, report_of, run_gpucheck

FAKECUPY = compute.SOURCE
SMALL_GPU_B = 16 * 1024**2  # each fake GPU's free memory: every size shrinks to fit, so the run takes seconds


@pytest.fixture
def node(fake_bin, tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text("{}\n")
    fake_bin.add("dmesg", "[    5.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")

    def run(scenario: str, *args: str, fake_cupy: bool = True, timeout: float = 240, **knobs: str):
        env = env_for(scenario_path(scenario), build_library())
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config), FAKECUPY_FREE_BYTES=str(SMALL_GPU_B),
                   FAKECUPY_TOTAL_BYTES=str(SMALL_GPU_B * 105 // 100))  # an idle GPU: nearly all free
        env.update(knobs)
        if fake_cupy:
            env["PYTHONPATH"] = str(FAKECUPY)
        done = run_gpucheck(["node", "--format", "json", *args], env, timeout=timeout)
        return done.returncode, by_check(report_of(done))

    return run


def test_a_healthy_fake_h100_is_measured_and_judged_against_its_data_sheet(node):
    code, checks = node("h100-1gpu", "--profile", "h100-1gpu", "--only", "gpu.gemm", "gpu.memtest", "gpu.sdc",
                        "--bench-timeout", "200")
    memtest, sdc, gemm = checks["gpu.memtest"], checks["gpu.sdc"], checks["gpu.gemm"]
    assert memtest["status"] == "pass" and memtest["measured"]["GPU0"]["bad_words"] == 0
    assert memtest["measured"]["GPU0"]["coverage"] >= 0.85
    assert sdc["status"] == "skip" and "one GPU" in sdc["reason"]
    # numpy is no H100: the SKU's figures judge it, and it fails them (989 TFLOP/s bf16 on the data sheet)
    assert gemm["status"] == "fail" and "bf16" in gemm["reason"] and "989" in str(gemm["expected"])
    assert code == 2


def test_bad_memory_words_fail_the_memtest_naming_the_gpu_and_offsets(node):
    code, checks = node("h100-1gpu", "--profile", "h100-1gpu", "--only", "gpu.memtest", FAKECUPY_CORRUPT="3,1000")
    memtest = checks["gpu.memtest"]
    assert code == 2 and memtest["status"] == "fail"
    assert memtest["measured"]["GPU0"]["bad_words"] == 2
    # words 3 and 1000 are bytes 0x18 and 0x1f40
    assert "GPU0 (00000000:00:06.0)" in memtest["reason"] and "offsets 0x18, 0x1f40" in memtest["reason"]


def test_real_cupy_without_a_cuda_driver_is_one_clear_error(node):
    code, checks = node("h100-1gpu", "--profile", "h100-1gpu", "--only", "gpu.memtest", "gpu.gemm",
                        fake_cupy=False)
    assert code == 3
    for check in ("gpu.memtest", "gpu.gemm"):
        assert checks[check]["status"] == "error"
        assert "cudaErrorInsufficientDriver" in checks[check]["reason"]


def test_a_wedged_gpu_costs_its_own_checks_and_the_other_gpus_report(node):
    code, checks = node("dgx-h100", "--profile", "dgx-h100", "--only", "gpu.memtest", "gpu.sdc",  # GPU3 hangs
                        "--bench-timeout", "20", FAKECUPY_HANG="memtest",
                        FAKECUPY_FAULT_GPUS="GPU-eb1b57b5-2baa-14f9-d653-f3c8926fc103")
    memtest = checks["gpu.memtest"]
    assert code == 3 and memtest["status"] == "error"
    assert "GPU3" in memtest["reason"] and "killed at --bench-timeout (20 s) during memtest" in memtest["reason"]
    assert all(memtest["measured"][f"GPU{i}"]["bad_words"] == 0 for i in range(8) if i != 3)
    assert checks["gpu.sdc"]["status"] == "pass"  # GPU3 delivered its checksum before its memtest hung


@pytest.mark.parametrize(("scenario", "finding"), [
    ("seven-of-eight", "PCI bus: not burnt in: 1 of 8 GPUs on the PCI bus not visible to NVML: 0000:db:00.0"),
    ("gpu-lost", "GPU4: not burnt in: NVML: GPU is lost"),
])
def test_only_an_active_check_on_a_node_with_a_gpu_gone_fails_for_it(node, tmp_path, scenario, finding):
    """`--only gpu.memtest` on a node whose GPU fell off NVML tested the others, left that GPU out and passed."""
    sysfs = write_pci_tree_for(scenario_path(scenario), tmp_path / "sys")
    code, checks = node(scenario, "--profile", "dgx-h100", "--only", "gpu.memtest", GPUCHECK_SYSFS_ROOT=str(sysfs))
    memtest = checks["gpu.memtest"]
    assert code == 2 and memtest["status"] == "fail", memtest
    assert finding in memtest["reason"], memtest["reason"]
    assert "reseat it, check its power and PCIe link" in memtest["remediation"]
    assert all(memtest["measured"][f"GPU{i}"]["bad_words"] == 0 for i in range(7) if i != 4)  # the others tested


def test_the_labs_modelled_gpus_pass_the_labs_profile(node):
    """What a lab host runs out of the box (lab/compute.py's knobs, checks/lab.yaml): a healthy DGX H100 scenario
    passes the memory, bandwidth and peer checks, each figure far below an H100's and above the lab's floors."""
    knobs = {**compute.environment(), "PYTHONPATH": str(FAKECUPY)}
    code, checks = node("dgx-h100", "--profile", "lab", "--only", "gpu.memtest", "gpu.memory_bandwidth",
                        "gpu.host_bandwidth", "gpu.p2p_bandwidth", **knobs)
    for check in ("gpu.memtest", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.p2p_bandwidth"):
        assert checks[check]["status"] == "pass", (check, checks[check]["reason"])
    assert code == 0
    memtest = checks["gpu.memtest"]["measured"]
    assert len(memtest) == 8 and all(gpu["coverage"] >= 0.85 for gpu in memtest.values()), memtest
