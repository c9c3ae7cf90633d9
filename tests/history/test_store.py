"""The history store (history/store.py, records.py) on real reports: the H200's measured full run and the
H100's, and cluster reports made from them. What a run keeps, that it is kept once, that a store is refused
when it is not ours or is newer, and that several writers at once and a writer killed half way lose nothing and
leave nothing half-written."""

from __future__ import annotations

import copy
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpucheck.history import queries
from gpucheck.history.recording import record_run
from gpucheck.history.records import CLUSTER, NODE_GPU, NotAReport, from_document, unit_of
from gpucheck.history.store import SCHEMA_VERSION, HistoryError, Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "measured"
H200_FULL = json.loads((FIXTURES / "h200-141gb-driver580" / "gpucheck-node-full-burn20-generic.json").read_text())
H100 = json.loads((FIXTURES / "h100-sxm-80gb-driver580" / "gpucheck-node-json-generic-profile-torch-stack.json")
                  .read_text())
ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-2a5b0c1e-7f3d-4e0a-9b61-0c8d2e4f6a10"  # synthetic: the measured report predates facts.gpus


def node_report(host: str = "gpu07", started: str = "2026-11-20T03:00:00+00:00", bf16: float | None = None,
                status_of: dict[str, str] | None = None) -> dict:
    doc = copy.deepcopy(H200_FULL)
    doc.update(host=host, started=started)
    doc["facts"]["gpus"] = [{"index": 0, "uuid": UUID, "pci_bus_id": "00000000:19:00.0", "name": "NVIDIA H200"}]
    for result in doc["results"]:
        if bf16 is not None and result["check"] == "gpu.gemm":
            result["measured"]["GPU0"]["bf16_TFLOPS"] = bf16
        if result["check"] in (status_of or {}):
            result.update(status=status_of[result["check"]], reason="planted")
    if status_of:
        doc["exit_code"] = 2
    return doc


def cluster_report(reports: dict[str, dict], started: str = "2026-11-21T03:00:00+00:00") -> dict:
    nodes = {name: {"host": name, "status": "pass" if r["exit_code"] == 0 else "fail", "reason": "", "report": r}
             for name, r in reports.items()}
    nodes["gpu99"] = {"host": "gpu99", "status": "error", "reason": "unreachable: connection refused",
                      "kind": "unreachable"}
    return {"kind": "cluster", "started": started, "complete": True, "exit_code": 2, "gpucheck_version": "0.1.0",
            "nodes": nodes, "cluster": [
                {"check": "cluster.allreduce", "status": "pass", "reason": "",
                 "measured": {"busbw_GBps": 21.3, "nodes": 2}},
                {"check": "cluster.consistency.driver_version", "status": "fail", "reason": "driver differs"}]}


def test_a_node_report_keeps_its_verdicts_figures_units_versions_and_gpu_identity(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        run_id, new = store.record(from_document(node_report()), "before.json")
        assert new and store.record(from_document(node_report()), "again.json") == (run_id, False)
        rows = {(r["check"], r["figure"], r["gpu"]): r for r in queries.figure_rows(store, queries.Selection())}
        bf16 = rows[("gpu.gemm", "bf16_TFLOPS", 0)]
        assert (bf16["value"], bf16["unit"], bf16["uuid"], bf16["node"], bf16["started"]) == (
            785.9, "TFLOPS", UUID, "gpu07", "2026-11-20T03:00:00Z")
        assert rows[("gpu.burn", "temperature_C_max", 0)]["unit"] == "C"
        assert rows[("gpu.count", "", NODE_GPU)]["value"] == 1.0
        assert ("gpu.sdc", "checksum", 0) not in rows  # a checksum is no figure
        assert rows[("host.memory", "ram_GiB", NODE_GPU)]["value"] == 125.9  # a skip's measured values are kept
        versions = dict(store.db.execute("SELECT what, version FROM version_ids").fetchall())
        assert versions["driver"] == "580.159.04" and versions["nccl (system)"] == "2.28.3"
        verdicts = dict(store.db.execute("SELECT c.name, r.status FROM results r JOIN checks c ON c.id = r.check_id"))
        assert verdicts["gpu.gemm"] == "pass" and verdicts["gpu.sdc"] == "skip" and len(verdicts) == len(
            H200_FULL["results"])
        assert store.db.execute("SELECT report FROM node_runs").fetchone()[0] is None  # a pass keeps no copy


def test_a_failing_node_keeps_its_report_and_reasons(tmp_path: Path) -> None:
    import zlib

    with Store(tmp_path / "h.sqlite") as store:
        store.record(from_document(node_report(status_of={"gpu.gemm": "fail"})), "x.json")
        status, blob = store.db.execute("SELECT status, report FROM node_runs").fetchone()
        assert status == "fail" and json.loads(zlib.decompress(blob))["host"] == "gpu07"
        reason = store.db.execute("SELECT reason FROM results r JOIN checks c ON c.id = r.check_id "
                                  "WHERE c.name = 'gpu.gemm'").fetchone()[0]
        assert reason == "planted"


def test_a_cluster_report_keeps_each_node_the_unreachable_one_and_the_clusters_own_checks(tmp_path: Path) -> None:
    doc = cluster_report({"gpu07": node_report(), "gpu08": node_report("gpu08", status_of={"gpu.memtest": "fail"})})
    with Store(tmp_path / "h.sqlite") as store:
        store.record(from_document(doc), "report.json")
        parts = {r["node"]: r for r in store.query("SELECT node, status, reason, started FROM node_runs")}
        assert {n: p["status"] for n, p in parts.items()} == {"gpu07": "pass", "gpu08": "fail", "gpu99": "error",
                                                               CLUSTER: "fail"}
        assert parts["gpu99"]["reason"] == "unreachable: connection refused"
        assert {p["started"] for p in parts.values()} == {"2026-11-21T03:00:00Z"}
        busbw = queries.figure_rows(store, queries.Selection(node=CLUSTER, check="cluster.allreduce"))
        assert [(r["figure"], r["unit"], r["value"]) for r in busbw] == [("busbw_GBps", "GBps", 21.3),
                                                                         ("nodes", "", 2.0)]
        [run] = queries.runs(store)
        assert (run["kind"], run["nodes"], run["pass"], run["fail"], run["other"]) == ("cluster", 3, 1, 1, 1)


def test_one_gpu_is_followed_by_its_uuid_across_nodes_and_runs(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        for day, (host, bf16) in enumerate([("gpu07", 790.0), ("gpu07", 781.0), ("gpu12", 712.0)], 1):
            store.record(from_document(node_report(host, f"2026-11-0{day}T03:00:00Z", bf16)), f"{day}.json")
        selection = queries.Selection(uuid=UUID, check="gpu.gemm", figure="bf16")
        runs = queries.recent_node_runs(store, selection, 10)
        assert [r["node"] for r in runs] == ["gpu07", "gpu07", "gpu12"]
        [(key, values)] = queries.series(store, selection, runs).items()
        assert key == ("gpu.gemm", "bf16_TFLOPS", "TFLOPS", 0) and list(values.values()) == [790.0, 781.0, 712.0]
        assert [r["value"] for r in queries.figure_rows(store, queries.Selection(
            node="gpu07", check="gpu.gemm", figure="bf16", since="2026-11-02T00:00:00Z"))] == [781.0]


def test_deleting_old_runs_as_docs_history_md_says_takes_everything_of_theirs(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with Store(path) as store:
        store.record(from_document(node_report("gpu07", "2025-11-01T03:00:00Z", status_of={"gpu.gemm": "fail"})), "a")
        store.record(from_document(node_report("gpu07", "2026-11-01T03:00:00Z")), "b")
        kept = store.db.execute("SELECT count(*) FROM figures").fetchone()[0] // 2
    db = sqlite3.connect(path, isolation_level=None)  # as the sqlite3 shell would
    db.executescript("PRAGMA foreign_keys=ON; DELETE FROM runs WHERE started < '2025-12-01'; VACUUM")
    db.close()
    with Store(path) as store:
        assert [r["started"] for r in store.query("SELECT started FROM node_runs")] == ["2026-11-01T03:00:00Z"]
        for table, count in (("figures", kept), ("results", len(H200_FULL["results"])), ("gpus", 1)):
            assert store.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == count, table


@pytest.mark.parametrize("doc, why", [
    ({"results": []}, "not a gpucheck report"),
    ({"results": [], "started": "yesterday", "host": "n"}, "not an ISO 8601 time"),
    ({"results": [], "started": "2026-11-20T03:00:00Z"}, "without its host name"),
    ([1, 2], "not a gpucheck report"),
])
def test_what_is_not_a_report_is_refused_saying_why(doc, why) -> None:
    with pytest.raises(NotAReport, match=why):
        from_document(doc)


def test_units_come_from_the_figure_names() -> None:
    assert [unit_of(n) for n in ("bf16_TFLOPS", "TFLOPS_median", "temperature_C_max", "copy_GBps", "images_per_s",
                                 "volatile_uncorrected", "power_W_max")] == [
        "TFLOPS", "TFLOPS", "C", "GBps", "per_s", "", "W"]


def test_a_file_that_is_not_ours_or_is_newer_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(HistoryError, match="not a gpucheck history store"):
        Store(other)
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(HistoryError, match="not a gpucheck history store"):
        Store(garbage)
    newer = tmp_path / "newer.sqlite"
    Store(newer).close()
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(HistoryError, match=f"newer gpucheck \\(schema {SCHEMA_VERSION + 1}"):
        Store(newer)


def test_a_store_of_an_older_schema_is_migrated_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucheck.history import store as store_module

    path = tmp_path / "h.sqlite"
    with Store(path) as store:
        store.record(from_document(node_report()), "old.json")
    later = (*store_module.MIGRATIONS, ("ALTER TABLE runs ADD COLUMN note TEXT",))
    monkeypatch.setattr(store_module, "MIGRATIONS", later)
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", len(later))
    with Store(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert store.query("SELECT id, note FROM runs") == [{"id": 1, "note": None}]


WRITER = textwrap.dedent("""
    import copy, json, sys
    sys.path.insert(0, sys.argv[1])
    from gpucheck.history.records import from_document
    from gpucheck.history.store import Store
    doc, path, name, count = json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4], int(sys.argv[5])
    with Store(__import__("pathlib").Path(path)) as store:
        for i in range(count):
            one = copy.deepcopy(doc)
            one.update(host=name, started=f"2026-11-20T03:{i // 60:02d}:{i % 60:02d}Z")
            store.record(from_document(one), f"{name}-{i}")
""")


def test_several_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(node_report()))
    path = tmp_path / "h.sqlite"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(ROOT / "agent"), str(report), str(path),
                                 f"gpu{w:02d}", "15"]) for w in range(4)]
    assert [w.wait(timeout=300) for w in writers] == [0] * 4
    with Store(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        per_node = dict(store.db.execute("SELECT node, count(*) FROM node_runs GROUP BY node"))
        assert per_node == {f"gpu{w:02d}": 15 for w in range(4)}
        figures = store.db.execute("SELECT count(*) FROM figures").fetchone()[0]
        assert figures == 60 * len(queries.figure_rows(store, queries.Selection(node="gpu00"))) // 15


KILLED = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from gpucheck.history.records import from_document
    from gpucheck.history.store import Store
    run = from_document(json.load(open(sys.argv[2])))
    part = run.nodes[0]
    part.figures = [("gpu.big", f"f{i}", "", i % 8, float(i)) for i in range(500_000)]  # long enough to be killed

    class Telling(Store):
        told = False
        def intern(self, *args):
            if not self.told:
                self.told = True
                print("inside", flush=True)
            return super().intern(*args)

    with Telling(__import__("pathlib").Path(sys.argv[3])) as store:
        store.record(run, "killed")
    print("finished", flush=True)
""")


def test_a_writer_killed_half_way_leaves_no_partial_run_and_the_store_whole(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(node_report("gpu08")))
    path = tmp_path / "h.sqlite"
    with Store(path) as store:
        store.record(from_document(node_report("gpu07")), "kept")
    writer = subprocess.Popen([sys.executable, "-c", KILLED, str(ROOT / "agent"), str(report), str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "inside"
    time.sleep(0.5)
    # a reader while it writes: the committed runs only, or it waits (here a short wait, then it gives up)
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=0.2) as reader:
        try:
            assert [n for (n,) in reader.execute("SELECT node FROM node_runs")] == ["gpu07"]
        except sqlite3.OperationalError as exc:
            assert "locked" in str(exc)
    writer.send_signal(signal.SIGKILL)
    assert writer.wait(timeout=60) == -signal.SIGKILL and writer.stdout.read() == ""
    with Store(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [r["node"] for r in store.query("SELECT node FROM node_runs")] == ["gpu07"]
        assert store.db.execute("SELECT count(*) FROM figures f JOIN names n ON n.id = f.name_id "
                                "WHERE n.check_name = 'gpu.big'").fetchone()[0] == 0
        assert store.record(from_document(node_report("gpu08")), "after")[1]  # the store takes the next run
        assert {r["node"] for r in store.query("SELECT node FROM node_runs")} == {"gpu07", "gpu08"}


def test_recording_a_cluster_run_never_raises_for_what_a_node_sent(tmp_path: Path) -> None:
    """A cluster run's recording says in one line why a run was not recorded (an exit code no exit status) and
    records the rest as it can (a GPU index SQLite cannot hold is left out): it never turns the run's verdict into
    an internal error (cluster/cli.py prints the line and keeps its exit code)."""
    hostile = node_report("gpu07", "2026-11-01T03:00:00+00:00", 790.0)
    hostile["facts"]["gpus"][0]["index"] = 2 ** 70
    doc = cluster_report({"gpu07": hostile})
    doc["exit_code"] = 2 ** 64
    recorded, said = record_run(doc, tmp_path / "report.json", tmp_path / "h.sqlite")
    assert (recorded, said) == (False, "history: this run was not recorded: its exit_code 18446744073709551616 is "
                                       "not an exit status (0-255)")
    doc["exit_code"] = 2
    recorded, said = record_run(doc, tmp_path / "report.json", tmp_path / "h.sqlite")
    assert recorded and said.startswith("history: run 1 recorded in "), said
