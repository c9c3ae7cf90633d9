"""`fail` / `hang` rules: one call failing for one GPU with a chosen NVML code, `*@gpuN` for every
call about a GPU, and the first matching rule deciding (so one call can be exempted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.fakenvml import scenario_path

ASK = (
    "import pynvml as nv\n"
    "nv.nvmlInit()\n"
    "def ask(fn):\n"
    "    try:\n"
    "        return fn()\n"
    "    except nv.NVMLError as e:\n"
    "        return type(e).__name__\n"
    "h = lambda i: nv.nvmlDeviceGetHandleByIndex(i)\n"
)


def scenario(tmp_path: Path, *rules: str) -> Path:
    path = tmp_path / "s.scn"
    path.write_text(f"include = {scenario_path('dgx-h100')}\n" + "".join(f"{r}\n" for r in rules))
    return path


@pytest.mark.parametrize(("code", "expected"), [
    ("UNKNOWN", "NVMLError_Unknown"), ("NVML_ERROR_INSUFFICIENT_POWER", "NVMLError_InsufficientPower"),
    ("GPU_IS_LOST", "NVMLError_GpuIsLost"), ("14", "NVMLError_CorruptedInforom"),
])
def test_fail_rule_answers_its_code_for_one_call_of_one_gpu(run_python, tmp_path, code, expected) -> None:
    scn = scenario(tmp_path, f"fail = nvmlDeviceGetEccMode@gpu3 {code}")
    proc = run_python(ASK + "print([ask(lambda: nv.nvmlDeviceGetEccMode(h(i))) for i in (2, 3, 4)],"
                            " ask(lambda: nv.nvmlDeviceGetName(h(3))))\n", scn)
    assert proc.stdout.strip() == f"[[1, 1], '{expected}', [1, 1]] NVIDIA H100 80GB HBM3", proc.stderr


def test_star_rule_fails_every_call_about_that_gpu_and_nothing_else(run_python, tmp_path) -> None:
    scn = scenario(tmp_path, "fail = *@gpu6 NVML_ERROR_UNKNOWN")
    proc = run_python(ASK + "print(ask(lambda: h(6)), ask(lambda: nv.nvmlDeviceGetName(h(5))),"
                            " ask(nv.nvmlDeviceGetCount), ask(nv.nvmlSystemGetDriverVersion))\n"
                            "nv.nvmlShutdown(); print('shutdown ok')\n", scn)
    assert proc.stdout.split("\n")[:2] == ["NVMLError_Unknown NVIDIA H100 80GB HBM3 8 535.183.01", "shutdown ok"]


def test_first_matching_rule_decides_so_a_call_can_be_exempted(run_python, tmp_path) -> None:
    scn = scenario(tmp_path, "fail = nvmlDeviceGetHandleByIndex_v2@gpu6 NVML_SUCCESS",
                   "fail = *@gpu6 UNKNOWN", "fail = nvmlDeviceGetName@gpu6 NVML_ERROR_IRQ_ISSUE")
    proc = run_python(ASK + "g = h(6)\nprint(ask(lambda: nv.nvmlDeviceGetName(g)),"
                            " ask(lambda: nv.nvmlDeviceGetTemperature(g, 0)))\n", scn)
    assert proc.stdout.strip() == "NVMLError_Unknown NVMLError_Unknown", proc.stderr


def test_star_hang_blocks_the_handle_of_that_gpu(run_python, tmp_path) -> None:
    scn = scenario(tmp_path, "hang = *@gpu1")
    code = (ASK + "import threading\nt = threading.Thread(target=h, args=(1,), daemon=True)\n"
            "t.start(); t.join(1.0)\nprint('alive' if t.is_alive() else 'returned', nv.nvmlDeviceGetName(h(2)))\n")
    proc = run_python(code, scn, timeout=20)
    assert proc.stdout.strip() == "alive NVIDIA H100 80GB HBM3", proc.stderr


@pytest.mark.parametrize(("rule", "message"), [
    ("fail = * UNKNOWN", "'*' needs a GPU: '*@gpuN'"),
    ("hang = *", "'*' needs a GPU: '*@gpuN'"),
    ("fail = *@gpu8 UNKNOWN", "rule for * names GPU 8 but gpu_count is 8"),
])
def test_bad_star_rule_is_rejected(run_python, tmp_path, rule, message) -> None:
    proc = run_python("import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n"
                      "    print(type(e).__name__)\n", scenario(tmp_path, rule))
    assert proc.stdout.strip() == "NVMLError_Unknown"
    assert message in proc.stderr
