"""drain.txt: the nodes to take out of service, one `node gpucheck: reason` per line.

Scripts read it with `while read n r; do scontrol update nodename=$n state=drain reason="$r"`: a
node name is one word and a reason one line. The inventory refuses host names with whitespace or a
control character; should one reach here anyway, each such character is written as `\\xNN` (the
line stays one line of two fields), and a reason's whitespace and control characters become spaces."""

from __future__ import annotations

import re
from typing import Any

from ..values import plural

NOT_ONE_WORD = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]")
NOT_ONE_LINE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def one_word(text: Any) -> str:
    return NOT_ONE_WORD.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)) or "-"


def one_line(text: Any) -> str:
    return NOT_ONE_LINE.sub(" ", str(text)).strip()


def render_drain(doc: dict[str, Any]) -> str:
    """`node gpucheck: reason` per line: `while read n r; do scontrol update nodename=$n state=drain reason="$r"`."""
    return "".join(f"{one_word(d.get('node'))} {one_line(d.get('reason', ''))}\n"
                   for d in doc.get("drain") or () if isinstance(d, dict))


def would_drain_line(doc: dict[str, Any]) -> str:
    """The nodes the profile's observed checks failed on, as one sentence; "" when none."""
    nodes = [one_word(d.get("node")) for d in doc.get("would_drain") or () if isinstance(d, dict)]
    if not nodes:
        return ""
    shown = ", ".join(nodes[:20]) + (f" and {len(nodes) - 20} more" if len(nodes) > 20 else "")
    return (f"observed checks (the profile's observe) would have drained {plural(len(nodes), 'node')}, drained "
            f"none: {shown}")
