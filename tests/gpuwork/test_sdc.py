"""The sdc checksum: the same seed gives the same bits; one changed input element, another seed, or a GPU that
computes other bits (FAKECUPY_PERTURB_SDC) gives another checksum."""

from __future__ import annotations

import numpy as np
from gpuwork_helpers import PERTURB_ONE_ELEMENT, environment, last_json, run_program, run_python

from gpucheck.gpuwork import sdc


def checksum(*args: str, **variables: str) -> str:
    run = run_program("worker", "--tests", "sdc", "--sdc-n", "128", *args, env=environment(**variables))
    result = run.result("sdc")
    assert result["error"] is None, result
    return result["checksum"]


def test_the_same_seed_gives_the_same_checksum_run_after_run() -> None:
    assert checksum() == checksum()


def test_another_seed_gives_another_checksum() -> None:
    assert checksum("--sdc-seed", "1") != checksum("--sdc-seed", "2")


def test_a_gpu_computing_other_bits_gives_another_checksum() -> None:
    assert checksum(FAKECUPY_PERTURB_SDC="1") != checksum()


def test_a_perturbation_limited_to_another_gpu_changes_nothing_here() -> None:
    """FAKECUPY_FAULT_GPUS aims the fault at one GPU's worker: the others compute the common checksum."""
    here = {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}
    assert checksum(FAKECUPY_PERTURB_SDC="1", FAKECUPY_FAULT_GPUS="GPU-bbbb", **here) == checksum(**here)
    assert checksum(FAKECUPY_PERTURB_SDC="1", FAKECUPY_FAULT_GPUS="GPU-aaaa", **here) != checksum(**here)


def test_inputs_come_from_the_seed_on_the_host() -> None:
    a1, b1 = sdc.inputs(5, 64)
    a2, b2 = sdc.inputs(5, 64)
    assert a1.dtype == np.float16 and a1.shape == (64, 64)
    assert a1.tobytes() == a2.tobytes() and b1.tobytes() == b2.tobytes()
    assert a1.tobytes() != b1.tobytes()
    assert sdc.inputs(6, 64)[0].tobytes() != a1.tobytes()


def test_one_changed_input_element_changes_the_checksum() -> None:
    found = last_json(run_python(PERTURB_ONE_ELEMENT, environment()))
    assert found["first"] == found["again"]
    assert found["changed"] != found["first"]
