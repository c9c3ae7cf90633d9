"""The names a profile's lists may hold are the names the node checks read: one definition each, in
profiles.py (a foundation module, which may not import node/), kept equal to what node/ uses."""

from __future__ import annotations

from pathlib import Path

from gpucheck import profiles
from gpucheck.config import KNOWN_FRAMEWORKS
from gpucheck.node import health, nvml
from gpucheck.node.stack import frameworks, known_libraries


def test_library_names_are_the_libraries_the_node_looks_for() -> None:
    assert tuple(known_libraries.LIBRARIES) == profiles.LIBRARY_NAMES


def test_clock_event_reasons_are_the_nvml_bits_in_order() -> None:
    assert tuple(nvml.CLOCK_EVENT_BITS.values()) == profiles.CLOCK_EVENT_REASONS
    assert list(nvml.CLOCK_EVENT_BITS) == [1 << bit for bit in range(len(profiles.CLOCK_EVENT_REASONS))]
    defaults = health.DEFAULT_FAIL_REASONS + health.DEFAULT_WARN_REASONS
    assert set(defaults) <= set(profiles.CLOCK_EVENT_REASONS)


def test_horovod_names_are_those_the_framework_check_knows() -> None:
    known = set(frameworks.HOROVOD_BUILT_KEYS)
    assert set(profiles.HOROVOD_CONTROLLERS) <= known and set(profiles.HOROVOD_OPERATIONS) <= known


def test_framework_names_come_from_config() -> None:
    assert profiles.LIST_NAMES[("frameworks", "required")][0] is KNOWN_FRAMEWORKS


def test_every_shipped_profile_loads() -> None:
    shipped = sorted(path for path in (Path(profiles.__file__).resolve().parent / "checks").glob("*.yaml")
                     if path.name != profiles.SKU_TABLE_FILE)  # the GPU SKU table: tests/test_skus.py
    assert {"generic", "dgx-h100", "lab"} <= {path.stem for path in shipped}
    for path in shipped:
        assert profiles.load(str(path)).name == path.stem
