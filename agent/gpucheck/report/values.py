"""One-line renderings of a measured or expected value, shared by every report format."""

from __future__ import annotations

import json
import re
from typing import Any


def show(value: Any, limit: int = 48) -> str:
    """A short one-line rendering of a measured/expected value for the table."""
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, dict):
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in value.values()}
        if value and len(distinct) == 1 and all(re.fullmatch(r"GPU\d+", k) for k in value):
            text = f"all {len(value)} GPUs: {show(next(iter(value.values())), limit)}"
        else:
            text = ", ".join(f"{k}={show(v, limit)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ",".join(show(v, limit) for v in value) or "[]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
