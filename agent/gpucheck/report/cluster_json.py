"""The cluster report as report.json: the document as is, everything the other formats show."""

from __future__ import annotations

import json
from typing import Any


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str) + "\n"
