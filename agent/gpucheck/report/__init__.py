"""Report renderers, one module per format. The node's formats by name live here (`gpucheck node
--format`); the cluster handoff report's files are written by writer.ReportWriter (cluster.py gathers
its public names)."""

from __future__ import annotations

from collections.abc import Callable

from ..model import Report
from .node_json import render_json
from .node_junit import render_junit
from .node_prometheus import render_prometheus
from .node_text import render_text

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text, "json": render_json, "junit": render_junit, "prometheus": render_prometheus}
FORMATS = tuple(RENDERERS)


def render(report: Report, fmt: str) -> str:
    return RENDERERS[fmt](report)
