"""results.py: parsing the workloads' lines out of launcher output, judging runs, scaling efficiency.

Pure functions on text and dicts; the real launcher outputs are parsed in test_horovod.py,
test_torch.py and test_tf_ps.py.
"""

from __future__ import annotations

import json

import pytest

from gpucheck.references import REFERENCES
from gpucheck.workloads.results import (
    MARK,
    judge_allreduce,
    judge_ps,
    judge_smoke,
    parse_results,
    scaling,
)


def rank(i: int, size: int = 4, sha: str = "a" * 64, host: str | None = None, **kw) -> dict:
    row = {"ok": True, "workload": "smoke_horovod_keras", "rank": i, "size": size, "hostname": host or f"node{i}",
           "loss_first": 0.8, "loss_last": 0.1, "loss_fell": True, "weights_sha256": sha, "samples_per_s": 100.0}
    row.update(kw)
    return row


def line(obj: dict) -> str:
    return MARK + json.dumps(obj)


# ------------------------------------------------------------------------------------------------
# parse_results
# ------------------------------------------------------------------------------------------------

def test_parse_plain_lines_and_ignores_other_output():
    text = "\n".join(["some log", line(rank(0)), "Epoch 1/2", line(rank(1)), ""])
    got = parse_results(text)
    assert [r["rank"] for r in got] == [0, 1]
    assert "launcher_rank" not in got[0]


@pytest.mark.parametrize("prefix, expect", [
    ("[1,3]<stdout>:", 3),   # mpirun --tag-output
    ("[3]<stdout>:", 3),     # horovodrun
    ("[default3]:", 3),      # torchrun --tee 3
    ("[1,3]<stdout>: ", 3),
])
def test_parse_tolerates_launcher_prefixes(prefix, expect):
    obj = {"ok": False, "error": "boom"}  # no rank in the JSON: the prefix supplies one
    got = parse_results(f"{prefix}{line(obj)}\n")
    assert got == [{"ok": False, "error": "boom", "launcher_rank": expect}]


def test_parse_interleaved_and_glued_lines():
    a, b, c = line(rank(0)), line(rank(1)), line(rank(2))
    # a partial log line of another rank glued in front, CRLF, two results on one line, a truncated one
    text = f"[1,1]<stderr>:WARNING half a li[1,0]<stdout>:{a}\r\n{b}{c}\n{MARK}{{\"rank\": 3, \"ok\": tr\n"
    got = parse_results(text)
    assert [r["rank"] for r in got] == [0, 1, 2]
    assert got[0]["launcher_rank"] == 0


def test_parse_skips_non_objects_and_bad_json():
    assert parse_results(f"{MARK}[1, 2]\n{MARK}not json\n{MARK}42\n") == []
    assert parse_results("") == []


# ------------------------------------------------------------------------------------------------
# judge_smoke
# ------------------------------------------------------------------------------------------------

def test_judge_smoke_passes_a_healthy_run():
    verdict = judge_smoke([rank(i) for i in range(4)], 4)
    assert verdict["passed"], verdict["reasons"]
    assert verdict["samples_per_s_total"] == 400.0
    assert verdict["weights_majority"] == "a" * 64
    assert verdict["hosts"] == ["node0", "node1", "node2", "node3"]


def test_judge_smoke_names_the_rank_and_host_whose_weights_differ():
    rows = [rank(i) for i in range(4)]
    rows[2]["weights_sha256"] = "b" * 64
    verdict = judge_smoke(rows, 4)
    assert not verdict["passed"]
    assert verdict["weights_odd"] == [{"rank": 2, "host": "node2", "weights_sha256": "b" * 64}]
    assert any("rank 2 on node2" in r and "bbbbbbbbbbbb" in r for r in verdict["reasons"]), verdict["reasons"]


def test_judge_smoke_two_ranks_two_values_names_both():
    verdict = judge_smoke([rank(0, 2), rank(1, 2, sha="c" * 64)], 2)
    assert not verdict["passed"]
    assert verdict["weights_majority"] is None
    (reason,) = verdict["reasons"]
    assert "no value has a majority" in reason and "rank 0 on node0" in reason and "rank 1 on node1" in reason


def test_judge_smoke_missing_rank_is_a_crash_or_hang_suspicion():
    rows = [rank(i) for i in (0, 1, 3)]
    verdict = judge_smoke(rows, 4)
    assert not verdict["passed"]
    assert verdict["missing_ranks"] == [2]
    assert any("reported nothing: 2" in r and "hung" in r for r in verdict["reasons"])


def test_judge_smoke_loss_not_falling_failed_rank_duplicates_and_sizes():
    rows = [rank(0), rank(1, loss_last=0.9, loss_fell=False), rank(2, ok=False, error="MPI_ERR_TRUNCATE"),
            rank(3, size=8), rank(3)]
    verdict = judge_smoke(rows, 4)
    text = "\n".join(verdict["reasons"])
    assert "loss did not fall on rank 1 on node1: 0.8 -> 0.9" in text
    assert "rank 2 on node2 failed: MPI_ERR_TRUNCATE" in text
    assert "rank 3 reported twice" in text
    assert "world size of [4, 8]" in text
    assert verdict["failed_ranks"] == [{"rank": 2, "host": "node2", "error": "MPI_ERR_TRUNCATE"}]


def test_judge_smoke_no_results_at_all_and_no_checksum():
    verdict = judge_smoke([], 2)
    assert not verdict["passed"] and verdict["missing_ranks"] == [0, 1]
    assert verdict["samples_per_s_total"] is None
    verdict = judge_smoke([rank(0, 2), rank(1, 2, weights_sha256=None)], 2)
    assert any("no weights checksum" in r for r in verdict["reasons"])


def test_judge_smoke_filters_by_workload():
    rows = [rank(0, 1), {"workload": "allreduce_bench", "rank": 0, "ok": True}]
    assert judge_smoke(rows, 1, workload="smoke_horovod_keras")["passed"]


# ------------------------------------------------------------------------------------------------
# judge_ps, judge_allreduce
# ------------------------------------------------------------------------------------------------

def ps_rows(match=(True, True)):
    chief = {"workload": "smoke_tf_ps", "role": "chief", "task_index": 0, "ok": all(match), "loss_fell": True,
             "loss_first": 0.8, "loss_last": 0.1, "weights_sha256": "d" * 64, "steps_per_s": 50.0,
             "samples_per_s": 1600.0,
             "workers": [{"index": i, "match": m, "weights_sha256": "d" * 64 if m else "e" * 64}
                         for i, m in enumerate(match)]}
    tasks = [{"workload": "smoke_tf_ps", "role": role, "task_index": i, "ok": True}
             for role, i in (("worker", 0), ("worker", 1), ("ps", 0))]
    return [chief, *tasks]


def test_judge_ps():
    expected = {"chief": 1, "worker": 2, "ps": 1}
    assert judge_ps(ps_rows(), expected)["passed"]
    verdict = judge_ps(ps_rows(match=(True, False)), expected)
    assert not verdict["passed"] and verdict["workers_disagree"] == [1]
    verdict = judge_ps(ps_rows()[:-1], expected)
    assert any("ps task(s) 0 reported nothing" in r for r in verdict["reasons"])


def test_judge_allreduce():
    rows = [{"workload": "allreduce_bench", "rank": i, "ok": True, "wrong": 0, "busbw_GBps": 10.0 + i,
             "algbw_GBps": 5.0, "bytes": 1 << 26, "hostname": f"n{i}"} for i in range(3)]
    assert judge_allreduce(rows, 3)["busbw_GBps"] == 11.0
    assert judge_allreduce(rows, 3, busbw_min_GBps=10)["passed"]
    assert not judge_allreduce(rows, 3, busbw_min_GBps=20)["passed"]
    rows[1].update(ok=False, wrong=5, max_abs_err=1.0)
    verdict = judge_allreduce(rows, 4)
    assert "rank 1 on n1: 5 wrong element(s)" in "\n".join(verdict["reasons"])
    assert verdict["missing_ranks"] == [3]


# ------------------------------------------------------------------------------------------------
# scaling
# ------------------------------------------------------------------------------------------------

def test_scaling_efficiency_from_results_verdicts_and_numbers():
    single = [rank(0, 1, samples_per_s=1000.0)]
    multi = [rank(i, 4, samples_per_s=900.0) for i in range(4)]
    got = scaling(single, multi)
    assert got["ranks"] == 4 and got["speedup"] == 3.6 and got["efficiency"] == 0.9
    assert scaling(judge_smoke(single, 1), judge_smoke(multi, 4))["efficiency"] == 0.9
    assert scaling(1000.0, 3600.0, ranks=4)["efficiency"] == 0.9
    assert scaling(0.0, multi)["efficiency"] is None
    assert scaling(None, 3600.0, ranks=4)["reason"] == "no throughput measured at 1 rank"
    assert scaling(1000.0, None)["efficiency"] is None


def test_scaling_carries_cited_references():
    """The published figures (DESIGN.md, typed here from the publications, not from references.py) are the ones
    REFERENCES holds, each cited, carried by scaling() and shown by the cluster report beside our points."""
    import html
    import re

    from gpucheck.cluster import handoff
    from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
    from gpucheck.cluster.inventory import Host, Inventory
    from gpucheck.model import Status
    from gpucheck.report import cluster as report

    # word in the name -> (GPUs, speed-up or None, efficiency or None, what the report must print, its publication)
    published = {
        "TensorFlow 0.8": (16, 15.0, None, ["15x", "16 GPUs"],
                           "research.google/blog/announcing-tensorflow-08-now-with-distributed-computing-support"),
        "PowerAI DDL": (256, None, 0.95, ["95%", "256 GPUs"], "arXiv:1708.02188"),
        "Horovod": (512, None, 0.90, ["90%", "512 GPUs"], "arXiv:1802.05799"),
    }
    assert len(REFERENCES) == len(published), [r["name"] for r in REFERENCES]
    by_word = {}
    for word, (gpus, speedup, efficiency, _, cited) in published.items():
        [ref] = [r for r in REFERENCES if word in r["name"]]
        by_word[word] = ref
        assert ref["gpus"] == gpus, ref
        assert ref["speedup"] == pytest.approx(speedup if speedup is not None else efficiency * gpus), ref
        assert ref["efficiency"] == pytest.approx(efficiency if efficiency is not None else speedup / gpus), ref
        assert ref["efficiency"] == pytest.approx(ref["speedup"] / ref["gpus"], abs=0.005), ref
        assert cited in ref["source"], ref["source"]
        assert re.search(r"https?://\S+|arXiv:\d{4}\.\d{4,5}", ref["source"]), ref["source"]
    carried = scaling(1000.0, 1900.0, ranks=2)["references"]
    assert [(r["name"], r["gpus"], r["efficiency"]) for r in carried] == \
        [(r["name"], r["gpus"], r["efficiency"]) for r in REFERENCES]

    host = Host("node01", "127.0.0.1", 2201, "root", None, (), True)
    ctx = ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, [host]))
    ctx.nodes["node01"] = NodeOutcome("node01", Status.PASS, "ok", "report", 1.0, 0, None)
    ctx.scaling = [{"label": "horovod-tf", "gpus": g, "throughput": 100.0 * g * e, "efficiency": e, "unit": "img/s"}
                   for g, e in ((1, 1.0), (2, 0.97))]
    doc = handoff.document(ctx, "2026-01-01T00:00:00+00:00", 1.0, [], True)
    for kind, text in (("markdown", report.render_markdown(doc)), ("html", html.unescape(report.render_html(doc)))):
        for word, (_, _, _, figures, _) in published.items():
            name = by_word[word]["name"]
            found = re.search(re.escape(name) + r"([^\n<]*)", text)
            assert found, f"{kind} report does not name {name!r}"
            others = [by_word[w]["name"] for w in published if w != word]
            shown = re.split("|".join(map(re.escape, others)), found[1])[0]  # up to the next reference
            for figure in figures:
                assert figure in shown, f"{kind} report shows {name!r} as {shown!r}: {figure} missing"
