"""The cluster report's directory: nodes/<host>.json as each host answers, and the report files,
each written atomically and rewritten as each stage finishes."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import write_atomically
from .cluster_drain import render_drain
from .cluster_html import render_html
from .cluster_json import render_json
from .cluster_junit import render_junit
from .cluster_markdown import render_markdown

# file name -> its renderer, in the order they are written
RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "report.json": render_json, "junit.xml": render_junit, "report.md": render_markdown,
    "report.html": render_html, "drain.txt": render_drain}
FILES = tuple(RENDERERS)


def default_dir(now: dt.datetime | None = None) -> Path:
    """./gpucheck-report-<UTC time>/"""
    now = now or dt.datetime.now(dt.timezone.utc)
    return Path(f"gpucheck-report-{now.strftime('%Y%m%dT%H%M%SZ')}")


def safe_name(host: str) -> str:
    """An inventory name as a file name: no separator, no `..` escaping the directory."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "_"


class ReportWriter:
    """Owns the report directory: nodes/<host>.json as each host answers, the report files per stage."""

    def __init__(self, directory: Path):
        self.dir = directory
        (self.dir / "nodes").mkdir(parents=True, exist_ok=True)

    def node(self, host: str, outcome: dict[str, Any]) -> None:
        write_atomically(self.dir / "nodes" / f"{safe_name(host)}.json", json.dumps(outcome, indent=2, default=str))

    def write(self, doc: dict[str, Any]) -> None:
        for name, render in RENDERERS.items():
            write_atomically(self.dir / name, render(doc))
