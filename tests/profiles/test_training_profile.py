"""The profiles' `training:` section (docs/training.md): typed and bounded keys, generic's defaults equal to the
ones the cluster's training stage falls back to, and the GPU profiles' scaling minimums."""

from __future__ import annotations

import pytest

from gpucheck import profiles
from gpucheck.cluster.stages import training_verdict


def check(training: dict) -> None:
    profiles.validate({"training": training}, "site.yaml")


def test_the_keys_are_the_contracts_and_a_valid_section_loads():
    assert set(profiles.SCHEMA["training"]) == set(training_verdict.DEFAULTS)
    check({"reference_fraction_min": 0.4, "scaling_efficiency_node_min": 1, "scaling_efficiency_cluster_min": 0.6})


@pytest.mark.parametrize("training,words", [
    ({"scaling_efficiency_node_min": 75}, "'training.scaling_efficiency_node_min' must be a finite number in (0, 1]"),
    ({"scaling_efficiency_cluster_min": 0}, "'training.scaling_efficiency_cluster_min' must be a finite number in"),
    ({"reference_fraction_min": 1.5}, "'training.reference_fraction_min' must be a finite number in (0, 1]"),
    ({"reference_fraction_min": "half"}, "'training.reference_fraction_min' must be int/float"),
    ({"images_per_s_min": 2000}, "unknown key 'training.images_per_s_min'"),
])
def test_a_bad_value_is_one_line_naming_the_key(training, words):
    with pytest.raises(profiles.ProfileError) as caught:
        check(training)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_generic_states_the_defaults_the_stage_falls_back_to():
    assert profiles.load("generic").data["training"] == training_verdict.DEFAULTS


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100", "dgx1-v100", "hgx-h200"])
def test_the_gpu_profiles_set_scaling_minimums_below_nvidias_own_8_gpu_runs(name):
    training = profiles.load(name).data["training"]
    # NVIDIA's published 8-GPU ResNet-50 runs (checks/gpus.yaml [rn50-tf], [rn50-pyt]) reach 84-94% of 8 x 1 GPU
    assert 0.5 <= training["scaling_efficiency_node_min"] < 0.84
    assert 0.5 <= training["scaling_efficiency_cluster_min"] <= training["scaling_efficiency_node_min"]
