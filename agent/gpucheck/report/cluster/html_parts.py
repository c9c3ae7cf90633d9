"""What the HTML page and its SVG charts share: the stylesheet (inline: the page has no external
asset), the status colours and row tints, escaping (and long tokens that may wrap), the status badge."""

from __future__ import annotations

import html
import re
from typing import Any

from ..gpu_figures import UNITS

COLOURS = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "error": "#8250df", "skip": "#6e7781",
           "pending": "#6e7781"}
TINTS = {"pass": "#dafbe1", "warn": "#fff8c5", "fail": "#ffebe9", "error": "#fbefff", "skip": "#f6f8fa",
         "pending": "#f6f8fa"}
NEUTRAL = "#6e7781"  # a status with no colour of its own
# An unbroken run this long (a hash, a path) is no word: it may wrap anywhere, so its cell never grows past the
# page. Words wrap at spaces, never inside.
LONG_TOKEN = re.compile(r"\S{24,}")
# the space between a figure and its unit (the units figures are written in, gpu_figures.UNITS, and the few a
# finding writes itself): never a line break there ("5" at a line's end, "°C" on the next)
UNIT_GAP = re.compile(r"(?<=\d) (?=(?:" + "|".join(map(re.escape, sorted({*UNITS.values(), "GB", "MB", "%"},
                                                                         key=lambda u: (-len(u), u))))
                      + r")(?![\w/]))")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.banner{padding:14px 24px;color:#fff}.banner small{display:block;opacity:.9;margin-top:4px}
.tiles{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.tile{border:1px solid #d0d7de;border-radius:6px;padding:8px 14px;min-width:90px}
.tile b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
.badge{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600}
code,pre{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
code.id{white-space:nowrap}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:240px;white-space:pre-wrap}
details{margin:2px 0}summary{cursor:pointer}
.muted{color:#6e7781}.note{font-size:12px;color:#57606a}
.kv{list-style:none;margin:0;padding:0}.kv .k{color:#57606a}
.token{overflow-wrap:anywhere}
.trend{display:inline-flex;align-items:center;gap:8px;margin:0 20px 4px 0}.trend-name{min-width:14em}
.trend-range{font-size:12px;color:#57606a}
svg{font:12px system-ui,sans-serif;fill:#1f2328;max-width:100%;height:auto}  /* inherited: a chart's own fill wins */
"""


def esc(value: Any) -> str:
    """Any value as text safe in an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def esc_wrapping(value: Any) -> str:
    """Escaped text whose long unbroken tokens may wrap anywhere (LONG_TOKEN); the rest wraps at spaces, never
    between a figure and its unit (UNIT_GAP)."""
    text, parts, last = str(value), [], 0

    def plain(segment: str) -> str:
        return UNIT_GAP.sub("&nbsp;", esc(segment))

    for token in LONG_TOKEN.finditer(text):
        parts += [plain(text[last:token.start()]), f'<span class="token">{esc(token.group())}</span>']
        last = token.end()
    return "".join(parts) + plain(text[last:])


def tint(status: str) -> str:
    return TINTS.get(status, "#fff")


def badge(status: str) -> str:
    return f'<span class="badge" style="background:{COLOURS.get(status, NEUTRAL)}">{esc(status.upper())}</span>'
