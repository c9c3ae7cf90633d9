"""A fault that shows only under load: gpu.N.under_load.* answers the calls of a process with FAKENVML_UNDER_LOAD
set (the fake CuPy sets it once a GEMM has run), the normal keys every other process (lab/scenarios/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakenvml_helpers import PROBE, ProbeResult, parse_lines

from lab.fakenvml import SCENARIOS_DIR, SOURCE, env_for, scenario_path
from lab.fakenvml.__main__ import check

HW_THERMAL_SLOWDOWN = 0x40  # nvmlClocksThrottleReasonHwThermalSlowdown
GPU_IDLE = 0x1
DGX_H100_GPU0 = {"sm_clock_MHz": 345, "power_usage_mW": 100890, "threshold_slowdown": 89}  # dgx-h100.scn
LOAD_KEYS = ["clocks_event_reasons", "clocks_throttle_reasons", "sm_clock_MHz", "temperature", "temperature_v",
             "power_usage_mW", "threshold_slowdown"]

# Cooling that fails only when GPU 0 burns: idle at 45 C, 92 C and HW thermal slowdown under load.
COOLING_FAILS_UNDER_LOAD = """
gpu.0.temperature_C = 45
gpu.0.under_load.clocks_event_reasons = hw_thermal_slowdown
gpu.0.under_load.temperature_C = 92
"""


def scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "under-load.scn"
    path.write_text(f"include = {scenario_path('dgx-h100')}\n{text}")
    return path


def probe(libdir: Path, path: Path, under_load: str | None, *args: str) -> ProbeResult:
    """probe.py against the scenario, FAKENVML_UNDER_LOAD set to `under_load` (None: absent)."""
    env = env_for(path, libdir)
    env.pop("FAKENVML_UNDER_LOAD", None)
    if under_load is not None:
        env["FAKENVML_UNDER_LOAD"] = under_load
    proc = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    result = ProbeResult(parse_lines(proc.stdout), proc.stderr)
    assert result.done, proc.stderr
    return result


def test_an_idle_process_sees_a_healthy_gpu_and_a_loaded_one_sees_the_heat(libdir: Path, tmp_path: Path) -> None:
    path = scenario(tmp_path, COOLING_FAILS_UNDER_LOAD)
    idle = probe(libdir, path, None, "--gpus", "0,1", "--only", ",".join(LOAD_KEYS))
    loaded = probe(libdir, path, "1", "--gpus", "0,1", "--only", ",".join(LOAD_KEYS))
    assert idle.value("temperature", 0) == idle.value("temperature_v", 0) == 45
    assert idle.value("clocks_event_reasons", 0) == idle.value("clocks_throttle_reasons", 0) == GPU_IDLE
    assert loaded.value("temperature", 0) == loaded.value("temperature_v", 0) == 92
    assert loaded.value("clocks_event_reasons", 0) == loaded.value("clocks_throttle_reasons", 0) == HW_THERMAL_SLOWDOWN
    for key, value in DGX_H100_GPU0.items():  # no under_load key for these: the normal value, loaded or not
        assert idle.value(key, 0) == loaded.value(key, 0) == value, key
    gpu1 = {key: idle.value(key, 1) for key in LOAD_KEYS}
    assert gpu1 == {key: loaded.value(key, 1) for key in LOAD_KEYS}  # GPU 1 has no under_load keys
    assert gpu1["temperature"] == 30 and gpu1["clocks_event_reasons"] == GPU_IDLE


def test_under_load_changes_only_the_load_answers(libdir: Path, tmp_path: Path) -> None:
    """Everything else the agent may ask, on every GPU, answers the same loaded or not."""
    path = scenario(tmp_path, COOLING_FAILS_UNDER_LOAD)
    idle, loaded = probe(libdir, path, None), probe(libdir, path, "1")
    changed = {k: v for k, v in loaded.answers.items() if idle.answers.get(k) != v}
    assert changed == {(0, "clocks_event_reasons"): ("value", HW_THERMAL_SLOWDOWN),
                       (0, "clocks_throttle_reasons"): ("value", HW_THERMAL_SLOWDOWN),
                       (0, "temperature"): ("value", 92), (0, "temperature_v"): ("value", 92)}
    assert set(loaded.answers) == set(idle.answers)


def test_an_empty_variable_is_not_load(libdir: Path, tmp_path: Path) -> None:
    empty = probe(libdir, scenario(tmp_path, COOLING_FAILS_UNDER_LOAD), "", "--gpus", "0", "--only", "temperature")
    assert empty.value("temperature", 0) == 45


def test_every_gpu_and_every_load_key(libdir: Path, tmp_path: Path) -> None:
    """gpu.*.under_load.FIELD sets all GPUs, a later gpu.N.under_load.FIELD one of them; `unsupported` under load
    answers NOT_SUPPORTED there while the idle answer stays."""
    path = scenario(tmp_path, """
gpu.*.under_load.clocks_event_reasons = sw_power_cap
gpu.*.under_load.sm_clock_MHz = 1980
gpu.*.under_load.temperature_C = 71
gpu.*.under_load.power_usage_mW = 699000
gpu.3.under_load.clocks_event_reasons = hw_slowdown|hw_thermal_slowdown
gpu.3.under_load.power_usage_mW = unsupported
""")
    loaded = probe(libdir, path, "yes", "--gpus", "0,3", "--only", ",".join(LOAD_KEYS))
    assert [loaded.value(k, 0) for k in ("clocks_event_reasons", "sm_clock_MHz", "temperature", "power_usage_mW")] == [
        0x4, 1980, 71, 699000]
    assert loaded.value("clocks_event_reasons", 3) == 0x48 and loaded.value("temperature", 3) == 71
    assert loaded.error("power_usage_mW", 3) == "NVMLError_NotSupported"
    assert probe(libdir, path, None, "--gpus", "3", "--only", "power_usage_mW").value("power_usage_mW", 3) == 84970


def test_load_is_read_at_each_call_not_at_init(run_python, tmp_path: Path) -> None:
    """The fake CuPy sets the variable in a process whose NVML is already initialised (the burn's sampler)."""
    code = ("import os, pynvml as nv\n"
            "os.environ.pop('FAKENVML_UNDER_LOAD', None)\n"
            "nv.nvmlInit()\n"
            "h = nv.nvmlDeviceGetHandleByIndex(0)\n"
            "temperature = lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)\n"
            "seen = [temperature()]\n"
            "os.environ['FAKENVML_UNDER_LOAD'] = '1'\n"
            "seen.append(temperature())\n"
            "del os.environ['FAKENVML_UNDER_LOAD']\n"
            "seen.append(temperature())\n"
            "print(seen)\n")
    proc = run_python(code, scenario(tmp_path, COOLING_FAILS_UNDER_LOAD))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[45, 92, 45]"


def test_the_scenario_checker_accepts_the_keys_and_names_a_misspelt_one(libdir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert check(libdir, scenario(tmp_path, COOLING_FAILS_UNDER_LOAD))
    assert not check(libdir, scenario(tmp_path, "gpu.0.under_load.temprature_C = 92\n"))
    assert "unknown key 'gpu.0.under_load.temprature_C'" in capsys.readouterr().out
    assert not check(libdir, scenario(tmp_path, "gpu.0.under_load.temperature_C = hot\n"))
    assert "bad value for 'gpu.0.under_load.temperature_C'" in capsys.readouterr().out
    assert not check(libdir, scenario(tmp_path, "gpu.0.under_load.pcie_gen_current = 3\n"))  # not load-dependent


def test_the_readme_documents_the_keys_and_the_variable() -> None:
    """test_fakenvml_library's README check reads plain names only; these have a dot."""
    keys = re.findall(r'\[F_\w+\] = \{"(under_load\.\w+)"', SOURCE.read_text())
    assert keys == ["under_load.clocks_event_reasons", "under_load.sm_clock_MHz", "under_load.temperature_C",
                    "under_load.power_usage_mW"]
    readme = (SCENARIOS_DIR / "README.md").read_text()
    assert [k for k in keys if f"`{k}`" not in readme] == [] and "`FAKENVML_UNDER_LOAD`" in readme
