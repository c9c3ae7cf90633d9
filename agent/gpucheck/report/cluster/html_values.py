"""A result's measured or expected value in report.html, whole (never cut: a cell wraps): figures per GPU with
the GPUs the reason names first and in bold, the others that read alike in one line; a mapping as a key/value
list (`launcher: node01`, never `launcher node01` read as one figure); anything else as one line. Figures
through values.figure."""

from __future__ import annotations

import re
from typing import Any

from ..gpu_figures import GPU_LABEL
from ..values import empty, name_words, render
from .html_parts import esc, esc_wrapping

NAMED_GPU = re.compile(r"\bGPU(\d+)\b")


def named_gpus(reason: Any) -> list[str]:
    """The GPU labels a reason names, in order, once each: `GPU3 (…): 2 errors; GPU5 …` -> [GPU3, GPU5]."""
    return list(dict.fromkeys(f"GPU{i}" for i in NAMED_GPU.findall(str(reason or ""))))


def per_gpu_items(value: dict[Any, Any], unit: str, named: list[str]) -> list[str]:
    """The GPUs the reason names first, one item each in bold; then the others, those that read alike in one
    item: `GPU0, GPU1, GPU2: volatile uncorrected 0` (`all 8 GPUs: …` when every GPU reads alike)."""
    texts = {str(g): render(v, unit) for g, v in value.items()}
    items = [f"<b>{esc(g)}: {esc_wrapping(texts[g])}</b>" for g in named if g in texts]
    alike: dict[str, list[str]] = {}
    for gpu, text in texts.items():
        if gpu not in named:
            alike.setdefault(text, []).append(gpu)
    if len(alike) == 1 and not items and len(texts) > 1:
        return [f"all {len(texts)} GPUs: {esc_wrapping(next(iter(alike)))}"]
    return items + [f"{esc(', '.join(gpus))}: {esc_wrapping(text)}" for text, gpus in alike.items()]


def mapping_items(value: dict[Any, Any], unit: str) -> list[str]:
    """`key words: value with its unit`, one item per key that says something."""
    items = []
    for key, item in value.items():
        if empty(item):
            continue
        words, own_unit = name_words(key)
        text = render(item, own_unit or unit)
        shown = esc_wrapping(text)
        items.append(shown if not words or text == words else f'<span class="k">{esc(words)}:</span> {shown}')
    return items


def value_html(value: Any, unit: str = "", reason: Any = "") -> str:
    """The value as HTML for a table cell: a list for a mapping, else its text (`-` for nothing)."""
    if not isinstance(value, dict) or not any(not empty(v) for v in value.values()):
        return esc_wrapping(render(value, unit))
    kept = {k: v for k, v in value.items() if not empty(v)}
    if all(GPU_LABEL.fullmatch(str(k)) for k in kept):
        items = per_gpu_items(kept, unit, named_gpus(reason))
    else:
        items = mapping_items(kept, unit)
    return '<ul class="kv">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>"
