"""What the report shows of a node's past (history/trends.py): its key figures over its last runs and this one,
and the last run of active checks it passed."""

from __future__ import annotations

from pathlib import Path

from test_store import node_report

from gpucheck.history.records import from_document
from gpucheck.history.store import Store
from gpucheck.history.trends import TREND_FIGURES_MAX, TREND_RUNS, last_active_pass, node_trends


def record(store: Store, day: int, bf16: float, status_of: dict[str, str] | None = None) -> None:
    doc = node_report("gpu07", f"2026-11-{day:02d}T03:00:00Z", bf16=bf16, status_of=status_of)
    doc["exit_code"] = 1 if "warn" in (status_of or {}).values() else doc["exit_code"]
    store.record(from_document(doc), f"day {day}")


def test_the_last_runs_and_this_one_make_the_trend_gemm_first(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        for day in range(1, 12):
            record(store, day, 700.0 + day)
        now = from_document(node_report("gpu07", "2026-11-20T03:00:00Z", bf16=650.0)).nodes[0]
        charts = node_trends(store, now, "2026-11-20T03:00:00Z")
    assert len(charts) == TREND_FIGURES_MAX and charts[0]["check"] == "gpu.gemm"
    bf16 = next(c for c in charts if c["figure"] == "bf16_TFLOPS")
    assert [p["value"] for p in bf16["points"]] == [705.0, 706.0, 707.0, 708.0, 709.0, 710.0, 711.0, 650.0]
    assert len(bf16["points"]) == TREND_RUNS and bf16["points"][-1]["started"] == "2026-11-20T03:00:00Z"
    assert all(c["check"] in ("gpu.gemm", "gpu.memory_bandwidth") for c in charts)  # no window's min or max


def test_the_last_active_pass_is_the_newest_passing_run_with_gpu_figures(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        assert last_active_pass(store, "gpu07") is None
        record(store, 1, 700.0)
        record(store, 2, 700.0, status_of={"gpu.gemm": "fail"})
        assert last_active_pass(store, "gpu07") == "2026-11-01T03:00:00Z"
        record(store, 3, 700.0, status_of={"gpu.temperature": "warn"})
        assert last_active_pass(store, "gpu07") == "2026-11-03T03:00:00Z"
