"""drain.txt: the nodes to take out of service, one `node gpucheck: reason` per line."""

from __future__ import annotations

from typing import Any


def render_drain(doc: dict[str, Any]) -> str:
    """`node gpucheck: reason` per line: `while read n r; do scontrol update nodename=$n state=drain reason="$r"`."""
    return "".join(f"{d['node']} {d['reason']}\n" for d in doc.get("drain", []))
