"""The fake and nvidia-ml-py agree on every struct layout and constant they exchange.

A C program compiled against the same nvml.h the fake is built with prints sizes, offsets and
constants; each is compared with the matching pynvml (ctypes) definition. If nvidia-ml-py and
the header ever disagree (a struct grows, a version constant changes), this fails and names it.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pynvml
import pytest

from lab.fakenvml import find_header

# (label, C expression, pynvml value)
SIZES = [
    ("sizeof nvmlMemory_t", "sizeof(nvmlMemory_t)", ctypes.sizeof(pynvml.c_nvmlMemory_t)),
    ("sizeof nvmlMemory_v2_t", "sizeof(nvmlMemory_v2_t)", ctypes.sizeof(pynvml.c_nvmlMemory_v2_t)),
    ("sizeof nvmlPciInfo_t", "sizeof(nvmlPciInfo_t)", ctypes.sizeof(pynvml.nvmlPciInfo_t)),
    ("sizeof nvmlRemappedRowsInfo_v2_t", "sizeof(nvmlRemappedRowsInfo_v2_t)",
     ctypes.sizeof(pynvml.c_nvmlRemappedRowsInfo_v2_t)),
    ("sizeof nvmlTemperature_v1_t", "sizeof(nvmlTemperature_v1_t)", ctypes.sizeof(pynvml.c_nvmlTemperature_v1_t)),
    ("sizeof nvmlGpuFabricInfo_t", "sizeof(nvmlGpuFabricInfo_t)", ctypes.sizeof(pynvml.c_nvmlGpuFabricInfo_t)),
    ("sizeof nvmlGpuFabricInfo_v2_t", "sizeof(nvmlGpuFabricInfo_v2_t)",
     ctypes.sizeof(pynvml.c_nvmlGpuFabricInfo_v2_t)),
    ("sizeof nvmlGpuFabricInfo_v3_t", "sizeof(nvmlGpuFabricInfo_v3_t)",
     ctypes.sizeof(pynvml.c_nvmlGpuFabricInfo_v3_t)),
    ("sizeof nvmlDevice_t", "sizeof(nvmlDevice_t)", ctypes.sizeof(pynvml.c_nvmlDevice_t)),
    ("sizeof nvmlEnableState_t", "sizeof(nvmlEnableState_t)", ctypes.sizeof(pynvml._nvmlEnableState_t)),
]

OFFSETS = [
    ("nvmlPciInfo_t.busIdLegacy", "offsetof(nvmlPciInfo_t, busIdLegacy)", pynvml.nvmlPciInfo_t.busIdLegacy.offset),
    ("nvmlPciInfo_t.domain", "offsetof(nvmlPciInfo_t, domain)", pynvml.nvmlPciInfo_t.domain.offset),
    ("nvmlPciInfo_t.bus", "offsetof(nvmlPciInfo_t, bus)", pynvml.nvmlPciInfo_t.bus.offset),
    ("nvmlPciInfo_t.device", "offsetof(nvmlPciInfo_t, device)", pynvml.nvmlPciInfo_t.device.offset),
    ("nvmlPciInfo_t.pciDeviceId", "offsetof(nvmlPciInfo_t, pciDeviceId)", pynvml.nvmlPciInfo_t.pciDeviceId.offset),
    ("nvmlPciInfo_t.pciSubSystemId", "offsetof(nvmlPciInfo_t, pciSubSystemId)",
     pynvml.nvmlPciInfo_t.pciSubSystemId.offset),
    ("nvmlPciInfo_t.busId", "offsetof(nvmlPciInfo_t, busId)", pynvml.nvmlPciInfo_t.busId.offset),
    ("nvmlMemory_t.total", "offsetof(nvmlMemory_t, total)", pynvml.c_nvmlMemory_t.total.offset),
    ("nvmlMemory_t.free", "offsetof(nvmlMemory_t, free)", pynvml.c_nvmlMemory_t.free.offset),
    ("nvmlMemory_t.used", "offsetof(nvmlMemory_t, used)", pynvml.c_nvmlMemory_t.used.offset),
    ("nvmlMemory_v2_t.version", "offsetof(nvmlMemory_v2_t, version)", pynvml.c_nvmlMemory_v2_t.version.offset),
    ("nvmlMemory_v2_t.total", "offsetof(nvmlMemory_v2_t, total)", pynvml.c_nvmlMemory_v2_t.total.offset),
    ("nvmlMemory_v2_t.reserved", "offsetof(nvmlMemory_v2_t, reserved)", pynvml.c_nvmlMemory_v2_t.reserved.offset),
    ("nvmlMemory_v2_t.free", "offsetof(nvmlMemory_v2_t, free)", pynvml.c_nvmlMemory_v2_t.free.offset),
    ("nvmlMemory_v2_t.used", "offsetof(nvmlMemory_v2_t, used)", pynvml.c_nvmlMemory_v2_t.used.offset),
    ("nvmlTemperature_v1_t.sensorType", "offsetof(nvmlTemperature_v1_t, sensorType)",
     pynvml.c_nvmlTemperature_v1_t.sensorType.offset),
    ("nvmlTemperature_v1_t.temperature", "offsetof(nvmlTemperature_v1_t, temperature)",
     pynvml.c_nvmlTemperature_v1_t.temperature.offset),
    ("nvmlGpuFabricInfo_t.status", "offsetof(nvmlGpuFabricInfo_t, status)", pynvml.c_nvmlGpuFabricInfo_t.status.offset),
    ("nvmlGpuFabricInfo_t.cliqueId", "offsetof(nvmlGpuFabricInfo_t, cliqueId)",
     pynvml.c_nvmlGpuFabricInfo_t.cliqueId.offset),
    ("nvmlGpuFabricInfo_t.state", "offsetof(nvmlGpuFabricInfo_t, state)", pynvml.c_nvmlGpuFabricInfo_t.state.offset),
    ("nvmlGpuFabricInfo_v2_t.state", "offsetof(nvmlGpuFabricInfo_v2_t, state)",
     pynvml.c_nvmlGpuFabricInfo_v2_t.state.offset),
    ("nvmlGpuFabricInfo_v2_t.healthMask", "offsetof(nvmlGpuFabricInfo_v2_t, healthMask)",
     pynvml.c_nvmlGpuFabricInfo_v2_t.healthMask.offset),
    ("nvmlGpuFabricInfo_v3_t.healthSummary", "offsetof(nvmlGpuFabricInfo_v3_t, healthSummary)",
     pynvml.c_nvmlGpuFabricInfo_v3_t.healthSummary.offset),
]

CONSTANTS = [
    ("nvmlMemory_v2", "nvmlMemory_v2", pynvml.nvmlMemory_v2),
    ("nvmlTemperature_v1", "nvmlTemperature_v1", pynvml.nvmlTemperature_v1),
    ("nvmlGpuFabricInfo_v2", "nvmlGpuFabricInfo_v2", pynvml.nvmlGpuFabricInfo_v2),
    ("nvmlGpuFabricInfo_v3", "nvmlGpuFabricInfo_v3", pynvml.nvmlGpuFabricInfo_v3),
    *[(name, name, getattr(pynvml, name)) for name in [
        "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INSUFFICIENT_SIZE", "NVML_ERROR_LIBRARY_NOT_FOUND",
        "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_UNKNOWN",
        "NVML_DEVICE_NAME_V2_BUFFER_SIZE", "NVML_DEVICE_UUID_V2_BUFFER_SIZE", "NVML_DEVICE_SERIAL_BUFFER_SIZE",
        "NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE", "NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE",
        "NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE", "NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE",
        "NVML_NVLINK_MAX_LINKS", "NVML_FEATURE_ENABLED", "NVML_DEVICE_MIG_ENABLE",
        "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC",
        "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
        "NVML_TEMPERATURE_GPU", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
        "NVML_TEMPERATURE_THRESHOLD_MEM_MAX", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX",
        "NVML_GPU_FABRIC_STATE_COMPLETED", "NVML_GPU_FABRIC_UUID_LEN",
    ]],
    ("clocks gpu_idle", "nvmlClocksEventReasonGpuIdle", pynvml.nvmlClocksEventReasonGpuIdle),
    ("clocks sw_power_cap", "nvmlClocksEventReasonSwPowerCap", pynvml.nvmlClocksEventReasonSwPowerCap),
    ("clocks hw_slowdown", "nvmlClocksThrottleReasonHwSlowdown", pynvml.nvmlClocksEventReasonHwSlowdown),
    ("clocks sw_thermal_slowdown", "nvmlClocksEventReasonSwThermalSlowdown",
     pynvml.nvmlClocksEventReasonSwThermalSlowdown),
    ("clocks hw_thermal_slowdown", "nvmlClocksThrottleReasonHwThermalSlowdown",
     pynvml.nvmlClocksEventReasonHwThermalSlowdown),
    ("clocks hw_power_brake_slowdown", "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
     pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
]

ALL = SIZES + OFFSETS + CONSTANTS


@pytest.fixture(scope="module")
def c_values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "a C compiler is needed to build the fake NVML library and this check"
    header = find_header()
    src = tmp_path_factory.mktemp("layout") / "layout.c"
    prints = "\n".join(f'    printf("%s=%llu\\n", "{label}", (unsigned long long)({expr}));'
                       for label, expr, _ in ALL)
    src.write_text(f"#include <stddef.h>\n#include <stdio.h>\n#include <nvml.h>\nint main(void)\n{{\n{prints}\n"
                   "    return 0;\n}\n")
    exe = src.with_suffix("")
    subprocess.run([gcc, "-std=c11", "-Wall", "-Werror", "-Wno-deprecated-declarations",
                    f"-I{header.parent}", "-o", str(exe), str(src)], check=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=30).stdout
    return {k: int(v) for k, v in (line.split("=", 1) for line in out.splitlines())}


def test_the_three_structs_named_in_the_design_have_the_expected_sizes(c_values: dict[str, int]) -> None:
    assert c_values["sizeof nvmlMemory_t"] == 24
    assert c_values["sizeof nvmlMemory_v2_t"] == 40
    assert c_values["sizeof nvmlPciInfo_t"] == 68
    assert c_values["nvmlMemory_v2"] == 0x02000028


@pytest.mark.parametrize(("label", "py_value"), [(label, value) for label, _, value in ALL],
                         ids=[label for label, _, _ in ALL])
def test_header_and_pynvml_agree(c_values: dict[str, int], label: str, py_value: int) -> None:
    assert c_values[label] == py_value, f"{label}: nvml.h says {c_values[label]}, nvidia-ml-py says {py_value}"


def test_the_header_is_the_pinned_one() -> None:
    from lab.fakenvml import HEADER_SHA256, _sha256

    assert _sha256(Path(find_header())) == HEADER_SHA256
