"""The cluster report's directory: nodes/<host>.json as each host answers, and the report files,
each written atomically and rewritten as each stage finishes. Everything written goes through
redact.clean first (no secret, no NaN): `write` returns the document as written."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...files import user_state_dir, write_atomically
from ...redact import clean, escaped
from .drain import render_drain
from .html import render_html
from .json import render_json
from .junit import render_junit
from .markdown import render_markdown

# file name -> its renderer, in the order they are written
RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "report.json": render_json, "junit.xml": render_junit, "report.md": render_markdown,
    "report.html": render_html, "drain.txt": render_drain}
FILES = tuple(RENDERERS)
NAME_MAX = 100  # of the readable part of a node's file name (file systems allow 255 bytes)


def default_dir(now: dt.datetime | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """<state directory>/reports/gpucheck-report-<UTC time>/ (files.user_state_dir). RuntimeError without a home."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return user_state_dir(environ) / "reports" / f"gpucheck-report-{now.strftime('%Y%m%dT%H%M%SZ')}"


def safe_name(host: str) -> str:
    """An inventory name as a file name: no separator, no `..` escaping the directory."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "_"


def node_file(host: str) -> str:
    """The node's file in the report directory, unique per host name: `nodes/<host>.json` when the name
    is a safe file name as it is, else its safe form, `~` and a hash of the name (`n/1` and `n_1` are two
    hosts: nodes/n_1~<hash>.json and nodes/n_1.json; no safe name holds a `~`)."""
    safe = safe_name(host)
    if safe == host and len(host) <= NAME_MAX and not host.startswith("."):
        return f"nodes/{host}.json"
    digest = hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"nodes/{safe[:NAME_MAX].lstrip('.') or '_'}~{digest}.json"  # never hidden


class ReportWriter:
    """Owns the report directory: nodes/<host>.json as each host answers, the report files per stage."""

    def __init__(self, directory: Path):
        self.dir = directory
        (self.dir / "nodes").mkdir(parents=True, exist_ok=True)

    def node(self, host: str, outcome: dict[str, Any]) -> None:
        write_atomically(self.dir / node_file(host), json.dumps(clean(outcome), indent=2, default=str) + "\n")

    def write(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Every report file from `doc`; returns the document as written (redacted). The files a person reads
        (Markdown, HTML, XML, drain.txt) show a node's control characters as escapes: a terminal that prints them,
        and an XML parser, would act on them or refuse the file; JSON escapes its own. The document is redacted
        once, before rendering."""
        written = clean(doc)
        for name, render in RENDERERS.items():
            text = render(written)
            write_atomically(self.dir / name, text if name.endswith(".json") else escaped(text, newlines=True))
        return written
