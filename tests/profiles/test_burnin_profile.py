"""The profiles' `burnin:` section (docs/burnin.md's table): every key typed and bounded, names checked, and the
shipped profiles' thresholds where the node side reads them."""

from __future__ import annotations

import pytest

from gpucheck import profiles, skus
from gpucheck.node import dcgm, health
from gpucheck.node.burnin import judge


def check(burnin: dict) -> None:
    profiles.validate({"burnin": burnin}, "site.yaml")


def test_every_key_of_the_contract_is_in_the_schema():
    keys = {"gemm_fraction_min", "gemm_dtypes", "memory_bandwidth_fraction_min", "host_bandwidth_fraction_min",
            "p2p_bandwidth_fraction_min", "memtest_coverage_min", "burn_collapse_fraction_min",
            "burn_temperature_C_max", "burn_reasons_fail", "dcgm_level", "dcgm_required"}
    assert set(profiles.SCHEMA["burnin"]) == keys
    assert "nccl_allreduce_internode_busbw_GBps_min" in profiles.SCHEMA["bandwidth"]


def test_a_valid_section_loads():
    check({"gemm_fraction_min": 1, "gemm_dtypes": ["bf16", "fp64"], "memtest_coverage_min": 0.5,
           "burn_temperature_C_max": 87.5, "burn_reasons_fail": ["hw_slowdown", "sw_power_cap"], "dcgm_level": 4,
           "dcgm_required": True})
    profiles.validate({"bandwidth": {"nccl_allreduce_internode_busbw_GBps_min": 40}}, "site.yaml")


@pytest.mark.parametrize("burnin,words", [
    ({"gemm_fraction_min": 0}, "'burnin.gemm_fraction_min' must be a finite number in (0, 1], got 0"),
    ({"memory_bandwidth_fraction_min": 1.2}, "'burnin.memory_bandwidth_fraction_min' must be a finite number in"),
    ({"burn_collapse_fraction_min": float("nan")}, "'burnin.burn_collapse_fraction_min' must be a finite number"),
    ({"memtest_coverage_min": 0}, "'burnin.memtest_coverage_min' must be a finite number in (0, 1]"),
    ({"memtest_coverage_min": 85}, "'burnin.memtest_coverage_min' must be a finite number in (0, 1], got 85"),
    ({"host_bandwidth_fraction_min": "0.6"}, "'burnin.host_bandwidth_fraction_min' must be int/float, got '0.6'"),
    ({"gemm_dtypes": ["bf17"]}, "has unknown name 'bf17' (did you mean 'bf16'? known: bf16, fp16, tf32, fp32, fp64)"),
    ({"gemm_dtypes": "bf16"}, "'burnin.gemm_dtypes' must be list"),
    ({"burn_reasons_fail": ["hw_slowdwn"]}, "did you mean 'hw_slowdown'?"),
    ({"dcgm_level": 5}, "'burnin.dcgm_level' must be a finite number in [1, 4], got 5"),
    ({"dcgm_level": 0}, "'burnin.dcgm_level' must be a finite number in [1, 4]"),
    ({"dcgm_level": 2.5}, "'burnin.dcgm_level' must be int, got 2.5"),
    ({"dcgm_required": "yes"}, "'burnin.dcgm_required' must be bool"),
    ({"burn_temperature_C_max": 0}, "'burnin.burn_temperature_C_max' must be a finite number in (0, 150]"),
    ({"burn_seconds": 60}, "unknown key 'burnin.burn_seconds'"),
])
def test_a_bad_value_is_one_line_naming_the_key(burnin, words):
    with pytest.raises(profiles.ProfileError) as caught:
        check(burnin)
    assert words in str(caught.value)


def test_the_dtype_names_are_the_sku_tables():
    assert profiles.LIST_NAMES[("burnin", "gemm_dtypes")][0] is skus.DTYPES


def test_generic_states_the_defaults_the_node_side_falls_back_to():
    generic = profiles.load("generic").data["burnin"]
    assert {key: generic[key] for key in judge.DEFAULTS} == judge.DEFAULTS
    assert generic["dcgm_level"] == dcgm.DEFAULT_LEVEL and generic["dcgm_required"] is False
    assert judge.DEFAULTS["burn_reasons_fail"] == health.DEFAULT_FAIL_REASONS


@pytest.mark.parametrize("name,required", [("dgx-h100", True), ("dgx-a100", True), ("hgx-h200", True),
                                           ("dgx1-v100", True), ("lab", False), ("h100-1gpu", False),
                                           ("pcie-1gpu", False), ("legacy-kepler-pascal", False)])
def test_every_shipped_profile_has_burn_in_thresholds(name, required):
    burnin = profiles.load(name).data["burnin"]
    assert burnin["dcgm_required"] is required and burnin["dcgm_level"] == 2  # within the default --bench-timeout
    for key in judge.DEFAULTS:
        assert burnin.get(key) is not None, f"{name}: burnin.{key}"
