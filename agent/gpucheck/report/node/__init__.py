"""The node report's formats (`gpucheck node --format`): text, JSON, JUnit XML, Prometheus textfile, each
rendered from the Report; the formats by name are here."""

from __future__ import annotations

from collections.abc import Callable

from ...model import Report
from .json import render_json
from .junit import render_junit
from .prometheus import render_prometheus
from .text import render_text

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text, "json": render_json, "junit": render_junit, "prometheus": render_prometheus}
FORMATS = tuple(RENDERERS)


def render(report: Report, fmt: str) -> str:
    return RENDERERS[fmt](report)
