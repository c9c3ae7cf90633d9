"""`gpucheck history` as a user runs it (a separate process): import a folder of reports (twice: nothing new the
second time), list the runs, show a node's and a GPU's figures over time, export them, and one line with exit 3
for every kind of bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_store import UUID, cluster_report, node_report

from support import run_gpucheck


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """A folder as users have them: node reports at three times (GPU0 slowing), a cluster report directory with
    its nodes/ (whose node files must not be recorded twice), and a JSON file that is no report."""
    folder = tmp_path / "reports"
    for day, bf16 in ((1, 790.0), (2, 781.0), (3, 702.5)):
        path = folder / f"node-{day}" / "gpu07.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(node_report("gpu07", f"2026-11-0{day}T03:00:00Z", bf16)))
    cluster = folder / "gpucheck-report-20261104T030000Z"
    (cluster / "nodes").mkdir(parents=True)
    doc = cluster_report({"gpu07": node_report("gpu07", "2026-11-04T03:00:00Z", 700.0)}, "2026-11-04T03:00:00Z")
    (cluster / "report.json").write_text(json.dumps(doc))
    (cluster / "nodes" / "gpu07.json").write_text(json.dumps(doc["nodes"]["gpu07"]))
    (folder / "summary.json").write_text(json.dumps({"nodes": 1}))
    return folder


def history(tmp_path: Path, *args: str):
    return run_gpucheck(["history", *args, "--store", str(tmp_path / "h.sqlite")])


def test_import_records_each_report_once_and_skips_what_is_not_one(tmp_path: Path, reports: Path) -> None:
    first = history(tmp_path, "import", str(reports))
    assert first.returncode == 0, first.stderr
    assert "history: 4 run(s) recorded, 0 recorded before; 1 other JSON file(s) skipped" in first.stdout
    assert "gpucheck-report-20261104T030000Z/report.json: run " in first.stdout and "/nodes/" not in first.stdout
    again = history(tmp_path, "import", str(reports))
    assert again.returncode == 0 and "history: 0 run(s) recorded, 4 recorded before" in again.stdout
    runs = history(tmp_path, "runs", "--node", "gpu07")
    lines = runs.stdout.splitlines()
    assert lines[0] == f"runs in {tmp_path / 'h.sqlite'}, newest first", runs.stdout  # reports without a cluster
    assert lines[1].split()[:3] == ["run", "started", "(UTC)"] and len(lines) == 6, runs.stdout
    assert lines[2].split()[1:8] == ["2026-11-04T03:00:00Z", "cluster", "2", "1", "0", "0", "1"]  # gpu07 + gpu99
    since = history(tmp_path, "runs", "--since", "2026-11-03")
    assert [ln.split()[1] for ln in since.stdout.splitlines()[2:]] == ["2026-11-04T03:00:00Z", "2026-11-03T03:00:00Z"]


def own_state(tmp_path: Path) -> dict[str, str]:
    """A user's environment: no $GPUCHECK_HISTORY, a state directory of its own."""
    env = {k: v for k, v in os.environ.items() if k != "GPUCHECK_HISTORY"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


def cluster_run(folder: Path, cluster: str, day: int) -> Path:
    doc = cluster_report({"node01": node_report("node01", f"2026-11-0{day}T03:00:00Z", 700.0)},
                         f"2026-11-0{day}T03:00:00Z")
    path = folder / f"{cluster}-{day}" / "report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**doc, "cluster_name": cluster}))
    return path


def test_each_cluster_has_a_store_of_its_own_and_a_run_of_another_is_refused(tmp_path: Path) -> None:
    """A lab's node01 and a production node01 never share a history: each cluster_name its own store."""
    env, stores = own_state(tmp_path), tmp_path / "state" / "gpucheck" / "history"
    lab, prod = cluster_run(tmp_path, "lab", 1), cluster_run(tmp_path, "prod", 2)
    done = run_gpucheck(["history", "import", "--cluster", "lab", str(lab)], env)
    assert done.returncode == 0 and f"({stores / 'lab.sqlite'}, cluster lab)" in done.stdout, done.stdout + done.stderr
    mixed = run_gpucheck(["history", "import", "--cluster", "lab", str(prod)], env)
    assert mixed.returncode == 3 and "keeps the runs of cluster lab, and this one is of cluster prod" in mixed.stderr
    assert run_gpucheck(["history", "import", "--cluster", "prod", str(prod)], env).returncode == 0
    node = tmp_path / "node01-prod.json"  # a node report says its cluster too (node.yaml's cluster_name)
    node.write_text(json.dumps({**node_report("node01", "2026-11-03T03:00:00Z", 700.0), "cluster_name": "prod"}))
    refused = run_gpucheck(["history", "import", "--cluster", "lab", str(node)], env)
    assert refused.returncode == 3 and "this one is of cluster prod" in refused.stderr, refused.stderr
    assert sorted(p.name for p in stores.iterdir()) == ["lab.sqlite", "prod.sqlite"]
    which = run_gpucheck(["history", "runs"], env)
    assert which.returncode == 3 and "holds the stores of clusters lab, prod: name one with --cluster" in which.stderr
    runs = run_gpucheck(["history", "runs", "--cluster", "prod"], env)
    assert runs.stdout.splitlines()[0] == f"runs in {stores / 'prod.sqlite'}, cluster prod, newest first"
    assert [line.split()[1] for line in runs.stdout.splitlines()[2:]] == ["2026-11-02T03:00:00Z"], runs.stdout


def test_a_store_shared_by_every_cluster_from_before_is_never_taken_silently(tmp_path: Path) -> None:
    env = own_state(tmp_path)
    shared = tmp_path / "state" / "gpucheck" / "history.sqlite"
    assert run_gpucheck(["history", "import", "--store", str(shared), str(cluster_run(tmp_path, "lab", 1))],
                        env).returncode == 0
    done = run_gpucheck(["history", "import", "--cluster", "lab", str(cluster_run(tmp_path, "lab", 2))], env)
    mine = tmp_path / "state" / "gpucheck" / "history" / "lab.sqlite"
    assert done.returncode == 3 and f"`mv {shared} {mine}` makes them cluster lab's" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not mine.exists()


def test_show_a_node_and_a_gpu_over_their_last_runs(tmp_path: Path, reports: Path) -> None:
    history(tmp_path, "import", str(reports))
    shown = history(tmp_path, "show", "gpu07", "--check", "gpu.gemm", "--figure", "bf16", "--runs", "3")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()[1:]}
    assert rows["started"] == ["(UTC)", "2026-11-02T03:00", "2026-11-03T03:00", "2026-11-04T03:00"], shown.stdout
    assert rows["verdict"] == ["pass", "pass", "pass"] and len(rows["run"]) == 3
    assert rows["gpu.gemm"] == ["bf16_TFLOPS", "GPU0", "781", "702.5", "700"], shown.stdout
    by_gpu = history(tmp_path, "show", UUID, "--check", "gpu.gemm", "--figure", "bf16")
    assert by_gpu.stdout.splitlines()[0] == f"{UUID}: its last 4 run(s), oldest first"
    bf16 = [line.split()[3:] for line in by_gpu.stdout.splitlines() if line.split()[:2] == ["gpu.gemm", "bf16_TFLOPS"]]
    assert bf16 == [["790", "781", "702.5", "700"]], by_gpu.stdout


def test_export_csv_and_json_carry_every_figure_with_its_unit_and_gpu(tmp_path: Path, reports: Path) -> None:
    history(tmp_path, "import", str(reports))
    done = history(tmp_path, "export", "--node", "gpu07")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    bf16 = [r for r in rows if r["check"] == "gpu.gemm" and r["figure"] == "bf16_TFLOPS"]
    assert [(r["started"], r["value"], r["unit"], r["gpu"], r["uuid"]) for r in bf16] == [
        (f"2026-11-0{d}T03:00:00Z", v, "TFLOPS", "0", UUID) for d, v in
        ((1, "790.0"), (2, "781.0"), (3, "702.5"), (4, "700.0"))]
    out = tmp_path / "all.json"
    written = history(tmp_path, "export", "--format", "json", "-o", str(out))
    assert written.returncode == 0 and f"written to {out}" in written.stderr
    doc = json.loads(out.read_text())
    assert {r["node"] for r in doc} == {"gpu07", "(cluster)"} and len(doc) == len(rows) + 2  # busbw, nodes
    assert next(r for r in doc if r["check"] == "gpu.count")["gpu"] is None


def test_a_baseline_is_shown_and_set_by_hand(tmp_path: Path, reports: Path) -> None:
    history(tmp_path, "import", str(reports))
    first = history(tmp_path, "baseline", "gpu07").stdout.strip()
    assert first.startswith("gpu07: baseline run #"), first
    assert "of 2026-11-01T03:00:00Z (pass), its first passing run" in first
    done = history(tmp_path, "baseline", "gpu07", "--set")
    assert done.returncode == 0 and " of 2026-11-04T03:00:00Z (pass), set by `gpucheck history baseline --set`" in \
        done.stdout, done.stdout
    assert history(tmp_path, "baseline", "gpu99").stdout.startswith("gpu99: no baseline yet")


@pytest.mark.parametrize("args, says", [
    (["show", "gpu08"], "nothing recorded for node gpu08 in "),
    (["runs", "--since", "last tuesday"], "'last tuesday' is neither Nd, Nh nor an ISO 8601 date or time"),
    (["runs", "--limit", "0"], "--limit"),
    (["import", "nowhere"], "nowhere: no such file or directory"),
    (["baseline", "gpu08", "--set"], "no run of node gpu08 in "),
    (["baseline", "gpu07", "--run", "1"], "--run needs --set"),
])
def test_bad_input_is_one_line_and_exit_3(tmp_path: Path, reports: Path, args: list[str], says: str) -> None:
    history(tmp_path, "import", str(reports / "node-1"))
    done = history(tmp_path, *args)
    assert done.returncode == 3 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_named_file_that_is_no_report_fails_the_import_but_not_the_others(tmp_path: Path, reports: Path) -> None:
    done = history(tmp_path, "import", str(reports / "summary.json"), str(reports / "node-1"))
    assert done.returncode == 3 and "summary.json: not a gpucheck report" in done.stderr
    assert "history: 1 run(s) recorded" in done.stdout


def test_hostile_reports_are_refused_or_kept_without_what_cannot_be_a_figure(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    huge = node_report("gpu07")
    next(r for r in huge["results"] if r["check"] == "gpu.count")["measured"] = 10 ** 400
    (tmp_path / "huge.json").write_text(json.dumps(huge))
    done = history(tmp_path, "import", str(deep), str(tmp_path / "huge.json"))
    said = f"gpucheck: error: {deep}: nested deeper than any gpucheck report"
    assert done.returncode == 3 and done.stderr.strip() == said, done.stderr
    assert "history: 1 run(s) recorded" in done.stdout
    rows = list(csv.DictReader(io.StringIO(history(tmp_path, "export").stdout)))
    assert rows and not [r for r in rows if r["check"] == "gpu.count"]  # 10**400 is no float: left out


def test_a_report_with_a_wrongly_typed_field_is_its_own_error_and_the_others_are_recorded(tmp_path: Path) -> None:
    """What a broken or hostile node sends: an exit code that is a list, a version that is a mapping, a GPU index past
    what SQLite holds, a cluster entry's reason that is a list. Each report is one named error or recorded as it
    says; none stops the import ("internal error", exit 3, the other nodes unrecorded, before)."""
    bad_exit = node_report("gpu01", "2026-11-01T03:00:00Z")
    bad_exit["exit_code"] = [1, 2]
    odd = node_report("gpu02", "2026-11-01T03:00:00Z")
    odd.update(gpucheck_version={"v": 1}, profile=["h200"])
    odd["facts"]["gpus"][0]["index"] = 2 ** 70
    entry = cluster_report({"gpu03": node_report("gpu03", "2026-11-02T03:00:00Z")}, "2026-11-02T03:00:00Z")
    entry["nodes"]["gpu99"]["reason"] = ["unreachable", {"errno": 113}]
    good = node_report("gpu04", "2026-11-03T03:00:00Z")
    for name, doc in (("1-bad-exit", bad_exit), ("2-odd", odd), ("3-cluster", entry), ("4-good", good)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    done = history(tmp_path, "import", *(str(tmp_path / f"{n}.json") for n in ("1-bad-exit", "2-odd", "3-cluster",
                                                                                 "4-good")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr == f"gpucheck: error: {tmp_path / '1-bad-exit.json'}: its exit_code [1, 2] is not an exit " \
                          "status (0-255)\n", done.stderr
    assert "history: 3 run(s) recorded" in done.stdout
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        assert db.execute("SELECT gpucheck_version FROM runs WHERE started = '2026-11-01T03:00:00Z'").fetchall() \
            == [('{"v": 1}',)]
        assert db.execute("SELECT reason FROM node_runs WHERE node = 'gpu99'").fetchall() \
            == [('["unreachable", {"errno": 113}]',)]


def test_a_store_that_is_missing_or_not_ours_is_one_line(tmp_path: Path) -> None:
    missing = history(tmp_path, "runs")
    assert missing.returncode == 3 and "no history store at " in missing.stderr
    assert not (tmp_path / "h.sqlite").exists()  # reading never creates one
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        db.execute("CREATE TABLE mine (x)")
    foreign = history(tmp_path, "import", str(tmp_path))
    assert foreign.returncode == 3 and "an SQLite file that is not a gpucheck history store" in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1


def test_what_a_node_wrote_reaches_the_terminal_as_escapes(tmp_path: Path) -> None:
    """A node's report names its checks and figures (here one that clears the screen, sets the window title and
    starts a line of its own): `history import`, `history show` and `gpucheck diff` print them as escapes."""
    hostile = "gpu.gemm\x1b[2J\x1b]0;owned\x07\nFAKE: all good"
    doc = node_report("gpu07", "2026-11-01T03:00:00Z", 790.0)
    gemm = next(r for r in doc["results"] if r["check"] == "gpu.gemm")
    gemm["check"] = hostile
    (tmp_path / "r.json").write_text(json.dumps(doc))
    done = history(tmp_path, "import", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    shown = history(tmp_path, "show", "gpu07", "--figure", "bf16")
    assert shown.returncode == 0, shown.stderr
    assert "gpu.gemm\\x1b[2J\\x1b]0;owned\\x07\\nFAKE: all good" in shown.stdout, shown.stdout
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert not any(line.startswith("FAKE") for line in shown.stdout.splitlines())
    before = tmp_path / "before.json"
    before.write_text(json.dumps(node_report("gpu07", "2026-11-01T03:00:00Z", 790.0)))
    diff = run_gpucheck(["diff", str(before), str(tmp_path / "r.json")])
    assert diff.returncode in (0, 1, 2), diff.stderr
    assert "\x1b" not in diff.stdout and "\\x1b]0;owned\\x07\\nFAKE: all good" in diff.stdout, diff.stdout


def test_a_secret_a_node_wrote_never_reaches_the_store(tmp_path: Path) -> None:
    """One redaction (redact.py) on every way into the store, as in the cluster report: a proxy password in a
    check's reason, in the report kept whole and in its source path."""
    doc = node_report("gpu07", "2026-11-01T03:00:00Z", 790.0, status_of={"gpu.gemm": "fail"})
    gemm = next(r for r in doc["results"] if r["check"] == "gpu.gemm")
    gemm["reason"] = "pip could not reach https://alice:s3cretPW@proxy.example:3128 for cupy"
    folder = tmp_path / "password=hunter2"
    folder.mkdir()
    (folder / "r.json").write_text(json.dumps(doc))
    assert history(tmp_path, "import", str(folder / "r.json")).returncode == 0
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        reasons = [r for (r,) in db.execute("SELECT reason FROM results WHERE reason LIKE '%proxy.example%'")]
        blobs = [zlib.decompress(b).decode() for (b,) in db.execute("SELECT report FROM node_runs")]
        sources = [s for (s,) in db.execute("SELECT source FROM runs")]
    assert reasons == ["pip could not reach https://alice:[redacted]@proxy.example:3128 for cupy"], reasons
    assert "s3cretPW" not in "".join(blobs) and "proxy.example" in "".join(blobs)
    assert "hunter2" not in sources[0] and "[redacted]" in sources[0], sources


def test_reading_a_store_creates_and_changes_no_file(tmp_path: Path, reports: Path) -> None:
    """Each command that only reads runs with the store's folder mounted read-only (a mount namespace of its own):
    one that opened the file to write, or made a journal (a WAL store's -wal and -shm), fails there. The store
    was also made by an older gpucheck in WAL mode: the next writer switches it back, once."""
    store = tmp_path / "h.sqlite"
    assert history(tmp_path, "import", str(reports)).returncode == 0
    with sqlite3.connect(store) as db:  # as gpucheck before this change left its stores
        db.execute("PRAGMA journal_mode=WAL")
    assert history(tmp_path, "import", str(reports)).returncode == 0  # a writer: back to a rollback journal
    before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.iterdir())
    gpucheck = f"PYTHONPATH={Path(__file__).resolve().parents[2] / 'agent'} {sys.executable} -m gpucheck history"
    for verb in ("runs", "show gpu07", f"show {UUID}", "baseline gpu07", "offenders", "export --format csv"):
        done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{tmp_path}' '{tmp_path}' && "
                               f"{gpucheck} {verb} --store '{store}'"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout, (verb, done.stderr)
    assert sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite", "reports"]


def test_a_spreadsheet_never_reads_a_nodes_text_as_a_formula(tmp_path: Path) -> None:
    """OWASP's CSV injection: a check or figure name a node wrote that starts with =, +, - or @ stays text in
    `history export` (a leading '), and its control characters are escapes."""
    doc = node_report("gpu07", "2026-11-01T03:00:00Z", 790.0)
    gemm = next(r for r in doc["results"] if r["check"] == "gpu.gemm")
    gemm["check"] = '=HYPERLINK("http://evil.example","x")\x1b[2J'
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert history(tmp_path, "import", str(tmp_path / "r.json")).returncode == 0
    out = history(tmp_path, "export").stdout
    assert "\x1b" not in out
    checks = {row["check"] for row in csv.DictReader(io.StringIO(out))}
    assert '\'=HYPERLINK("http://evil.example","x")\\x1b[2J' in checks, checks
    assert not any(check.startswith(("=", "+", "-", "@")) for check in checks)
