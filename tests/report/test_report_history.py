"""report.html's "Each node against its past" (report/cluster/html_history.py): when each node last passed a run
of active checks, in days, coloured once it is a week old or never happened, and a small chart per key figure
with its unit, its range and every point's date and value."""

from __future__ import annotations

import re

from gpucheck.report.cluster.html_history import days_ago, history_section
from gpucheck.report.values import time_of

STARTED = "2026-11-27T03:00:00+00:00"


def trend(values: list[float]) -> dict:
    return {"check": "gpu.gemm", "figure": "bf16_TFLOPS", "unit": "TFLOPS",
            "points": [{"started": f"2026-11-{20 + i:02d}T03:00:00Z", "value": v} for i, v in enumerate(values)]}


def doc(history: dict) -> dict:
    return {"started": STARTED, "history": history}


def test_days_ago_reads_as_a_person_says_it():
    now = time_of(STARTED)
    assert [days_ago(t, now) for t in ("2026-11-27T01:00:00Z", "2026-11-26T02:00:00Z", "2026-11-15T03:00:00Z",
                                       None, "not a time")] == ["today", "1 day ago", "12 days ago", "never",
                                                                  "never"]


def test_each_node_has_its_last_active_pass_and_its_charts():
    html = history_section(doc({"node01": {"last_active_pass": "2026-11-26T03:00:00Z",
                                           "trends": [trend([790.0, 788.0, 711.0])]},
                                "node02": {"last_active_pass": "2026-11-10T03:00:00Z", "trends": []},
                                "node03": {"last_active_pass": None, "trends": [trend([790.0])]}}))
    rows = re.findall(r"<tr><td>(node\d\d)</td><td([^>]*)>last active check passed: <b>([^<]+)</b>", html)
    assert rows == [("node01", "", "1 day ago"), ("node02", ' style="color:#9a6700"', "17 days ago"),
                    ("node03", ' style="color:#9a6700"', "never")]
    assert html.count("<svg") == 1  # node03's one point is no trend
    assert '<span class="trend-name">gemm bf16</span>' in html
    assert "now 711 TFLOP/s · range 711–790 TFLOP/s" in html
    assert '<circle cx="146.0" cy="30.0" r="3" fill="#1f2328"><title>2026-11-22: 711 TFLOP/s</title>' in html
    assert html.count("no figures over several runs yet") == 2


def test_no_history_no_section():
    assert history_section({"started": STARTED}) == ""
    assert history_section(doc({})) == ""
