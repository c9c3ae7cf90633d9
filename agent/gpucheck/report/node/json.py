"""The node report as JSON: everything Report.to_dict() holds (facts and thresholds included)."""

from __future__ import annotations

import json

from ...model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str) + "\n"
