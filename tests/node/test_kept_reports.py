"""The node's own last reports (node/kept_reports.py): which runs are kept in <state dir>/reports/ and which are
pruned, and end to end: `gpucheck node` against the fake NVML library keeps its JSON report there, the folder is
what `gpucheck history import` reads, and a run that cannot write there still ends as it would have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucheck.model import Report, Result, Status
from gpucheck.node import kept_reports
from lab.fakenvml import build_library, env_for, scenario_path
from support import run_gpucheck


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_passive_passes_but_the_newest_are_pruned_everything_else_kept(tmp_path: Path) -> None:
    for name in ("20261101T030000Z-pass.json", "20261101T030500Z-fail.json", "20261101T031000Z-pass.json",
                 "20261101T031500Z-pass-full.json", "20261101T032000Z-warn.json", "20261101T032500Z-pass.json",
                 "notes.txt"):
        (tmp_path / name).write_text("{}")
    kept_reports.prune(tmp_path)
    assert names(tmp_path) == ["20261101T030500Z-fail.json", "20261101T031500Z-pass-full.json",
                               "20261101T032000Z-warn.json", "20261101T032500Z-pass.json", "notes.txt"]


def test_a_pass_that_returned_the_node_is_kept_for_the_history(tmp_path: Path) -> None:
    """The health check's pass that resumed the node is where the history reads its `returned` transition."""
    resumed = '{"facts": {"slurm": {"action": "resume", "path": "health-check"}}}'
    (tmp_path / "20261101T030000Z-pass.json").write_text(resumed)
    (tmp_path / "20261101T030500Z-pass.json").write_text('{"facts": {"slurm": {"action": "keep"}}}')
    (tmp_path / "20261101T031000Z-pass.json").write_text("{}")
    kept_reports.prune(tmp_path)
    assert names(tmp_path) == ["20261101T030000Z-pass.json", "20261101T031000Z-pass.json"]


def test_at_most_keep_max_files_the_oldest_going_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_reports, "KEEP_MAX", 3)
    for minute in range(5):
        (tmp_path / f"20261101T03{minute:02d}00Z-fail.json").write_text("{}")
    kept_reports.prune(tmp_path)
    assert names(tmp_path) == [f"20261101T03{m:02d}00Z-fail.json" for m in (2, 3, 4)]


def test_the_newest_active_pass_outlives_keep_max_newer_failures(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """KEEP_MAX newer warning health checks (42 h of them every 5 minutes at 500) must not take the node's only kept
    active pass: "no active check passed in N days" is read from it."""
    monkeypatch.setattr(kept_reports, "KEEP_MAX", 3)
    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path))
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("20261101T030000Z-pass-full.json", "20261102T030000Z-pass-full.json"):
        (folder / name).write_text("{}")
    for minute in range(5):
        (folder / f"20261103T03{minute:02d}00Z-warn.json").write_text("{}")
    kept_reports.prune(folder)
    assert names(folder) == ["20261102T030000Z-pass-full.json", "20261103T030300Z-warn.json",
                             "20261103T030400Z-warn.json"]
    passive = Report(host="n", profile="p", results=[Result("gpu.count", Status.WARN)], started="2026-11-03T04:00:00Z")
    assert kept_reports.last_active_pass(passive, False) == "2026-11-02T03:00:00Z"


def test_two_runs_in_one_second_are_two_files() -> None:
    report = Report(host="n", profile="p", results=[Result("gpu.count", Status.FAIL)],
                    started="2026-11-27T06:00:00+01:00")
    first = kept_reports.file_name(report, False, set())
    assert first == "20261127T050000Z-fail.json"
    assert kept_reports.file_name(report, True, {first}) == "20261127T050000Z-fail-full.json"
    assert kept_reports.file_name(report, False, {first}) == "20261127T050000Z.2-fail.json"


@pytest.fixture
def node(fake_bin, tmp_path):
    fake_bin.add("dmesg", "[    0.000000] Linux version 6.1.0-18-amd64\n")
    libdir = build_library()

    def run(scenario: str, state: Path) -> int:
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_STATE_DIR=str(state))
        return run_gpucheck(["node", "--profile", "generic", "--only", "gpu.count", "gpu.ecc_errors"], env)

    return run


def test_each_run_is_kept_on_the_node_and_the_history_imports_the_folder(node, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert node("dgx-h100", state).returncode == 0
    assert node("ecc-uncorrected", state).returncode == 2
    assert node("dgx-h100", state).returncode == 0
    kept = names(state / "reports")
    assert [n.split("-", 1)[1] for n in kept] == ["fail.json", "pass.json"] and (state / "reports").stat().st_mode \
        & 0o777 == 0o700
    failed = json.loads((state / "reports" / kept[0]).read_text())
    assert failed["exit_code"] == 2 and failed["facts"]["gpus"][3]["uuid"].startswith("GPU-")
    imported = run_gpucheck(["history", "import", str(state / "reports"), "--store", str(tmp_path / "h.sqlite")])
    assert imported.returncode == 0 and "history: 2 run(s) recorded" in imported.stdout, imported.stderr


def test_a_state_folder_it_may_not_write_is_no_news(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's run without root may not write /var/lib/gpucheck (as root, nothing refuses: the refusal is made)."""
    def refused(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(kept_reports, "write_atomically", refused)
    report = Report(host="n", profile="p", results=[], started="2026-11-27T06:00:00+00:00")
    assert kept_reports.keep(report, "{}", False) is None and names(tmp_path / "reports") == []


def test_a_file_where_the_folder_should_be_is_one_note(node, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "reports").write_text("not a folder")
    done = node("dgx-h100", state)
    assert done.returncode == 0
    assert f"gpucheck: note: this report is not kept on the node: cannot write {state / 'reports'}" in done.stderr


def test_the_last_active_pass_is_this_run_or_the_newest_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path))
    (tmp_path / "reports").mkdir()
    for name in ("20261101T030000Z-pass-full.json", "20261104T030000Z-warn-full.json",
                 "20261105T030000Z-fail-full.json", "20261106T030000Z-pass.json"):
        (tmp_path / "reports" / name).write_text("{}")
    failing = Report(host="n", profile="p", results=[Result("gpu.gemm", Status.FAIL)], started="2026-11-27T05:00:00Z")
    assert kept_reports.last_active_pass(failing, True) == "2026-11-04T03:00:00Z"
    passing = Report(host="n", profile="p", results=[Result("gpu.gemm", Status.PASS)], started="2026-11-27T05:00:00Z")
    assert kept_reports.last_active_pass(passing, True) == "2026-11-27T05:00:00Z"
    assert kept_reports.last_active_pass(passing, False) == "2026-11-04T03:00:00Z"  # a passive run is no active one


def test_the_prometheus_text_says_when_an_active_check_last_passed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "reports").mkdir(parents=True)
    (state / "reports" / "20261120T030000Z-pass-full.json").write_text("{}")
    env = env_for(scenario_path("dgx-h100"), build_library())
    env["GPUCHECK_STATE_DIR"] = str(state)
    done = run_gpucheck(["node", "--profile", "generic", "--only", "gpu.count", "--format", "prometheus"], env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("gpucheck_last_active_pass_timestamp_seconds")]
    assert len(lines) == 1 and lines[0].endswith(" 1795143600"), done.stdout[-500:]  # 2026-11-20T03:00:00Z
