"""The cluster report as report.json: the document as is, everything the other formats show, and the GPU
burn-in section they show (burnin.py) when a node reported burn-in figures, so no reader recomputes it."""

from __future__ import annotations

import json
from typing import Any

from .burnin import burnin_section


def render_json(doc: dict[str, Any]) -> str:
    burnin = burnin_section(doc)
    return json.dumps({**doc, "burnin": burnin} if burnin else doc, indent=2, default=str) + "\n"
