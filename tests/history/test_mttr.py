"""`gpucheck history mttr`: the transitions a node's kept reports carry (facts.watch: detected; facts.slurm: what its
run did in Slurm) recorded by `gpucheck history import`, and per node the time from detection to drain and from drain
to return."""

from __future__ import annotations

import json
from pathlib import Path

from test_store import UUID, node_report

from gpucheck.history.records import from_document
from support import run_gpucheck


def watch_report(host: str, started: str, drained_at: str, action: str = "drain") -> dict:
    """What gpucheck watch keeps for an Xid it judged and drained on (its facts as watcher.py writes them)."""
    doc = node_report(host, started, status_of={"gpu.xid": "fail"})
    next(r for r in doc["results"] if r["check"] == "gpu.xid")["reason"] = "fatal: Xid 79 on 0000:19:00"  # its GPU0
    doc["facts"]["watch"] = {"moved": {"gpu.xid": ["Xid 79 on 0000:19:00"]}, "source": "kernel_log"}
    doc["facts"]["slurm"] = {"path": "watch", "action": action, "holder": "nobody", "at": drained_at,
                             "reason": "gpucheck: watch: gpu.xid fatal: Xid 79 on 0000:19:00"}
    return doc


def returned_report(host: str, started: str, at: str) -> dict:
    """A scheduled check that passed on the node and resumed the watcher's drain (its proof)."""
    doc = node_report(host, started)
    doc["facts"]["scheduled"] = {"kind": "daily", "job": "41"}
    doc["facts"]["slurm"] = {"path": "scheduled", "action": "resume", "holder": "watch", "at": at,
                             "reason": "gpucheck: watch: gpu.xid fatal: Xid 79 on 0000:19:00"}
    return doc


def test_a_report_tells_its_transitions():
    run = from_document(watch_report("gpu07", "2026-11-20T03:00:00+00:00", "2026-11-20T03:00:01+00:00"))
    assert run.nodes[0].transitions == [  # the GPU its failure names, by the kernel's spelling of its bus
        ("2026-11-20T03:00:00Z", "detected", "watch", "gpu.xid: Xid 79 on 0000:19:00", UUID),
        ("2026-11-20T03:00:01Z", "drained", "watch", "gpucheck: watch: gpu.xid fatal: Xid 79 on 0000:19:00", UUID)]
    held = from_document(watch_report("gpu07", "2026-11-20T03:00:00Z", "2026-11-20T03:00:01Z", action="held"))
    assert [t[1] for t in held.nodes[0].transitions] == ["detected", "held"]
    assert from_document(node_report("gpu07")).nodes[0].transitions == []  # a run that told Slurm nothing


def test_a_taint_on_kubernetes_is_a_drain_and_its_removal_a_return():
    """facts.kubernetes (gpucheck node --kubernetes) has facts.slurm's shape: the same transitions, the same MTTR."""
    doc = node_report("gpu07", "2026-11-20T03:00:00Z", status_of={"gpu.ecc_errors": "fail"})
    doc["facts"]["kubernetes"] = {"path": "health-check", "action": "drain", "holder": "nobody",
                                  "at": "2026-11-20T03:00:05+00:00", "reason": "gpu.ecc_errors GPU0: 2 uncorrected"}
    assert [t[:3] for t in from_document(doc).nodes[0].transitions] == [
        ("2026-11-20T03:00:05Z", "drained", "health-check")]
    doc["facts"]["kubernetes"].update(action="resume", holder="passive")
    assert [t[1] for t in from_document(doc).nodes[0].transitions] == ["returned"]


def test_mttr_pairs_each_drain_with_its_detection_and_its_return(tmp_path: Path):
    folder = tmp_path / "kept"
    folder.mkdir()
    docs = {"a1": watch_report("gpu07", "2026-11-20T03:00:00Z", "2026-11-20T03:00:02Z"),
            "a2": returned_report("gpu07", "2026-11-20T05:00:00Z", "2026-11-20T05:00:02Z"),
            "b1": watch_report("gpu07", "2026-11-22T03:00:00Z", "2026-11-22T03:00:04Z"),
            "b2": returned_report("gpu07", "2026-11-22T04:00:00Z", "2026-11-22T04:00:04Z"),
            "c1": watch_report("gpu08", "2026-11-23T03:00:00Z", "2026-11-23T03:00:01Z")}
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    store = tmp_path / "history.sqlite"
    assert run_gpucheck(["history", "import", "--store", str(store), str(folder)]).returncode == 0
    done = run_gpucheck(["history", "mttr", "--store", str(store), "--since", "2026-11-01", "--format", "json"])
    assert done.returncode == 0, done.stderr
    rows = {r["node"]: r for r in json.loads(done.stdout)}
    assert rows["gpu07"]["drains"] == rows["gpu07"]["returned"] == 2
    assert rows["gpu07"]["detect_to_drain_s"] == 3.0  # the median of 2 s and 4 s
    assert rows["gpu07"]["drain_to_return_s"] == (7200.0 + 3600.0) / 2
    assert rows["gpu08"]["out_since"] == "2026-11-23T03:00:01Z" and rows["gpu08"]["returned"] == 0
    text = run_gpucheck(["history", "mttr", "--store", str(store), "--since", "2026-11-01"]).stdout
    assert "drains by gpucheck since 2026-11-01T00:00:00Z: 3 drains of 2 nodes" in text
    assert "gpu07" in text and "1.5 h" in text and "3.0 s" in text and "since 2026-11-23T03:00:01Z" in text
    by_gpu = run_gpucheck(["history", "mttr", "--store", str(store), "--since", "2026-11-01", "--by", "gpu",
                           "--format", "json"])
    rows = {r["gpu"]: r for r in json.loads(by_gpu.stdout)}
    assert rows[UUID]["drains"] == 3 and rows[UUID]["node"] == "gpu08"  # one GPU, moved from gpu07: all its drains
