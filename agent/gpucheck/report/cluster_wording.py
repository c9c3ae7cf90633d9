"""The words every rendering of the cluster report shares: the verdict per exit code, status counts,
and the published scaling figures our efficiency is read against."""

from __future__ import annotations

from ..references import REFERENCES

VERDICT = {0: "PASS", 1: "WARN", 2: "FAIL", 3: "COULD NOT CHECK EVERYTHING"}


def verdict(code: int) -> str:
    return VERDICT.get(code, "?")


def counts_text(counts: dict[str, int]) -> str:
    """`1 pass, 3 fail`: the non-zero counts in order, or `none`."""
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"


def published_scaling() -> str:
    """The published figures the smoke job's efficiency is read against (sources in references.py)."""
    return "; ".join(f"{r['name']}: {r['efficiency']:.0%} at {r['gpus']} GPUs ({r['speedup']:.0f}x)"
                     for r in REFERENCES)
