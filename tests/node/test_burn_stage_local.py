"""bench/burn_stage_local.py, the burn stage on one machine for a lent GPU (bench/gpu_session.sh, step
cluster-burn), here on the fake NVML and the fake CuPy: the stage's own node command runs through a local shell,
its verdict and the report's burn section (the heat map's data) come out; a GPU that throttles only under load
fails it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab import compute
from lab.fakenvml import build_library, env_for, scenario_path
from support import ROOT

FAKECUPY = compute.SOURCE
SMALL_GPU_B = 16 * 1024**2
# TFLOP/s of the fake GPU's modelled clock: its burn figures are the model's, not what numpy gets of a loaded CPU
# (a CPU shared with other tests made one window of the burn collapse below half the median and fail it). The
# GEMMs of 16 MiB take numpy a few ms each, the model ~40 ms.
RATE = 0.005


@pytest.fixture
def bench(fake_bin, tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text("{}\n")
    fake_bin.add("dmesg", "[    5.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")

    def run(scenario: Path) -> tuple[int, dict, dict]:
        env = env_for(scenario, build_library())
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config), FAKECUPY_FREE_BYTES=str(SMALL_GPU_B),
                   FAKECUPY_TOTAL_BYTES=str(SMALL_GPU_B * 105 // 100), PYTHONPATH=f"{FAKECUPY}:{ROOT / 'agent'}",
                   GPUCHECK_STATE_DIR=str(tmp_path / "state"), FAKECUPY_TFLOPS=str(RATE))
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "burn_stage_local.py"), "--seconds", "4",
                               "--profile", "h100-1gpu", "--report", str(tmp_path / "report")], env=env,
                              capture_output=True, text=True, timeout=300)
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return done.returncode, said, json.loads((tmp_path / "report" / "report.json").read_text())
    return run


def test_the_stage_burns_this_machine_and_reports_its_gpus_over_time(bench, tmp_path) -> None:
    code, said, doc = bench(scenario_path("h100-1gpu-burn"))
    results = {r["check"]: r for r in said["results"]}
    assert code == 0 and results["cluster.burn.gpus"]["status"] == "pass", said
    assert 0.9 * RATE <= said["gpus"]["GPU0"]["TFLOPS_median"] <= RATE, said  # the model's, not the CPU's
    assert "cluster.burn.fabric" not in results  # one node: no fabric to load
    gpu = doc["burn"]["nodes"]["local"]["gpus"]["GPU0"]
    assert gpu["burn_temperature_C_max"] == 58 and gpu["burn_timeline"]["TFLOPS"]["TFLOPS"]
    assert said["gpus"]["GPU0"]["points"] == len(gpu["burn_timeline"]["TFLOPS"]["TFLOPS"])
    assert "GPUs over time" in (tmp_path / "report" / "report.html").read_text()


def test_a_gpu_throttling_only_under_load_fails_the_stage(bench, tmp_path) -> None:
    scenario = tmp_path / "hot.scn"
    scenario.write_text(f"include = {scenario_path('h100-1gpu-burn')}\n"
                        "gpu.0.under_load.clocks_event_reasons = sw_power_cap | hw_thermal_slowdown\n"
                        "gpu.0.under_load.temperature_C = 93\n")
    code, said, _ = bench(scenario)
    gpus = next(r for r in said["results"] if r["check"] == "cluster.burn.gpus")
    assert code == 1 and said["node"] == "pass"  # idle, its gpu.count passes: only the burn sees the fault
    assert gpus["status"] == "fail" and "hw_thermal_slowdown in" in gpus["reason"], gpus
