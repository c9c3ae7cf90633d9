"""Scenarios seen through pynvml (nvidia-ml-py 13.x) exactly as the agent sees them.

Each probe runs in a subprocess whose LD_LIBRARY_PATH puts the fake first, so
``pynvml.nvmlInit()`` loads it unmodified.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakenvml_helpers import PROBE, ProbeResult, parse_lines

from lab.fakenvml import env_for, scenario_path

MIB = 1024 * 1024

# DGX H100 as the healthy scenario must present it (see lab/scenarios/dgx-h100.scn for sources).
H100_BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
                "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
H100_UUIDS = [
    "GPU-b27db3ff-a991-550d-6c5a-50887329a33f", "GPU-15c4aacf-f76d-fc94-1613-35654ddce444",
    "GPU-aa789da6-caee-3d35-c597-a79bfa8aff2f", "GPU-eb1b57b5-2baa-14f9-d653-f3c8926fc103",
    "GPU-1312b2f2-c333-2303-1c66-33e15f07d203", "GPU-cff1d000-d178-7f10-4af3-dfb81c36ebca",
    "GPU-0ef7c6e9-3617-a15f-9948-8bcc8fe7c230", "GPU-3e52d92c-967b-7d35-ffcd-50fded921915",
]
H100_TEMPS = [30, 30, 31, 30, 28, 30, 29, 29]
H100_POWER_MW = [100890, 82810, 85120, 84970, 84230, 85410, 86050, 75260]


@pytest.fixture(scope="module")
def healthy(libdir: Path) -> ProbeResult:
    proc = subprocess.run([sys.executable, str(PROBE)], env=env_for(scenario_path("dgx-h100"), libdir),
                          capture_output=True, text=True, timeout=60, check=True)
    return ProbeResult(parse_lines(proc.stdout), proc.stderr)


def test_dgx_h100_system_values(healthy: ProbeResult) -> None:
    assert healthy.done
    assert healthy.value("driver_version") == "535.183.01"
    assert healthy.value("nvml_version") == "12.535.183.01"
    assert healthy.value("cuda_driver_version") == 12020
    assert healthy.value("cuda_driver_version_v2") == 12020
    assert healthy.value("count") == 8
    assert healthy.value("error_string_18") == "RM has detected an NVML/RM version mismatch."
    assert healthy.error("count_after_shutdown") == "NVMLError_Uninitialized"


@pytest.mark.parametrize("gpu", range(8))
def test_dgx_h100_gpu_values(healthy: ProbeResult, gpu: int) -> None:
    v = lambda key: healthy.value(key, gpu)  # noqa: E731
    assert v("index") == gpu
    assert v("minor_number") == gpu
    assert v("name") == "NVIDIA H100 80GB HBM3"
    assert v("uuid") == H100_UUIDS[gpu]
    assert len(v("serial")) == 13
    assert (v("vbios_version"), v("board_part_number"), v("inforom_image_version")) == (
        "96.00.99.00.01", "692-2G520-0200-000", "G520.0200.00.05")
    bus = int(H100_BUS_IDS[gpu][9:11], 16)
    assert v("pci") == {"busId": H100_BUS_IDS[gpu], "busIdLegacy": H100_BUS_IDS[gpu][4:], "domain": 0,
                        "bus": bus, "device": 0, "pciDeviceId": 0x233010DE, "pciSubSystemId": 0x16C110DE}
    total, reserved, used = 81559 * MIB, 454 * MIB, 1 * MIB
    assert v("memory") == {"total": total, "used": reserved + used, "free": total - reserved - used}
    assert v("memory_v2") == {"version": 0x02000028, "total": total, "reserved": reserved, "used": used,
                              "free": total - reserved - used}
    assert v("compute_capability") == [9, 0]
    assert v("persistence_mode") == 1
    assert v("mig_mode") == [0, 0]
    assert v("ecc_mode") == [1, 1]
    for counter in ("corrected_volatile", "corrected_aggregate", "uncorrected_volatile", "uncorrected_aggregate"):
        assert v(f"ecc_{counter}") == 0
    for key in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"):
        assert healthy.error(key, gpu) == "NVMLError_NotSupported"  # Hopper remaps rows instead
    assert v("remapped_rows") == [0, 0, 0, 0]
    assert v("compute_processes") == [] and v("graphics_processes") == []  # idle: no program on it
    assert v("clocks_event_reasons") == 0x1  # GPU idle only
    assert v("clocks_throttle_reasons") == 0x1
    assert v("sm_clock_MHz") == 345  # idle
    assert healthy.error("mem_clock_MHz", gpu) == "NVMLError_NotSupported"  # only the SM clock is modelled
    assert v("temperature") == H100_TEMPS[gpu]
    assert v("temperature_v") == H100_TEMPS[gpu]
    assert (v("threshold_shutdown"), v("threshold_slowdown"), v("threshold_gpu_max"), v("threshold_mem_max")) == (
        92, 89, 87, 95)
    assert v("power_usage_mW") == H100_POWER_MW[gpu]
    assert v("enforced_power_limit_mW") == 700_000
    assert (v("pcie_gen_current"), v("pcie_gen_max"), v("pcie_width_current"), v("pcie_width_max")) == (5, 5, 16, 16)
    assert v("nvlink") == {"states": [1] * 18, "stop": "NVMLError_InvalidArgument"}
    assert healthy.error("numa_node", gpu) == "NVMLError_NotSupported"
    assert v("fabric") == {"clusterUuid": [0] * 16, "status": 0, "cliqueId": 0, "state": 3}
    assert v("fabric_v2")["state"] == 3 and v("fabric_v2")["version"] == 0x02000024
    assert v("fabric_v3")["state"] == 3 and v("fabric_v3")["version"] == 0x03000028
    assert v("handle_by_uuid_index") == gpu
    assert v("handle_by_pci_index") == gpu


def test_dgx_a100(run_probe) -> None:
    r = run_probe("dgx-a100")
    assert r.value("count") == 8
    assert r.value("name", 5) == "NVIDIA A100-SXM4-80GB"
    assert r.value("pci", 5)["busId"] == "00000000:90:00.0"
    assert r.value("memory", 0)["total"] == 81920 * MIB
    assert r.value("compute_capability", 0) == [8, 0]
    assert (r.value("pcie_gen_max", 0), r.value("pcie_width_max", 0)) == (4, 16)
    assert r.value("nvlink", 7) == {"states": [1] * 12, "stop": "NVMLError_InvalidArgument"}
    assert r.value("enforced_power_limit_mW", 0) == 400_000
    assert r.value("remapped_rows", 0) == [0, 0, 0, 0]
    assert r.error("retired_pages_dbe", 0) == "NVMLError_NotSupported"
    assert r.error("fabric_v3", 0) == "NVMLError_NotSupported"


def test_t4(run_probe) -> None:
    r = run_probe("t4")
    assert r.value("count") == 1
    assert r.value("name", 0) == "Tesla T4"
    assert r.value("uuid", 0) == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert r.value("pci", 0)["busId"] == "00000000:00:1E.0"
    assert r.value("memory_v2", 0)["total"] == 15360 * MIB
    assert r.value("compute_capability", 0) == [7, 5]
    assert (r.value("pcie_gen_max", 0), r.value("pcie_width_max", 0)) == (3, 16)
    assert r.value("enforced_power_limit_mW", 0) == 70_000
    assert r.value("retired_pages_sbe", 0) == []
    assert r.value("retired_pages_dbe", 0) == []
    assert r.value("retired_pages_pending", 0) == 0
    assert r.error("remapped_rows", 0) == "NVMLError_NotSupported"
    assert r.error("nvlink", 0) == "NVMLError_NotSupported"
    assert r.error("mig_mode", 0) == "NVMLError_NotSupported"
    assert r.value("cuda_driver_version") == 11070


def test_h100_1gpu_is_the_measured_gpu(run_probe) -> None:
    r = run_probe("h100-1gpu")
    assert r.value("count") == 1
    assert (r.value("driver_version"), r.value("cuda_driver_version")) == ("580.159.04", 13000)
    assert r.value("name", 0) == "NVIDIA H100 80GB HBM3"
    assert r.value("pci", 0)["busId"] == "00000000:00:06.0"
    assert r.value("memory_v2", 0)["total"] == 81559 * MIB and r.value("memory_v2", 0)["reserved"] == 480 * MIB
    assert (r.value("temperature", 0), r.value("threshold_slowdown", 0)) == (34, 89)
    assert (r.value("power_usage_mW", 0), r.value("enforced_power_limit_mW", 0)) == (72588, 700_000)
    assert r.error("nvlink", 0) == "NVMLError_NotSupported"
    assert r.error("fabric_v3", 0) == "NVMLError_NotSupported"


def test_h100_1gpu_burn_is_the_measured_gpu_under_load(run_probe) -> None:
    idle, burn = run_probe("h100-1gpu"), run_probe("h100-1gpu-burn")
    assert _diff(idle, burn) == {(0, "clocks_event_reasons"): _val(0x4), (0, "clocks_throttle_reasons"): _val(0x4),
                                 (0, "sm_clock_MHz"): _val(1380), (0, "temperature"): _val(58),
                                 (0, "temperature_v"): _val(58), (0, "power_usage_mW"): _val(698960)}


def test_p100(run_probe) -> None:
    r = run_probe("p100")
    assert r.value("name", 0) == "Tesla P100-PCIE-16GB"
    assert r.value("memory", 0)["total"] == 16384 * MIB
    assert r.value("compute_capability", 0) == [6, 0]
    assert r.value("ecc_corrected_aggregate", 0) == 3
    assert r.value("ecc_corrected_volatile", 0) == 0
    assert r.value("enforced_power_limit_mW", 0) == 250_000
    assert r.error("threshold_gpu_max", 0) == "NVMLError_NotSupported"
    assert r.error("remapped_rows", 0) == "NVMLError_NotSupported"


def _diff(healthy: ProbeResult, other: ProbeResult) -> dict[tuple[int | None, str], Any]:
    keys = set(healthy.answers) | set(other.answers)
    return {k: other.answers.get(k) for k in keys if healthy.answers.get(k) != other.answers.get(k)}


def _gone(gpu: int, healthy: ProbeResult) -> dict[tuple[int | None, str], Any]:
    return {k: None for k in healthy.answers if k[0] == gpu}


def _val(v: Any) -> tuple[str, Any]:
    return ("value", v)


FAULTS: dict[str, Any] = {
    "ecc-uncorrected": lambda h: {(3, "ecc_uncorrected_volatile"): _val(2), (3, "ecc_uncorrected_aggregate"): _val(2)},
    # survives_reset is no NVML answer: only the lab's stand-in nvidia-smi -r reads it (test_fakenvml_reset.py)
    "ecc-uncorrected-persistent": lambda h: {(3, "ecc_uncorrected_volatile"): _val(2),
                                             (3, "ecc_uncorrected_aggregate"): _val(2)},
    "row-remap-pending": lambda h: {(5, "remapped_rows"): _val([0, 0, 1, 0])},
    "row-remap-failure": lambda h: {(2, "remapped_rows"): _val([0, 0, 0, 1])},
    "pcie-downtrained": lambda h: {(6, "pcie_gen_current"): _val(3), (6, "pcie_width_current"): _val(8)},
    "nvlink-down": lambda h: {(1, "nvlink"): _val(
        {"states": [1, 1, 1, 1, 0, 0] + [1] * 12, "stop": "NVMLError_InvalidArgument"})},
    "throttling": lambda h: {(7, "clocks_event_reasons"): _val(0x48), (7, "clocks_throttle_reasons"): _val(0x48)},
    "overheat": lambda h: {(0, "temperature"): _val(92), (0, "temperature_v"): _val(92),
                           (0, "threshold_slowdown"): _val(90)},
    "hot-under-load": lambda h: {},  # idle, as this probe is: its fault shows only under load
    "persistence-off": lambda h: {(g, "persistence_mode"): _val(0) for g in range(8)},
    "seven-of-eight": lambda h: {(None, "count"): _val(7), **_gone(7, h)},
    "gpu-lost": lambda h: {**_gone(4, h), (4, "handle"): ("error", "NVMLError_GpuIsLost")},
    "mig-enabled": lambda h: {(0, "mig_mode"): _val([1, 1])},
    "lab": lambda h: {(None, "count"): _val(2), **{k: v for g in range(2, 8) for k, v in _gone(g, h).items()}},
    "ecc-read-error": lambda h: {(3, f"ecc_{kind}_{scope}"): ("error", "NVMLError_Unknown")
                                 for kind in ("corrected", "uncorrected") for scope in ("volatile", "aggregate")},
    # the handle is given (first matching rule), every other answer about GPU 6 is an error
    "busy": lambda h: {(3, "compute_processes"): _val([[576, 75971428352]])},
    "gpu-unresponsive": lambda h: {k: ("error", "NVMLError_Unknown") for k in h.answers
                                   if k[0] == 6 and k[1] != "handle"},
}


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_each_fault_changes_exactly_its_answers(healthy: ProbeResult, run_probe, scenario: str) -> None:
    """The fault is visible, on the right GPU, and nothing else differs from the healthy DGX H100."""
    result = run_probe(scenario)
    assert result.done
    assert _diff(healthy, result) == FAULTS[scenario](healthy)


def test_every_scenario_file_is_covered_by_a_test() -> None:
    tested = set(FAULTS) | {"dgx-h100", "dgx-a100", "t4", "p100", "driver-mismatch", "hang", "h100-1gpu",
                            "hang-shutdown", "h100-1gpu-burn",
                            # judged end to end against their derived profiles: tests/node/test_derived_profile.py
                            "h200-1gpu", "l40s-4gpu", "a100-pcie-8gpu", "h100-pcie-8gpu", "h200-nvl-8gpu"}
    present = {p.stem for p in scenario_path("dgx-h100").parent.glob("*.scn")}
    assert present == tested


def test_gpu_lost_answers_lost_however_the_gpu_is_reached(run_python) -> None:
    code = (
        "import pynvml as nv\n"
        "nv.nvmlInit()\n"
        "for fn, arg in [(nv.nvmlDeviceGetHandleByIndex, 4),\n"
        f"                (nv.nvmlDeviceGetHandleByUUID, {H100_UUIDS[4]!r}),\n"
        f"                (nv.nvmlDeviceGetHandleByPciBusId, {H100_BUS_IDS[4]!r})]:\n"
        "    try:\n"
        "        fn(arg); print('ok')\n"
        "    except nv.NVMLError as e:\n"
        "        print(type(e).__name__)\n"
        "print(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(3)))\n"
        "print(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(5)))\n"
    )
    proc = run_python(code, "gpu-lost")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:5] == ["NVMLError_GpuIsLost"] * 3 + ["NVIDIA H100 80GB HBM3"] * 2


def test_driver_mismatch_fails_init(run_probe) -> None:
    r = run_probe("driver-mismatch")
    assert r.error("init") == "NVMLError_LibRmVersionMismatch"
    assert r.error("count_after_failed_init") == "NVMLError_Uninitialized"


def _timed_out_probe(libdir: Path, trace: Path, *args: str, timeout: float = 3.0) -> list[dict[str, Any]]:
    with pytest.raises(subprocess.TimeoutExpired) as info:
        subprocess.run([sys.executable, str(PROBE), *args], env=env_for(scenario_path("hang"), libdir, trace),
                       capture_output=True, text=True, timeout=timeout, check=False)
    return parse_lines(info.value.stdout)


def test_hang_blocks_at_the_temperature_of_gpu_2_only(libdir: Path, tmp_path: Path, healthy: ProbeResult) -> None:
    trace = tmp_path / "trace"
    lines = _timed_out_probe(libdir, trace)
    answered = {(line["gpu"], line["key"]) for line in lines}
    per_gpu = {k for (g, k) in healthy.answers if g == 0}
    assert {(g, k) for g in (0, 1) for k in per_gpu} <= answered  # GPUs before it answered everything
    assert (2, "pcie_width_max") not in answered
    assert (2, "clocks_throttle_reasons") in answered  # the call just before the temperature
    assert (2, "temperature") not in answered
    assert not any(line.get("done") for line in lines)
    assert trace.read_text().splitlines()[-1] == "nvmlDeviceGetTemperature gpu=2"


def test_hang_also_blocks_temperature_v_and_nothing_on_other_gpus(libdir: Path, tmp_path: Path, run_probe) -> None:
    trace = tmp_path / "trace"
    _timed_out_probe(libdir, trace, "--gpus", "2", "--only", "temperature_v")
    assert trace.read_text().splitlines()[-1] == "nvmlDeviceGetTemperatureV gpu=2"
    others = run_probe("hang", "--gpus", "0,1,3,4,5,6,7", timeout=30)
    assert others.done
    assert others.value("temperature", 3) == 30


def test_a_hung_call_blocks_only_its_own_thread(run_python) -> None:
    """ctypes releases the GIL: an agent can time a hung NVML call out from another thread."""
    code = (
        "import threading, pynvml as nv\n"
        "nv.nvmlInit()\n"
        "h2 = nv.nvmlDeviceGetHandleByIndex(2)\n"
        "t = threading.Thread(target=nv.nvmlDeviceGetTemperature, args=(h2, 0), daemon=True)\n"
        "t.start(); t.join(1.0)\n"
        "print('alive' if t.is_alive() else 'returned')\n"
        "print(nv.nvmlDeviceGetTemperature(nv.nvmlDeviceGetHandleByIndex(3), 0))\n"
    )
    proc = run_python(code, "hang", timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["alive", "30"]


def test_hang_shutdown_answers_everything_then_blocks_at_shutdown(libdir: Path, tmp_path: Path,
                                                                  healthy: ProbeResult, run_probe) -> None:
    before = run_probe("hang-shutdown", "--no-shutdown")
    assert before.done
    assert before.answers == {k: v for k, v in healthy.answers.items()
                              if k[1] not in ("shutdown", "count_after_shutdown")}
    trace = tmp_path / "trace"
    with pytest.raises(subprocess.TimeoutExpired) as info:
        subprocess.run([sys.executable, str(PROBE), "--gpus", "0", "--only", "name"],
                       env=env_for(scenario_path("hang-shutdown"), libdir, trace),
                       capture_output=True, text=True, timeout=3, check=False)
    assert not any(line.get("done") for line in parse_lines(info.value.stdout))
    assert trace.read_text().splitlines()[-1] == "nvmlShutdown"
