"""Per-GPU figures (docs/burnin.md, "What a result carries"): a result whose `measured` is
{"GPU0": {"bf16_TFLOPS": 777.1, ...}, ...}. Which results have that shape, each figure's words and unit
read from its name (bf16_TFLOPS -> "bf16 777.1 TFLOP/s"), and the lines the text and JUnit formats show."""

from __future__ import annotations

import math
import re
from typing import Any

GPU_LABEL = re.compile(r"GPU(\d+)")
# The unit token of a figure's name -> how it is written. The name's other tokens are its words.
UNITS = {"TFLOPS": "TFLOP/s", "GBps": "GB/s", "Gbps": "Gb/s", "MBps": "MB/s", "MHz": "MHz", "C": "°C", "W": "W",
         "s": "s", "seconds": "s", "MiB": "MiB", "GiB": "GiB", "bytes": "bytes"}
BYTES_PER_GIB = 1024**3


def is_figure(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))


def per_gpu(measured: Any) -> dict[str, dict[str, Any]] | None:
    """The per-GPU figures in GPU order (GPU2 before GPU10), or None when `measured` is not that shape:
    every key a GPU label, every value a mapping of figure name -> number or string, some figure."""
    if not isinstance(measured, dict) or not measured:
        return None
    for label, figures in measured.items():
        if not (isinstance(label, str) and GPU_LABEL.fullmatch(label) and isinstance(figures, dict)):
            return None
        if not all(isinstance(name, str) and is_figure(value) for name, value in figures.items()):
            return None
    if not any(measured.values()):
        return None
    return dict(sorted(measured.items(), key=lambda item: int(item[0][3:])))


def words_and_unit(name: str) -> tuple[str, str]:
    """`bf16_TFLOPS` -> ("bf16", "TFLOP/s"); `temperature_C_max` -> ("temperature max", "°C");
    `bad_words` -> ("bad words", "")."""
    tokens = name.split("_")
    for i, token in enumerate(tokens):
        if token in UNITS and len(tokens) > 1:
            return " ".join(tokens[:i] + tokens[i + 1:]), UNITS[token]
    return " ".join(tokens), ""


def number_text(value: Any) -> str:
    """4 significant digits, whole numbers from 1000 up (3026 GB/s, 777.1 TFLOP/s, 0.9123)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def figure_text(name: str, value: Any) -> str:
    """One figure as words: `bf16 777.1 TFLOP/s`, `tested 62.5 GiB`, `checksum 3fa2c0d1e5b6a7f8`."""
    words, unit = words_and_unit(name)
    if unit == "bytes" and is_figure(value) and not isinstance(value, str):
        value, unit = (value / BYTES_PER_GIB, "GiB") if value >= BYTES_PER_GIB else (value / 2**20, "MiB")
    text = number_text(value)
    return " ".join(x for x in (words, text, unit) if x)


def figure_expected(expected: Any, gpu: str) -> dict[str, str]:
    """figure -> what it was judged against for this GPU: `expected` per figure, or per GPU and figure."""
    if not isinstance(expected, dict):
        return {}
    own = expected.get(gpu)
    source = own if isinstance(own, dict) else {k: v for k, v in expected.items() if not GPU_LABEL.fullmatch(str(k))}
    return {str(k): str(v) for k, v in source.items() if v is not None}


def shared_expected(expected: Any) -> dict[str, str]:
    """The expected per figure that holds for every GPU (not keyed by GPU), in the order given."""
    if not isinstance(expected, dict) or any(GPU_LABEL.fullmatch(str(k)) for k in expected):
        return {}
    return {str(k): str(v) for k, v in expected.items() if v is not None}


def expected_per_figure(expected: Any) -> bool:
    """Whether `expected` names figures (for every GPU or per GPU): the lines show it, not a table cell."""
    if shared_expected(expected):
        return True
    return isinstance(expected, dict) and any(isinstance(v, dict) and v for v in expected.values())


def lines(measured: Any, expected: Any) -> list[str]:
    """`expected: bf16 >= 593 (0.6 x 989)` once when it holds for every GPU, then one line per GPU:
    `GPU0: bf16 777.1 TFLOP/s, fp16 740.2 TFLOP/s` (an expected per GPU in brackets after its figure)."""
    gpus = per_gpu(measured)
    if gpus is None:
        return []
    out = []
    shared = shared_expected(expected)
    if shared:
        out.append("expected: " + "; ".join(f"{words_and_unit(k)[0]} {v}" for k, v in shared.items()))
    for gpu, figures in gpus.items():
        own = {} if shared else figure_expected(expected, gpu)
        parts = [figure_text(k, v) + (f" [{own[k]}]" if k in own else "") for k, v in figures.items()]
        out.append(f"{gpu}: " + (", ".join(parts) or "nothing measured"))
    return out
