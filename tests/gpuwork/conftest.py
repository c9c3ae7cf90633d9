"""Fixtures of the GPU program tests: the fake NVML library (for the burn's sampling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.fakenvml import build_library, scenario_path


@pytest.fixture(scope="session")
def nvml_libdir() -> Path:
    return build_library()


@pytest.fixture(scope="session")
def fake_nvml(nvml_libdir: Path):
    """`fake_nvml("h100-1gpu-burn")` -> the variables that make pynvml load the fake with that scenario."""

    def variables(scenario: str) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(nvml_libdir), "FAKENVML_SCENARIO": str(scenario_path(scenario))}

    return variables
