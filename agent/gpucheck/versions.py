"""Version strings as comparable tuples."""

from __future__ import annotations


def version_tuple(text: str | float | None) -> tuple[int, ...]:
    """'535.129.03' -> (535, 129, 3); tolerant of suffixes like '12.2.140' or '8.9.7-1'."""
    parts = []
    for piece in str(text or "").replace("-", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
