"""The words every rendering of the cluster report shares: the verdict per exit code, status counts,
figures that may not be numbers, and the published scaling figures our efficiency is read against."""

from __future__ import annotations

import math
from typing import Any

from ..references import REFERENCES

VERDICT = {0: "PASS", 1: "WARN", 2: "FAIL", 3: "COULD NOT CHECK EVERYTHING"}


def verdict(code: Any) -> str:
    return VERDICT.get(code, "?") if isinstance(code, int) else "?"


def number(value: Any, spec: str = "g") -> str:
    """A figure formatted by `spec`, or as it is when it is not a finite number (never an exception)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return format(value, spec)
    return str(value)


def status_of(item: Any) -> str:
    """The status word of a result or node entry, whatever it holds."""
    return str(item.get("status", "")) if isinstance(item, dict) else ""


def counts_text(counts: Any) -> str:
    """`1 pass, 3 fail`: the non-zero counts in order, or `none`."""
    items = counts.items() if isinstance(counts, dict) else ()
    return ", ".join(f"{n} {s}" for s, n in items if n) or "none"


def published_scaling() -> str:
    """The published figures the smoke job's efficiency is read against (sources in references.py)."""
    return "; ".join(f"{r['name']}: {r['efficiency']:.0%} at {r['gpus']} GPUs ({r['speedup']:.0f}x)"
                     for r in REFERENCES)
