"""A GPU another program is using is "busy" for the active checks, never "failed" (node/busy.py): the fake NVML
lists a process on GPU1 the way the real H200 listed one beside a GEMM loop (lab/scenarios/busy.scn's figures),
the burn-in's real programs run on the fake CuPy."""

from __future__ import annotations

import os

import pytest

from lab import compute
from lab.fakenvml import build_library, env_for, scenario_path
from support import by_check, report_of, run_gpucheck

FAKECUPY = compute.SOURCE
SMALL_GPU_B = 16 * 1024**2
H200_NEIGHBOUR = "576:75971428352"  # pid and bytes NVML gave for the program beside the real H200's burn-in


@pytest.fixture
def node(fake_bin, tmp_path):
    """`gpucheck node --format json ARGS` on two simulated H100s (the lab's scenario), GPU1 used by another
    program unless `free`; `names` puts processes of those pids in a fake /proc."""
    config = tmp_path / "node.yaml"
    config.write_text("{}\n")
    fake_bin.add("dmesg", "[    5.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")

    def run(*args: str, processes: str = H200_NEIGHBOUR, names: dict[int, str] | None = None):
        scenario = tmp_path / "busy.scn"
        scenario.write_text(f"include = {scenario_path('lab')}\ngpu.1.compute_processes = {processes}\n")
        proc = tmp_path / "proc"
        (proc / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
        (proc / "uptime").write_text("5000.00 9000.00\n")
        (proc / "sys" / "kernel" / "random" / "boot_id").write_text("9b1c3a52-5c1e-4b8e-9a51-2f7c0d1e2f3a\n")
        for pid, name in (names or {}).items():
            (proc / str(pid)).mkdir(exist_ok=True)
            (proc / str(pid) / "comm").write_text(f"{name}\n")
        env = env_for(scenario, build_library())
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config), PYTHONPATH=str(FAKECUPY),
                   GPUCHECK_PROC_ROOT=str(proc), FAKECUPY_FREE_BYTES=str(SMALL_GPU_B),
                   FAKECUPY_TOTAL_BYTES=str(SMALL_GPU_B * 105 // 100))
        done = run_gpucheck(["node", "--format", "json", "--profile", "generic", *args], env, timeout=240)
        return done.returncode, by_check(report_of(done))

    return run


def test_the_burn_in_does_not_run_on_a_busy_gpu_and_says_who_holds_it(node):
    code, checks = node("--only", "gpu.memtest", "gpu.sdc", names={576: "python3"})
    for check in ("gpu.memtest", "gpu.sdc"):
        result = checks[check]
        assert result["status"] == "error", result  # never fail: a busy GPU measures slow, and is not broken
        assert "GPU1 (00000000:2A:00.0): busy: pid 576 (python3, compute) holds 70.8 GiB" in result["reason"]
        assert "wait until the GPU is free" in result["remediation"] and "--allow-busy" in result["remediation"]
        assert "GPU1" not in (result["measured"] or {})  # nothing was measured there
    assert checks["gpu.memtest"]["measured"]["GPU0"]["bad_words"] == 0  # the free GPU was tested
    assert code == 3


def test_a_process_this_machine_cannot_see_is_named_by_its_pid(node):
    """Inside a container NVML gives the host's pids: nothing here has that pid, so no name is made up."""
    _, checks = node("--only", "gpu.memtest", processes="4242:na")
    assert "busy: pid 4242 (not visible here, compute) holds an amount NVML does not report" in \
        checks["gpu.memtest"]["reason"]


@pytest.mark.parametrize("check", ["gpu.p2p_bandwidth", "bw.nccl_allreduce"])
def test_checks_that_load_every_gpu_at_once_do_not_start(node, check):
    code, checks = node("--only", check, names={576: "python3"})
    result = checks[check]
    assert result["status"] == "error" and code == 3
    assert result["reason"].startswith("the ") and " not run: GPU1 busy: pid 576 (python3, compute)" in result["reason"]


def test_allow_busy_measures_it_and_every_figure_says_so(node):
    code, checks = node("--only", "gpu.memtest", "gpu.sdc", "--allow-busy", names={576: "python3"})
    memtest = checks["gpu.memtest"]
    assert memtest["measured"]["GPU1"]["bad_words"] == 0
    assert ("GPU1 (00000000:2A:00.0): measured beside another program (--allow-busy): pid 576 (python3, compute) "
            "holds 70.8 GiB") in memtest["reason"]
    assert "GPU0 (00000000:18:00.0): measured beside" not in memtest["reason"]
    assert memtest["status"] == "pass" and code == 0


def test_an_idle_gpu_is_not_busy(node):
    code, checks = node("--only", "gpu.memtest", processes="none")
    assert checks["gpu.memtest"]["status"] == "pass" and code == 0


@pytest.mark.parametrize("only", [["gpu.burn"], ["gpu.xid", "gpu.memtest"], ["bw.nccl_allreduce"]])
def test_a_slurm_health_check_never_runs_an_active_check(tmp_path, only):
    """docs/slurm.md: the health check runs the passive checks only; naming an active one used to run it."""
    (tmp_path / "node.yaml").write_text("{}\n")
    env = {**os.environ, "GPUCHECK_CONFIG": str(tmp_path / "node.yaml"), "PATH": str(tmp_path)}  # no scontrol
    done = run_gpucheck(["node", "--slurm", "--only", *only], env)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.startswith("gpucheck: error: --slurm runs the passive checks only, never an active one (")
    assert only[-1] in done.stderr and len(done.stderr.splitlines()) == 1
