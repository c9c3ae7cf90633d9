"""The fake library itself: exported symbols, C-level semantics, scenario validation, tracing, docs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from fakenvml_helpers import PROBE

import lab.fakenvml as fakenvml
from lab.fakenvml import SCENARIOS_DIR, SOURCE, env_for, pci, scenario_path

# What pynvml 13.x resolves for the wrappers the agent uses (asked for by the brief) ...
REQUIRED = {
    "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString", "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetIndex", "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNumaNodeId",
}
# ... and a few more that are cheap and likely to be wanted.
EXTRA = {"nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetTemperatureV",
         "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
         "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId_v2",
         "nvmlDeviceGetClockInfo",  # the SM clock the burn-in samples
         "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetInforomImageVersion"}  # rma
# Function names a `hang`/`fail` rule may use: every exported symbol but nvmlErrorString.
RULE_FUNCTIONS = sorted((REQUIRED | EXTRA) - {"nvmlErrorString"})

HEADER_LIB = "import ctypes as C, json\nL = C.CDLL('libnvidia-ml.so.1')\n"


def exported(libdir: Path) -> set[str]:
    nm = shutil.which("nm")
    assert nm, "nm (binutils, installed with gcc) is needed to list the library's symbols"
    out = subprocess.run([nm, "-D", "--defined-only", str(libdir / "libnvidia-ml.so.1")],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


def write_scenario(tmp_path: Path, text: str, name: str = "s.scn") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def include_healthy() -> str:
    return f"include = {scenario_path('dgx-h100')}\n"


# --- symbols ------------------------------------------------------------------------------------

def test_exports_exactly_the_implemented_symbols(libdir: Path) -> None:
    assert exported(libdir) == REQUIRED | EXTRA


def test_every_export_is_a_name_pynvml_resolves() -> None:
    """Each symbol is one nvidia-ml-py looks up by name; nvmlInit_v2 is the exception (C callers use it,
    pynvml.nvmlInit() calls nvmlInitWithFlags(0))."""
    source = Path(pynvml.__file__).read_text()
    missing = [s for s in REQUIRED | EXTRA if f'_nvmlGetFunctionPointer("{s}")' not in source]
    assert missing == ["nvmlInit_v2"], f"pynvml never asks for {missing}"


def test_a_misspelt_symbol_does_not_compile(tmp_path: Path) -> None:
    """-Werror=missing-prototypes: a function nvml.h does not declare cannot slip into the library."""
    src = tmp_path / "bad.c"
    src.write_text(SOURCE.read_text() + "\nnvmlReturn_t nvmlDeviceGetTemprature(void) { return NVML_SUCCESS; }\n")
    header = fakenvml.find_header()
    proc = subprocess.run([shutil.which("gcc") or "cc", *fakenvml.CFLAGS, f"-I{header.parent}", "-o",
                           str(tmp_path / "bad.so"), str(src), *fakenvml.LIBS],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "nvmlDeviceGetTemprature" in proc.stderr and "missing-prototypes" in proc.stderr


def test_the_source_is_warning_free_under_strict_flags(tmp_path: Path) -> None:
    header = fakenvml.find_header()
    proc = subprocess.run([shutil.which("gcc") or "cc", *fakenvml.CFLAGS, "-Werror", "-Wshadow", "-Wconversion",
                           "-Wformat=2", f"-I{header.parent}", "-o", str(tmp_path / "strict.so"), str(SOURCE),
                           *fakenvml.LIBS], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_build_is_cached_and_rebuilds_when_the_source_changes(tmp_path: Path, monkeypatch) -> None:
    first = fakenvml.build_library(tmp_path)
    assert (first / "libnvidia-ml.so.1").is_file()
    assert fakenvml.build_library(tmp_path) == first
    changed = tmp_path / "fakenvml.c"
    changed.write_text(SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(fakenvml, "SOURCE", changed)
    second = fakenvml.build_library(tmp_path)
    assert second != first and (second / "libnvidia-ml.so.1").is_file()


# --- no library, default scenario -----------------------------------------------------------------

def test_without_the_fake_pynvml_finds_no_nvml_library(tmp_path: Path) -> None:
    """Proves that nothing else on this machine answers as libnvidia-ml.so.1."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, LD_LIBRARY_PATH=str(empty))
    code = ("import pynvml\ntry:\n    pynvml.nvmlInit()\n    print('loaded')\n"
            "except pynvml.NVMLError as e:\n    print(type(e).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.stdout.strip() == "NVMLError_LibraryNotFound", "a real libnvidia-ml.so.1 answers on this machine"


def test_default_scenario_path_is_etc_fakenvml_scenario(run_python) -> None:
    if Path("/etc/fakenvml/scenario").exists():
        pytest.skip("this machine has a /etc/fakenvml/scenario (a lab host)")
    proc = run_python("import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n"
                      "    print(type(e).__name__)\n", "dgx-h100", extra_env={"FAKENVML_SCENARIO": ""})
    assert proc.stdout.strip() == "NVMLError_Unknown"
    assert "cannot read scenario /etc/fakenvml/scenario" in proc.stderr


def test_env_for(tmp_path: Path) -> None:
    env = env_for(Path("/s.scn"), tmp_path, None)
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)
    assert env["FAKENVML_SCENARIO"] == "/s.scn"
    assert "FAKENVML_TRACE" not in env
    assert env_for(Path("/s.scn"), tmp_path, tmp_path / "t")["FAKENVML_TRACE"] == str(tmp_path / "t")
    with pytest.raises(FileNotFoundError, match="no scenario 'nope'"):
        scenario_path("nope")


# --- C-level semantics (ctypes, in a subprocess) ---------------------------------------------------

def ctypes_run(run_python, body: str, scenario: str | Path = "dgx-h100") -> dict:
    proc = run_python(HEADER_LIB + body, scenario)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_calls_before_init_and_after_shutdown_are_uninitialized(run_python) -> None:
    r = ctypes_run(run_python, (
        "n = C.c_uint(); out = {}\n"
        "out['before'] = L.nvmlDeviceGetCount_v2(C.byref(n))\n"
        "out['shutdown_before'] = L.nvmlShutdown()\n"
        "L.nvmlErrorString.restype = C.c_char_p\n"
        "out['errstr_before_init'] = L.nvmlErrorString(15).decode()\n"
        "out['init1'] = L.nvmlInit_v2(); out['init2'] = L.nvmlInitWithFlags(0)\n"
        "out['shutdown1'] = L.nvmlShutdown()\n"
        "out['still'] = L.nvmlDeviceGetCount_v2(C.byref(n)); out['n'] = n.value\n"
        "out['shutdown2'] = L.nvmlShutdown()\n"
        "out['after'] = L.nvmlDeviceGetCount_v2(C.byref(n))\n"
        "print(json.dumps(out))\n"))
    assert r == {"before": 1, "shutdown_before": 1, "errstr_before_init": "GPU is lost", "init1": 0, "init2": 0,
                 "shutdown1": 0, "still": 0, "n": 8, "shutdown2": 0, "after": 1}


def test_handles_and_output_pointers_are_checked(run_python) -> None:
    r = ctypes_run(run_python, (
        "L.nvmlInit_v2(); out = {}\n"
        "buf = C.create_string_buffer(96); h = C.c_void_p(); u = C.c_uint()\n"
        "out['null_handle'] = L.nvmlDeviceGetName(None, buf, 96)\n"
        "fake = C.create_string_buffer(4096)\n"
        "out['foreign_handle'] = L.nvmlDeviceGetName(C.addressof(fake), buf, 96)\n"
        "out['index_8'] = L.nvmlDeviceGetHandleByIndex_v2(8, C.byref(h))\n"
        "out['null_out_handle'] = L.nvmlDeviceGetHandleByIndex_v2(0, None)\n"
        "out['null_count'] = L.nvmlDeviceGetCount_v2(None)\n"
        "out['ok'] = L.nvmlDeviceGetHandleByIndex_v2(3, C.byref(h))\n"
        "out['null_power'] = L.nvmlDeviceGetPowerUsage(h, None)\n"
        "out['inside_handle'] = L.nvmlDeviceGetName(C.c_void_p(h.value + 4), buf, 96)\n"
        "out['short_name'] = L.nvmlDeviceGetName(h, buf, 5)\n"
        "out['name'] = L.nvmlDeviceGetName(h, buf, 96); out['name_value'] = buf.value.decode()\n"
        "out['index'] = L.nvmlDeviceGetIndex(h, C.byref(u)); out['index_value'] = u.value\n"
        "print(json.dumps(out))\n"))
    assert r == {"null_handle": 2, "foreign_handle": 2, "index_8": 2, "null_out_handle": 2, "null_count": 2,
                 "ok": 0, "null_power": 2, "inside_handle": 2, "short_name": 7, "name": 0,
                 "name_value": "NVIDIA H100 80GB HBM3", "index": 0, "index_value": 3}


def test_enum_and_version_arguments_are_checked(run_python) -> None:
    r = ctypes_run(run_python, (
        "L.nvmlInit_v2(); out = {}\n"
        "h = C.c_void_p(); L.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h))\n"
        "u = C.c_uint(); q = C.c_ulonglong()\n"
        "out['ecc_type_2'] = L.nvmlDeviceGetTotalEccErrors(h, 2, 0, C.byref(q))\n"
        "out['ecc_counter_2'] = L.nvmlDeviceGetTotalEccErrors(h, 0, 2, C.byref(q))\n"
        "out['threshold_8'] = L.nvmlDeviceGetTemperatureThreshold(h, 8, C.byref(u))\n"
        "out['threshold_acoustic'] = L.nvmlDeviceGetTemperatureThreshold(h, 4, C.byref(u))\n"
        "out['sensor_gpu_max'] = L.nvmlDeviceGetTemperature(h, 1, C.byref(u))\n"
        "out['sensor_2'] = L.nvmlDeviceGetTemperature(h, 2, C.byref(u))\n"
        "out['retire_cause_2'] = L.nvmlDeviceGetRetiredPages(h, 2, C.byref(u), None)\n"
        "out['nvlink_18'] = L.nvmlDeviceGetNvLinkState(h, 18, C.byref(u))\n"
        "out['nvlink_17'] = L.nvmlDeviceGetNvLinkState(h, 17, C.byref(u))\n"
        "m = (C.c_ubyte * 40)()\n"
        "out['mem_v2_no_version'] = L.nvmlDeviceGetMemoryInfo_v2(h, m)\n"
        "t = (C.c_uint * 3)(0, 0, 0)\n"
        "out['temp_v_no_version'] = L.nvmlDeviceGetTemperatureV(h, t)\n"
        "f = (C.c_uint * 10)()\n"
        "out['fabric_v_no_version'] = L.nvmlDeviceGetGpuFabricInfoV(h, f)\n"
        "C.memmove(m, C.byref(C.c_uint(0x02000028)), 4)\n"
        "out['mem_v2'] = L.nvmlDeviceGetMemoryInfo_v2(h, m)\n"
        "print(json.dumps(out))\n"))
    assert r == {"ecc_type_2": 2, "ecc_counter_2": 2, "threshold_8": 2, "threshold_acoustic": 3,
                 "sensor_gpu_max": 3, "sensor_2": 2, "retire_cause_2": 2, "nvlink_18": 2, "nvlink_17": 0,
                 "mem_v2_no_version": 25, "temp_v_no_version": 25, "fabric_v_no_version": 25, "mem_v2": 0}


def test_retired_pages_count_protocol(run_python, tmp_path: Path) -> None:
    scn = write_scenario(tmp_path, f"include = {scenario_path('t4')}\n"
                                   "gpu.0.retired_pages_dbe = 0x1000, 0x2000 0x3000\n")
    r = ctypes_run(run_python, (
        "import pynvml\n"
        "L.nvmlInit_v2(); out = {}\n"
        "h = C.c_void_p(); L.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h))\n"
        "n = C.c_uint(0)\n"
        "out['size_query'] = [L.nvmlDeviceGetRetiredPages(h, 1, C.byref(n), None), n.value]\n"
        "buf = (C.c_ulonglong * 8)()\n"
        "n.value = 2; out['too_small'] = [L.nvmlDeviceGetRetiredPages(h, 1, C.byref(n), buf), n.value]\n"
        "n.value = 3; out['null_buffer'] = L.nvmlDeviceGetRetiredPages(h, 1, C.byref(n), None)\n"
        "n.value = 8; out['fill'] = [L.nvmlDeviceGetRetiredPages(h, 1, C.byref(n), buf), n.value, list(buf[:4])]\n"
        "n.value = 0; out['sbe_none'] = [L.nvmlDeviceGetRetiredPages(h, 0, C.byref(n), None), n.value]\n"
        "out['null_count'] = L.nvmlDeviceGetRetiredPages(h, 1, None, buf)\n"
        "pynvml.nvmlInit(); ph = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
        "out['pynvml'] = pynvml.nvmlDeviceGetRetiredPages(ph, 1)\n"
        "print(json.dumps(out))\n"), scn)
    assert r == {"size_query": [7, 3], "too_small": [7, 3], "null_buffer": 2,
                 "fill": [0, 3, [0x1000, 0x2000, 0x3000, 0]], "sbe_none": [0, 0], "null_count": 2,
                 "pynvml": [0x1000, 0x2000, 0x3000]}


def test_fail_rule_answers_the_code_for_that_call_and_gpu_only(run_python, tmp_path: Path) -> None:
    scn = write_scenario(tmp_path, include_healthy() + "fail = nvmlDeviceGetPowerUsage@gpu1 NVML_ERROR_UNKNOWN\n"
                                                       "fail = nvmlSystemGetDriverVersion 9\n")
    proc = run_python(
        "import pynvml as nv\nnv.nvmlInit()\nout = []\n"
        "power = lambda i: nv.nvmlDeviceGetPowerUsage(nv.nvmlDeviceGetHandleByIndex(i))\n"
        "for fn in (nv.nvmlSystemGetDriverVersion, lambda: power(1), lambda: power(0)):\n"
        "    try:\n        out.append(fn())\n    except nv.NVMLError as e:\n        out.append(type(e).__name__)\n"
        "print(out)\n", scn)
    assert proc.stdout.strip() == "['NVMLError_DriverNotLoaded', 'NVMLError_Unknown', 100890]", proc.stderr


def test_every_implemented_function_can_be_named_in_a_rule(run_python, tmp_path: Path) -> None:
    per_gpu = [f for f in RULE_FUNCTIONS if f.startswith("nvmlDevice") and f != "nvmlDeviceGetCount_v2"]
    system = [f for f in RULE_FUNCTIONS if f not in per_gpu and not f.startswith("nvmlInit")]
    lines = [f"fail = {f}@gpu0 NVML_ERROR_UNKNOWN" for f in per_gpu] + [f"hang = {f}" for f in system]
    scn = write_scenario(tmp_path, include_healthy() + "\n".join(lines) + "\n")
    proc = run_python("import pynvml\npynvml.nvmlInit()\nprint('ok')\n", scn)
    assert proc.stdout.strip() == "ok", proc.stderr


# --- scenario validation ---------------------------------------------------------------------------

BAD_SCENARIOS = [
    ("gpu.0.temprature_C = 40\n", "s.scn:2: unknown key 'gpu.0.temprature_C'"),
    ("driver_verison = 1\n", "s.scn:2: unknown key 'driver_verison'"),
    ("gpu.0.temperature_C = hot\n", "s.scn:2: bad value for 'gpu.0.temperature_C': 'hot'"),
    ("gpu.*.persistence_mode = maybe\n", "bad value for 'gpu.*.persistence_mode'"),
    ("gpu.1.clocks_event_reasons = hw_slowdwn\n", "bad value for 'gpu.1.clocks_event_reasons'"),
    ("gpu.64.name = x\n", "bad GPU index in key 'gpu.64.name'"),
    ("gpu.1.nvlink_down = 18\n", "gpu.1.nvlink_down names link 18 but nvlink_count is 18"),
    ("gpu.0.memory_used_bytes = 0xffffffffffff\n", "gpu.0: reserved + used memory exceed total"),
    ("hang = nvmlDeviceGetTemprature@gpu2\n", "'hang' names unknown function 'nvmlDeviceGetTemprature'"),
    ("hang = nvmlSystemGetDriverVersion@gpu0\n", "'nvmlSystemGetDriverVersion' is not a per-GPU function"),
    ("fail = nvmlDeviceGetPowerUsage\n", "'fail' needs 'FUNCTION[@gpuN] CODE'"),
    ("fail = nvmlDeviceGetPowerUsage NVML_ERROR_NOPE\n", "bad return code 'NVML_ERROR_NOPE'"),
    ("lost = 8\n", "'lost' names GPU 8 but gpu_count is 8"),
    ("init_error = 4242\n", "bad value for 'init_error'"),
    ("gpu_count = 65\n", "'gpu_count' must be 0..64"),
    ("just words\n", "expected 'key = value', got 'just words'"),
    ("include = missing.scn\n", "cannot read scenario"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_SCENARIOS, ids=[m for _, m in BAD_SCENARIOS])
def test_bad_scenario_fails_init_naming_the_problem(run_python, tmp_path: Path, extra: str, message: str) -> None:
    scn = write_scenario(tmp_path, include_healthy() + extra)
    proc = run_python("import pynvml\ntry:\n    pynvml.nvmlInit()\n    print('initialised')\n"
                      "except pynvml.NVMLError as e:\n    print(type(e).__name__)\n", scn)
    assert proc.stdout.strip() == "NVMLError_Unknown"
    assert message in proc.stderr
    assert "rejected; nvmlInit fails" in proc.stderr


def test_scenario_without_gpu_count_is_rejected(run_python, tmp_path: Path) -> None:
    proc = run_python("import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n"
                      "    print(type(e).__name__)\n", write_scenario(tmp_path, "driver_version = 1\n"))
    assert proc.stdout.strip() == "NVMLError_Unknown"
    assert "'gpu_count' is required" in proc.stderr


def test_last_assignment_wins_and_wildcards_apply_in_order(run_python, tmp_path: Path) -> None:
    scn = write_scenario(tmp_path, include_healthy() + "gpu.*.temperature_C = 50   # all\n"
                                                       "gpu.2.temperature_C = \"41\"\n"
                                                       "gpu.3.power_usage_mW = unsupported\n")
    proc = run_python(
        "import pynvml as nv\nnv.nvmlInit()\nh = nv.nvmlDeviceGetHandleByIndex\n"
        "print([nv.nvmlDeviceGetTemperature(h(i), 0) for i in range(4)])\n"
        "try:\n    nv.nvmlDeviceGetPowerUsage(h(3))\nexcept nv.NVMLError as e:\n    print(type(e).__name__)\n", scn)
    assert proc.stdout.split("\n")[:2] == ["[50, 50, 41, 50]", "NVMLError_NotSupported"], proc.stderr


@pytest.mark.parametrize("present", [False, True])
def test_include_if_present_reads_the_file_only_when_it_exists(run_python, tmp_path: Path, present) -> None:
    # a lab node's scenario ends with it: NVML answers the installed driver package's version, once there is one
    driver = tmp_path / "driver.scn"
    if present:
        driver.write_text("driver_version = 550.163.01\n")
    scn = write_scenario(tmp_path, include_healthy() + f"include_if_present = {driver}\n")
    proc = run_python("import pynvml as nv\nnv.nvmlInit()\nprint(nv.nvmlSystemGetDriverVersion())\n", scn)
    assert proc.stdout.strip() == ("550.163.01" if present else "535.183.01"), proc.stderr
    assert [v for k, v in pci.assignments(scn) if k == "driver_version"][-1] == proc.stdout.strip()


@pytest.mark.parametrize(("module", "answer"), [
    ("535.183.01", "535.183.01"),                   # the loaded module is the library's driver
    ("535.161.07", "NVMLError_LibRmVersionMismatch"),  # upgraded, not rebooted: the real library refuses
    (None, "535.183.01"),                           # no module version said: no check (a host without one)
])
def test_a_kernel_module_of_another_version_fails_init(run_python, tmp_path: Path, module, answer) -> None:
    scn = write_scenario(tmp_path, include_healthy() + (f"kernel_module_version = {module}\n" if module else ""))
    proc = run_python("import pynvml as nv\ntry:\n    nv.nvmlInit()\n    print(nv.nvmlSystemGetDriverVersion())\n"
                      "except nv.NVMLError as e:\n    print(type(e).__name__)\n", scn)
    assert proc.stdout.strip() == answer, proc.stderr


# --- trace -----------------------------------------------------------------------------------------

def test_trace_lists_every_call_with_its_gpu(libdir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    proc = subprocess.run([sys.executable, str(PROBE)], env=env_for(scenario_path("dgx-h100"), libdir, trace),
                          capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.rstrip().endswith('{"done": true}')
    lines = trace.read_text().splitlines()
    assert lines[0] == "nvmlInitWithFlags"  # what pynvml.nvmlInit() calls
    assert lines[-2:] == ["nvmlShutdown", "nvmlDeviceGetCount_v2"]
    called = {line.split()[0] for line in lines}
    # The probe reaches every symbol through pynvml except nvmlInit_v2 (pynvml never calls it).
    assert called == exported(libdir) - {"nvmlInit_v2"}
    for line in lines:
        assert re.fullmatch(r"nvml\w+( gpu=[0-7])?", line), line
    per_gpu = {line.split()[0] for line in lines if line.endswith(" gpu=5")}
    assert "nvmlDeviceGetRemappedRows" in per_gpu and "nvmlDeviceGetNvLinkState" in per_gpu
    assert sum(line == "nvmlDeviceGetNvLinkState gpu=5" for line in lines) == 19  # links 0..17, then 18 fails


# --- documentation ---------------------------------------------------------------------------------

def test_readme_documents_every_key_function_and_scenario() -> None:
    readme = (SCENARIOS_DIR / "README.md").read_text()
    source = SOURCE.read_text()
    keys = re.findall(r'\[[FS]_\w+\] = \{"(\w+)"', source)
    assert len(keys) > 40
    assert [k for k in keys if f"`{k}`" not in readme] == []
    for key in ("include", "include_if_present", "hang", "fail", "lost"):
        assert f"`{key}`" in readme
    assert [f for f in REQUIRED | EXTRA if f"`{f}`" not in readme] == []
    assert [p.name for p in SCENARIOS_DIR.glob("*.scn") if f"`{p.name}`" not in readme] == []
