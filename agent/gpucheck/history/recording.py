"""A finished `gpucheck cluster` run into the history store: one line saying where it went, or why it did not.
A store that cannot be written never changes the run's verdict or exit code."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from .records import NotAReport, from_document
from .store import HistoryError, Store, default_path


def record_run(doc: dict[str, Any], source: Path, store_path: Path | None) -> tuple[bool, str]:
    """(recorded, what to say): into the store of the run's cluster, unless one is given."""
    try:
        run = from_document(doc)
        path = store_path or default_path(cluster=run.cluster)
        with Store(path) as store:
            run_id, new = store.record(run, str(source))
    except (HistoryError, NotAReport, RuntimeError, OSError, sqlite3.Error) as exc:
        return False, f"history: this run was not recorded: {exc}"
    of = f" (cluster {run.cluster})" if run.cluster else ""
    return True, f"history: run {run_id} {'recorded' if new else 'was already recorded'} in {path}{of}"
