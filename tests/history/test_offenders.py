"""Repeat offenders (history/offenders.py): a failure seen by many runs in a row is one failure; a node is named
when it failed N separate times within M days, this run included; `gpucheck history offenders` lists them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from test_store import node_report

from gpucheck.history.offenders import (
    Failure,
    failures_of,
    gpu_offenders,
    offenders,
    repeat_failures,
    repeat_gpu_failures,
)
from gpucheck.history.records import from_document
from gpucheck.history.store import Store
from support import run_gpucheck

NOW = dt.datetime(2026, 11, 27, 12, tzinfo=dt.timezone.utc)


def day(n: int) -> str:
    return (NOW - dt.timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(store: Store, host: str, days_ago: int, failing: str | None) -> None:
    doc = node_report(host, day(days_ago), status_of={failing: "fail"} if failing else None)
    store.record(from_document(doc), f"{host}-{days_ago}")


def test_failing_runs_in_a_row_are_one_failure_and_an_error_breaks_nothing() -> None:
    runs = [("1", "fail", "gpu.ecc_errors"), ("2", "fail", "gpu.ecc_errors"), ("3", "error", ""),
            ("4", "fail", "gpu.ecc_errors"), ("5", "pass", ""), ("6", "fail", "gpu.memtest"), ("7", "warn", ""),
            ("8", "fail", "gpu.xid")]
    assert failures_of(runs) == [Failure("1", "gpu.ecc_errors"), Failure("6", "gpu.memtest"), Failure("8", "gpu.xid")]


def test_the_third_failure_within_the_window_names_the_node(tmp_path: Path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        for days_ago, failing in ((40, "gpu.memtest"), (20, "gpu.ecc_errors"), (19, "gpu.ecc_errors"), (15, None),
                                  (9, "gpu.row_remap"), (5, None)):
            record(store, "gpu07", days_ago, failing)
        now_failing = from_document(node_report("gpu07", day(0), status_of={"gpu.ecc_errors": "fail"})).nodes[0]
        found = repeat_failures(store, now_failing, day(0), now=NOW)
        assert [(f.started[:10], f.what) for f in found] == [
            ("2026-11-07", "gpu.ecc_errors"), ("2026-11-18", "gpu.row_remap"), ("2026-11-27", "gpu.ecc_errors")]
        passing = from_document(node_report("gpu07", day(0))).nodes[0]
        assert repeat_failures(store, passing, day(0), now=NOW) == []  # two within 30 days: not yet
        assert repeat_failures(store, now_failing, day(0), days=10, now=NOW) == []  # one in the last 10 days + now
        assert list(offenders(store, failures=2, now=NOW)) == ["gpu07"]
        assert offenders(store, now=NOW) == {}


def test_the_offenders_command_lists_them(tmp_path: Path) -> None:
    store_path = tmp_path / "h.sqlite"
    now = dt.datetime.now(dt.timezone.utc)
    with Store(store_path) as store:
        for days_ago, failing in ((6, "gpu.xid"), (5, None), (2, "gpu.xid")):
            doc = node_report("gpu09", (now - dt.timedelta(days=days_ago)).isoformat(),
                              status_of={failing: "fail"} if failing else None)
            store.record(from_document(doc), str(days_ago))
    done = run_gpucheck(["history", "offenders", "--failures", "2", "--days", "7", "--store", str(store_path)])
    assert done.returncode == 0 and done.stdout.startswith("gpu09: failed 2 times in 7 days: "), done.stdout
    assert done.stdout.count("(gpu.xid)") == 2
    none = run_gpucheck(["history", "offenders", "--store", str(store_path)])
    assert none.stdout.startswith("no node or GPU failed 3 times in 30 days")


def gpu_report(host: str, days_ago: int, failing: dict[str, str] | None, order: tuple[str, str] = ("GPU-a", "GPU-b")
               ) -> dict:
    """A node run with two GPUs (UUIDs in `order` at indexes 0 and 1) whose failing checks say what they say."""
    doc = node_report(host, day(days_ago), status_of={check: "fail" for check in failing or {}})
    doc["facts"]["gpus"] = [{"index": i, "uuid": uuid, "pci_bus_id": f"00000000:{0x19 + i:02X}:00.0",
                             "name": "NVIDIA H200"} for i, uuid in enumerate(order)]
    for result in doc["results"]:
        if result["check"] in (failing or {}):
            result["reason"] = failing[result["check"]]
    return doc


def test_a_gpu_failing_again_and_again_is_named_by_its_uuid_wherever_it_went(tmp_path: Path) -> None:
    """GPU-a fails three separate times, the third on another node at another index (named there by its bus id);
    GPU-b fails once, in a run where GPU-a's node also failed: only GPU-a is the offender."""
    with Store(tmp_path / "h.sqlite") as store:
        for days_ago, failing in ((25, {"gpu.ecc_errors": "GPU0 (00000000:19:00.0): 2 uncorrected"}), (24, None),
                                  (20, {"gpu.memtest": "GPU1: 5 bad words"}),  # GPU-b's failure, not GPU-a's
                                  (15, {"gpu.xid": "fatal: Xid 48 on 0000:19:00"}), (14, None)):
            store.record(from_document(gpu_report("gpu07", days_ago, failing)), f"gpu07-{days_ago}")
        moved = gpu_report("gpu08", 2, {"gpu.ecc_errors": "GPU1 (00000000:1A:00.0): 4 uncorrected"},
                           order=("GPU-c", "GPU-a"))  # GPU-a is GPU1 of gpu08 now
        part = from_document(moved).nodes[0]
        found = repeat_gpu_failures(store, part, day(2), now=NOW)
        assert {label: [(f.started[:10], f.what) for f in items] for label, items in found.items()} == {
            "GPU1 (GPU-a) of gpu08": [("2026-11-02", "gpu.ecc_errors"), ("2026-11-12", "gpu.xid"),
                                      ("2026-11-25", "gpu.ecc_errors")]}
        assert gpu_offenders(store, now=NOW) == {}  # two in the store: the third is the run not yet recorded
        store.record(from_document(moved), "gpu08-2")
        assert list(gpu_offenders(store, now=NOW)) == ["GPU1 (GPU-a) of gpu08"]
        assert list(gpu_offenders(store, failures=1, now=NOW)) == ["GPU1 (GPU-a) of gpu08", "GPU1 (GPU-b) of gpu07"]


def test_a_node_that_claims_another_nodes_gpu_cannot_make_it_an_offender(tmp_path: Path) -> None:
    """gpu66 lists gpu07's GPU-a as its own GPU0 and fails naming GPU0, three times, while gpu07 reports GPU-a
    passing: GPU-a's failures on gpu66 are gpu66's to answer for, not gpu07's GPU's."""
    with Store(tmp_path / "h.sqlite") as store:
        for days_ago in (25, 15, 5):
            store.record(from_document(gpu_report("gpu07", days_ago, None)), f"gpu07-{days_ago}")
        for days_ago in (20, 12, 8):
            failing = {"gpu.ecc_errors": "GPU0 (00000000:19:00.0): 2 uncorrected"}
            store.record(from_document(gpu_report("gpu66", days_ago, failing)), f"gpu66-{days_ago}")
            store.record(from_document(gpu_report("gpu66", days_ago - 1, None)), f"gpu66-{days_ago}-ok")
        part = from_document(gpu_report("gpu07", 1, None)).nodes[0]
        assert repeat_gpu_failures(store, part, day(1), failures=1, now=NOW) == {}
        assert list(gpu_offenders(store, now=NOW)) == ["GPU0 (GPU-a) of gpu66"]  # its own runs only
