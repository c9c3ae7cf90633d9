"""What `gpucheck rma` gathers on the node, each piece on its own: a passive run of the node's checks (NVML's
facts whole, the kernel's Xid events of this boot), `nvidia-smi -q` as it prints it, DCGM's version, NVIDIA's
bug report, the node's kept reports and the history store's figures of the GPU's model. A piece that cannot be
had is a line in `missing`, never the end of the archive."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import NodeConfig
from ..history import queries
from ..history.store import HistoryError, Store
from ..model import Report
from ..node import kept_reports
from ..node.pipeline import Options, judge
from ..process import Completed, run, which

BUG_REPORT = "nvidia-bug-report.sh"
BUG_REPORT_TIMEOUT_S = 600.0  # it reads every log and runs nvidia-smi -q; NVIDIA says it can hang


@dataclass
class Collected:
    report: Report  # the passive checks, run now
    facts: dict[str, Any]  # every collector's facts of that run (nvml, kernel_log, ...)
    nvidia_smi: Completed
    dcgmi: Completed | None = None  # `dcgmi -v`, where DCGM is installed
    bug_report: Completed | None = None
    bug_report_file: bytes | None = None
    kept: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (file name, report), oldest first
    fleet: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def node_run(timeout: float, config: NodeConfig) -> tuple[Report, dict[str, Any]]:
    """The passive checks with every Xid of this boot (an RMA wants the whole story, not the last day's)."""
    return judge(Options(timeout=timeout, xid_since_boot=True), config)


def nvidia_smi(bus_ids: list[str] | None, timeout: float) -> Completed:
    """`nvidia-smi -q` of the node, or of each named GPU (-i takes a bus id; a list is comma-separated)."""
    return run(["nvidia-smi", "-q", *(["-i", ",".join(bus_ids)] if bus_ids else [])], timeout)


def dcgmi_version(timeout: float) -> Completed | None:
    return run(["dcgmi", "-v"], timeout) if which("dcgmi") else None


def bug_report(timeout: float = BUG_REPORT_TIMEOUT_S) -> tuple[Completed | None, bytes | None]:
    """NVIDIA's nvidia-bug-report.sh, as its RMA process asks: (how it ran, the .log.gz), or (None, None) when the
    driver did not install it."""
    if not which(BUG_REPORT):
        return None, None
    with tempfile.TemporaryDirectory(prefix="gpucheck-rma-") as tmp:
        base = Path(tmp) / "nvidia-bug-report.log"
        done = run([BUG_REPORT, "--output-file", str(base)], timeout)
        made = base.with_name(base.name + ".gz")
        return done, made.read_bytes() if made.is_file() else None


def kept(directory: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The node's kept reports (node/kept_reports.py), oldest first, and a note for each that could not be read."""
    try:
        names = sorted(n for n in os.listdir(directory) if kept_reports.NAME.fullmatch(n))
    except FileNotFoundError:
        return [], [f"no kept reports: {directory} does not exist (no gpucheck node run kept one here)"]
    except OSError as exc:
        return [], [f"no kept reports: cannot read {directory} ({exc.strerror or exc})"]
    found, notes = [], []
    for name in names:
        try:
            doc = kept_reports.read(directory / name)
        except (OSError, ValueError, RecursionError) as exc:
            notes.append(f"kept report {name} not read: {getattr(exc, 'strerror', None) or exc}")
            continue
        if isinstance(doc, dict) and isinstance(doc.get("results"), list):
            found.append((name, doc))
        else:
            notes.append(f"kept report {name} not read: not a gpucheck node report")
    return found, notes


def fleet(store_path: Path, models: list[str], checks: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The history store's figures of these checks on GPUs of these models; a note instead when there is none."""
    if not store_path.is_file():
        return [], (f"no fleet comparison: no history store at {store_path} (run gpucheck rma where the store is, "
                    "or copy it here and give --store)")
    try:
        with Store(store_path, reading=True) as store:
            return [row for model in models for row in queries.model_figures(store, model, checks)], None
    except HistoryError as exc:
        return [], f"no fleet comparison: {exc}"
