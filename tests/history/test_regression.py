"""Baselines and regressions (history/regression.py) on series with known drops, made from the H200's measured
full run: a GPU 10 % slower than its baseline warns, naming it; run-to-run noise does not; a slow drift past
the threshold warns against the baseline while the recent median has followed it down; rising error counters
warn; a GPU keeps its past on another node; the first passing full run is the baseline until one is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store import UUID, node_report

from gpucheck.history.records import from_document
from gpucheck.history.regression import DEFAULT_DROP_PCT, compare
from gpucheck.history.store import FIRST_BASELINE, Store


def run_of(host: str, day: int, bf16: float, remapped: int = 0, status_of: dict | None = None):
    doc = node_report(host, f"2026-11-{day:02d}T03:00:00Z", bf16, status_of)
    for result in doc["results"]:
        if result["check"] == "gpu.row_remap":
            result["measured"]["GPU0"]["correctable"] = remapped
    return from_document(doc)


def store_with(tmp_path: Path, series: list[float], host: str = "gpu07") -> Store:
    store = Store(tmp_path / "h.sqlite")
    for day, bf16 in enumerate(series, 1):
        store.record(run_of(host, day, bf16), f"{day}")
    return store


def drops(findings) -> list[tuple]:
    return [(f.gpu, f.uuid, f.check, f.figure, f.value, f.baseline, f.median, f.drop_pct)
            for f in findings if f.kind == "drop"]


def test_a_gpu_ten_percent_below_its_baseline_warns_naming_it(tmp_path: Path) -> None:
    with store_with(tmp_path, [790.0, 789.0, 791.0, 788.0, 790.0]) as store:
        findings, based = compare(store, run_of("gpu07", 20, 711.0).nodes[0])
    assert based
    assert drops(findings) == [(0, UUID, "gpu.gemm", "bf16_TFLOPS", 711.0, 790.0, 790.0, 10.0)]
    assert findings[0].text() == (f"GPU0 ({UUID}) gpu.gemm bf16_TFLOPS 711 TFLOPS: baseline 790 "
                                  "(2026-11-01T03:00:00Z) -10.0 %, recent median 790 -10.0 %")


@pytest.mark.parametrize("bf16", [790.0, 762.0, 830.0])
def test_noise_within_the_threshold_and_a_faster_gpu_say_nothing(tmp_path: Path, bf16: float) -> None:
    with store_with(tmp_path, [790.0, 785.0, 795.0, 788.0]) as store:
        findings, _ = compare(store, run_of("gpu07", 20, bf16).nodes[0])
    assert findings == []


def test_a_slow_drift_warns_against_the_baseline_though_the_median_followed_it(tmp_path: Path) -> None:
    with store_with(tmp_path, [790.0, 770.0, 755.0, 752.0, 750.0]) as store:
        [finding] = compare(store, run_of("gpu07", 20, 749.0).nodes[0])[0]
    assert (finding.baseline, finding.median, finding.drop_pct) == (790.0, 755.0, 5.19)


def test_the_threshold_is_the_callers(tmp_path: Path) -> None:
    with store_with(tmp_path, [790.0, 790.0, 790.0, 790.0]) as store:
        part = run_of("gpu07", 20, 766.0).nodes[0]  # 3 % down
        assert compare(store, part)[0] == [] and DEFAULT_DROP_PCT == 5.0
        assert drops(compare(store, part, drop_pct=2.0)[0])[0][-1] == 3.04


@pytest.mark.parametrize(("tf32", "warns"), [(389.2, False), (378.0, True)])
def test_tf32_warns_only_past_the_spread_a_healthy_h200_showed(tmp_path: Path, tf32: float, warns: bool) -> None:
    """The real H200's tf32 GEMM read 389-411 TFLOP/s over three days (tests/fixtures/measured/h200-141gb-driver580)
    while bf16 held within 0.3 %: 5.3 % below a high baseline is that GPU warming up; 8 % below is a regression."""
    def with_tf32(day: int, value: float):
        doc = node_report("gpu07", f"2026-11-{day:02d}T03:00:00Z", 790.0)
        next(r for r in doc["results"] if r["check"] == "gpu.gemm")["measured"]["GPU0"]["tf32_TFLOPS"] = value
        return from_document(doc)

    with Store(tmp_path / "h.sqlite") as store:
        for day, value in enumerate([410.9, 408.2, 398.2, 390.2], 1):
            store.record(with_tf32(day, value), f"{day}")
        found = drops(compare(store, with_tf32(20, tf32).nodes[0])[0])
    assert [f[3] for f in found] == (["tf32_TFLOPS"] if warns else []), found


def test_rising_error_counters_warn_and_a_reset_does_not(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        store.record(run_of("gpu07", 1, 790.0, remapped=1), "1")
        [rise] = compare(store, run_of("gpu07", 2, 790.0, remapped=3).nodes[0])[0]
        assert (rise.kind, rise.check, rise.figure, rise.before, rise.value) == (
            "rise", "gpu.row_remap", "correctable", 1.0, 3.0)
        assert rise.text() == f"GPU0 ({UUID}) gpu.row_remap correctable rose from 1 to 3 since 2026-11-01T03:00:00Z"
        assert compare(store, run_of("gpu07", 2, 790.0, remapped=0).nodes[0])[0] == []
        failing = run_of("gpu07", 2, 790.0, remapped=3, status_of={"gpu.row_remap": "fail"}).nodes[0]
        assert compare(store, failing)[0] == []  # its own check fails on it: no second word about it


def test_a_gpu_moved_to_another_node_keeps_its_baseline(tmp_path: Path) -> None:
    with store_with(tmp_path, [790.0, 789.0]) as store:
        findings, based = compare(store, run_of("gpu12", 20, 700.0).nodes[0])
    assert based and drops(findings)[0][:2] == (0, UUID) and drops(findings)[0][5] == 790.0


def test_without_a_past_there_is_nothing_to_compare(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        assert compare(store, run_of("gpu07", 1, 500.0).nodes[0]) == ([], False)


def test_the_first_passing_full_run_is_the_baseline_until_one_is_set(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        store.record(run_of("gpu07", 1, 600.0, status_of={"gpu.gemm": "fail"}), "failed")
        store.record(run_of("gpu07", 2, 790.0), "passed")
        store.record(run_of("gpu07", 3, 700.0), "later")
        [base] = store.query("SELECT nr.started, b.how FROM baselines b JOIN node_runs nr ON nr.id = b.node_run_id")
        assert base == {"started": "2026-11-02T03:00:00Z", "how": FIRST_BASELINE}
        later = store.query("SELECT id FROM node_runs WHERE started = '2026-11-03T03:00:00Z'")[0]["id"]
        store.set_baseline("gpu07", later, "set by hand")
        findings, _ = compare(store, run_of("gpu07", 4, 690.0).nodes[0])
        assert findings == []  # 1.4 % below the new baseline (700)
        store.record(run_of("gpu07", 1, 795.0), "an older report imported late")
        assert store.query("SELECT node_run_id FROM baselines") == [{"node_run_id": later}]  # set by hand: kept


def test_the_earliest_passing_run_is_the_baseline_whatever_the_import_order(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        for day in (5, 2, 9):
            store.record(run_of("gpu07", day, 790.0), str(day))
        assert store.query("SELECT nr.started FROM baselines b JOIN node_runs nr ON nr.id = b.node_run_id") == [
            {"started": "2026-11-02T03:00:00Z"}]


def test_a_node_that_claims_another_nodes_gpu_does_not_set_its_baseline(tmp_path: Path) -> None:
    """gpu66 lists gpu07's GPU as its own while gpu07 still reports it, with a faster figure: that GPU's baseline
    would have been gpu66's (the latest baseline of any node it was in) and gpu07's steady 700 a 22 % drop. A
    UUID two nodes report in overlapping time keeps its past per node (gpu_claims.py)."""
    with store_with(tmp_path, [700.0, 701.0, 699.0, 700.0, 700.0]) as store:
        for day in (3, 4):
            store.record(run_of("gpu66", day, 900.0), f"liar-{day}")
        findings, based = compare(store, run_of("gpu07", 20, 700.0).nodes[0], started="2026-11-20T03:00:00Z")
    assert based and drops(findings) == []
