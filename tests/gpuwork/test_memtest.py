"""The memory test finds exactly the bad words: a bad HBM row planted by the fake GPU (FAKECUPY_CORRUPT), and
words changed by hand between a fill and a verify (through an index and through a raw pointer)."""

from __future__ import annotations

import pytest
from gpuwork_helpers import FILL_CORRUPT_VERIFY, environment, last_json, run_program, run_python

from gpucheck.gpuwork import memtest

PATTERNS = ["alternating", "zeros_ones", "walking_ones", "walking_zeros", "address", "moving_inversion"]
# Verify passes per pattern: 2 alternating, zeros then ones, 8 walking ones, 8 walking zeros, 1 address,
# and the moving inversion's ascending and descending passes.
PASSES = {"alternating": 2, "zeros_ones": 2, "walking_ones": 8, "walking_zeros": 8, "address": 1,
          "moving_inversion": 2}


def memtest_result(**variables: str) -> dict:
    run = run_program("worker", "--tests", "memtest", env=environment(**variables))
    assert run.exit == 0, run.stderr
    return run.result("memtest")


def test_planted_bad_words_are_found_with_their_offsets_and_counts() -> None:
    planted = [3, 4097, 500_000, 7_000_000]  # word indices; the buffer starts at word 0 of the fake GPU
    result = memtest_result(FAKECUPY_CORRUPT=",".join(map(str, planted)))
    assert result["error"] is None and result["fault"] is None
    assert result["bad_words"] == len(planted)
    assert result["bad_offsets"] == [8 * w for w in planted]
    # a bad word fails every verify pass of every pattern (it comes out of each write flipped)
    assert result["bad_by_pattern"] == {p: PASSES[p] * len(planted) for p in PATTERNS}


def test_only_the_first_16_offsets_are_listed_but_every_bad_word_is_counted() -> None:
    planted = list(range(100, 100 + 40 * 1001, 1001))
    result = memtest_result(FAKECUPY_CORRUPT=",".join(map(str, planted)))
    assert result["bad_words"] == 40
    assert result["bad_offsets"] == [8 * w for w in planted[:16]]


def test_a_bad_word_outside_the_tested_buffer_is_not_reported() -> None:
    """Memory beside the buffer (left for the verify chunks) is not tested: a bad word there is not made up."""
    last_word = 64 * 2**20 // 8 - 1
    result = memtest_result(FAKECUPY_CORRUPT=str(last_word))
    assert result["bytes_tested"] < 8 * last_word
    assert result["bad_words"] == 0


@pytest.mark.parametrize("fraction", ["0.86", "0.95"])
def test_coverage_follows_the_fraction_and_the_chunks_fit_beside_the_buffer(fraction: str) -> None:
    run = run_program("worker", "--tests", "memtest", "--memtest-fraction", fraction)
    result = run.result("memtest")
    assert result["error"] is None, result
    assert result["bytes_tested"] == pytest.approx(float(fraction) * result["free_bytes"], rel=1e-3)
    # coverage is of the GPU's whole memory: the fake GPU's 64 MiB the driver keeps are not tested
    assert result["coverage"] == pytest.approx(result["bytes_tested"] / result["total_bytes"], abs=1e-4)
    assert result["total_bytes"] == result["free_bytes"] + 64 * 2**20
    # the fake GPU raises out of memory like a real one: passing proves the chunk temporaries fit beside it
    assert result["chunk_bytes"] * memtest.TEMPORARY_CHUNKS <= result["free_bytes"] - result["bytes_tested"]


def test_a_fraction_that_leaves_no_room_for_the_chunks_is_an_error_not_a_crash() -> None:
    run = run_program("worker", "--tests", "memtest,sdc", "--sdc-n", "64", "--memtest-fraction", "0.9999")
    assert run.result("memtest")["error"].startswith("too little memory beside the test buffer")
    assert run.result("sdc")["error"] is None


def test_fill_then_changed_words_then_verify_finds_exactly_them() -> None:
    found = last_json(run_python(FILL_CORRUPT_VERIFY, environment()))
    for pattern in ("alternating", "address"):
        assert found[pattern] == {"clean": 0, "bad": 3, "positions": [12_345, 250_001, 299_999]}, pattern


def test_findings_count_distinct_words_and_say_when_they_are_a_lower_bound() -> None:
    findings = memtest.Findings()
    findings.add("alternating", memtest.PassResult(2, [5, 9]))
    findings.add("address", memtest.PassResult(1, [9]))
    assert findings.bad_words() == 2 and findings.bad_by_pattern["alternating"] == 2
    findings.add("zeros_ones", memtest.PassResult(10_000, list(range(memtest.TRACKED_PER_PASS))))
    assert not findings.exact
    assert findings.bad_words() == 10_000  # the largest single pass: at least that many words are bad


def test_walking_patterns_walk_each_bit_through_every_byte() -> None:
    ones = memtest.SIMPLE_PATTERNS["walking_ones"]
    assert [f"{v:016x}" for v in ones[:2]] == ["0101010101010101", "0202020202020202"]
    assert len(ones) == 8 and all(bin(v).count("1") == 8 for v in ones)
    assert [v ^ memtest.ALL_ONES for v in memtest.SIMPLE_PATTERNS["walking_zeros"]] == ones
