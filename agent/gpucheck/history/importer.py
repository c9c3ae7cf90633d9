"""Reports already on disk into the history (`gpucheck history import`): node reports (`gpucheck node --format
json`, the upgrade's before/after.json, site.yml's validation folders) and cluster report directories. Each
run is its own transaction: a file that cannot be read costs that file only, and importing a folder twice
records nothing new."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..files import read_file
from .records import NotAReport, Run, from_document
from .store import HistoryError, Store

MAX_REPORT_B = 256 * 1024 * 1024  # a cluster report.json of 256 nodes is ~50 MiB
CLUSTER_REPORT = "report.json"  # a cluster report directory's document; its nodes/ hold the same node reports


@dataclass
class Outcome:
    recorded: int = 0
    known: int = 0  # recorded before
    not_reports: list[str] = field(default_factory=list)  # JSON files found in folders that are not reports
    errors: list[str] = field(default_factory=list)  # "path: why" for the files that could not be read


def files_under(path: Path) -> Iterator[tuple[Path, bool]]:
    """(file, named): the file itself, or every *.json under a folder in name order, a cluster report
    directory as its report.json only. `named` is True for a file the user named."""
    if not path.is_dir():
        yield path, True
        return
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if CLUSTER_REPORT in files and "nodes" in dirs:
            dirs.clear()
            yield Path(root) / CLUSTER_REPORT, False
            continue
        yield from ((Path(root) / name, False) for name in sorted(files) if name.endswith(".json"))


def run_of(path: Path) -> Run:
    try:
        return from_document(read_report(path))
    except RecursionError:  # json.loads or the figures' walk, on a document nested past Python's stack
        raise NotAReport("nested deeper than any gpucheck report") from None


def read_report(path: Path) -> object:
    data = read_file(path, MAX_REPORT_B)
    if len(data) > MAX_REPORT_B:
        raise NotAReport(f"more than {MAX_REPORT_B // 2**20} MiB")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NotAReport(f"not JSON ({exc})") from None


def import_paths(store: Store, paths: list[Path], progress: Callable[[Path, str], None]) -> Outcome:
    outcome = Outcome()
    for path in paths:
        if not path.exists():
            outcome.errors.append(f"{path}: no such file or directory")
            continue
        for file, named in files_under(path):
            try:
                run = run_of(file)
            except OSError as exc:
                outcome.errors.append(f"{file}: {exc.strerror or exc}")
                continue
            except NotAReport as exc:
                (outcome.errors if named else outcome.not_reports).append(f"{file}: {exc}")
                continue
            try:
                run_id, new = store.record(run, str(file.resolve()))
            except (NotAReport, HistoryError) as exc:  # a value no record can hold; a run of another cluster
                outcome.errors.append(f"{file}: {exc}")
                continue
            outcome.recorded += new
            outcome.known += not new
            progress(file, f"run {run_id}" if new else f"already recorded (run {run_id})")
    return outcome
