"""Which checks a change of NVML's polled fields concerns (watch/fields.concerned), pure."""

from __future__ import annotations

import copy

from gpucheck.watch.fields import concerned, flaps, settled

GPU = {"ecc_uncorrected": 0, "remapped_rows": [0, 0, 0], "retired_pending": None, "clock_events": 0,
       "temperature_c": 40, "power_limit_mw": 700000, "pcie_width": 16, "nvlinks_up": 18}
SAMPLE = {"gpu_count": 2, "fabric_manager": True, "gpus": {"0": dict(GPU), "1": dict(GPU)}}


def changed(**fields) -> dict:
    now = copy.deepcopy(SAMPLE)
    for key, value in fields.items():
        index, name = key.split("__")
        now["gpus"][index.removeprefix("g")][name] = value
    return now


def test_the_first_sample_judges_nothing_and_the_same_sample_again_nothing():
    assert concerned(None, SAMPLE) == {}
    assert concerned(SAMPLE, copy.deepcopy(SAMPLE)) == {}


def test_each_field_names_its_check_and_what_moved():
    assert concerned(SAMPLE, changed(g1__ecc_uncorrected=2)) == {"gpu.ecc_errors": ["GPU1 ecc_uncorrected 0 -> 2"]}
    assert list(concerned(SAMPLE, changed(g0__remapped_rows=[0, 1, 0]))) == ["gpu.row_remap"]
    assert list(concerned(SAMPLE, changed(g0__clock_events=0x40))) == ["gpu.clocks"]
    assert list(concerned(SAMPLE, changed(g0__nvlinks_up=17))) == ["gpu.nvlink"]
    assert list(concerned(SAMPLE, changed(g0__pcie_width=8))) == ["gpu.pcie"]
    assert list(concerned(SAMPLE, {**SAMPLE, "fabric_manager": False})) == ["gpu.fabric_manager"]
    assert list(concerned(SAMPLE, {**SAMPLE, "gpu_count": 1})) == ["gpu.count"]
    # a field NVML stopped answering is a change too: its check says what that means
    assert list(concerned(SAMPLE, changed(g0__ecc_uncorrected="NVML_ERROR_GPU_IS_LOST"))) == ["gpu.ecc_errors"]


def test_a_temperature_is_judged_once_per_step_up_and_never_on_the_way_down():
    assert concerned(SAMPLE, changed(g0__temperature_c=44)) == {}
    warmer = changed(g0__temperature_c=44)
    kept = settled(SAMPLE, warmer)
    assert kept["gpus"]["0"]["temperature_c"] == 40  # a slow climb is measured from the last judged reading
    assert list(concerned(kept, changed(g0__temperature_c=45))) == ["gpu.temperature"]
    cooler = settled(SAMPLE, changed(g0__temperature_c=30))
    assert concerned(SAMPLE, changed(g0__temperature_c=30)) == {} and cooler["gpus"]["0"]["temperature_c"] == 30


def test_a_ports_link_downed_stepping_is_a_flap_for_ib_counters_and_a_new_port_is_no_step():
    assert flaps({"mlx5_0/1": 3}, {"mlx5_0/1": 4, "mlx5_1/1": 9}) == {"ib.counters": ["mlx5_0/1 link_downed 3 -> 4"]}
    assert flaps(None, {"mlx5_0/1": 4}) == {}  # the first reading judges nothing
    assert flaps({"mlx5_0/1": 4}, {"mlx5_0/1": 4}) == {}
