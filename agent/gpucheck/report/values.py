"""One-line renderings of a measured or expected value, shared by every report format. Units come from
names, as the house writes them (`median_Gbps` -> `median 42.31 Gb/s`, `{"free_GiB": {"/": 72.5}}` ->
`free: / 72.5 GiB`); a name's unit holds for every number under it. Empty parts (`counts: {}`) say nothing
and are left out. `figure` is the one place a figure gets its precision and unit: every rendering goes through it."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from .gpu_figures import GPU_LABEL, number_text, words_and_unit

NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")  # an identifier with words: median_Gbps
PER_SECOND = re.compile(r"([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*)_per_s")  # samples_per_s -> samples/s
# names whose words, read in order, say something else than they mean
READABLE = {"rounds_seconds_each": ("each round", "s")}


def figure(value: Any, unit: str = "") -> str:
    """A figure with its unit: `23.51 Gb/s`, `30560 samples/s` (precision: gpu_figures.number_text); anything that
    is not a number as it is."""
    return f"{number_text(value)} {unit}".rstrip()


def size(nbytes: Any) -> str:
    """A byte count as a person reads it, in binary units: 67108864 -> `64 MiB`, 1536 -> `1.5 KiB`."""
    if not isinstance(nbytes, int | float) or isinstance(nbytes, bool):
        return str(nbytes)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:g} B"


def name_words(name: Any) -> tuple[str, str]:
    """A key's words and unit: `median_Gbps` -> ("median", "Gb/s"), `samples_per_s` -> ("", "samples/s"),
    `/` or `GPU0` or a path -> as it is, no unit."""
    if name in READABLE:
        return READABLE[name]
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return str(name), ""
    per_second = PER_SECOND.fullmatch(name)
    if per_second:
        return "", per_second.group(1).replace("_", " ") + "/s"
    return words_and_unit(name)


def time_of(text: Any) -> dt.datetime | None:
    """An ISO 8601 time a report holds (`2026-11-27T03:00:00Z`), aware; one without a zone is UTC, as gpucheck
    writes them; None for what is no time."""
    try:
        stamp = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)


def figure_unit(name: Any, unit: str) -> str:
    """How a stored figure's unit is written: from its name where it says one (`bf16_TFLOPS` -> `TFLOP/s`), else
    the unit kept beside it."""
    return name_words(name)[1] or unit


# Checks whose measured numbers stand bare (one per GPU) in a unit their id does not name
BARE_UNITS = {"gpu.temperature": "°C"}


def unit_of_check(check: Any) -> str:
    """The unit of a check's bare numbers: the one its id names (`cluster.straggler.net_Gbps` -> `Gb/s`), else
    BARE_UNITS' (`gpu.temperature` -> `°C`)."""
    return name_words(str(check).rsplit(".", 1)[-1])[1] or BARE_UNITS.get(str(check), "")


def empty(value: Any) -> bool:
    return isinstance(value, dict | list | tuple | str) and not value


def show(value: Any, limit: int = 48, unit: str = "") -> str:
    """A short one-line rendering of a measured/expected value for the table; `unit`: the unit of its
    numbers when no name under it says one."""
    text = render(value, unit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return figure(value, unit)
    if isinstance(value, dict):
        return render_mapping(value, unit)
    if isinstance(value, list | tuple):
        kept = [v for v in value if not empty(v)]
        parts = [render(v, unit) for v in kept]
        if len(kept) > 1:  # a part with commas of its own in brackets, so the parts stay apart
            parts = [f"({p})" if isinstance(v, dict) and ", " in p else p for v, p in zip(kept, parts, strict=True)]
        return ", ".join(parts) or "none"
    return str(value)


def render_mapping(value: dict[Any, Any], unit: str) -> str:
    kept = {k: v for k, v in value.items() if not empty(v)}
    if not kept:
        return "-"
    distinct = {json.dumps(v, sort_keys=True, default=str) for v in kept.values()}
    if len(kept) > 1 and len(distinct) == 1 and all(GPU_LABEL.fullmatch(str(k)) for k in kept):
        return f"all {len(kept)} GPUs: {render(next(iter(kept.values())), unit)}"
    parts = []
    for key, item in kept.items():
        words, own_unit = name_words(key)
        inner = render(item, own_unit or unit)
        if inner == words or words and inner.startswith(words + " "):  # the name once: `{"since": "since boot"}`
            parts.append(inner)
        elif words and inner != "-" and (isinstance(item, dict) or isinstance(item, list | tuple) and ", " in inner):
            parts.append(f"{words}: {inner}" if len(kept) == 1 else f"{words} ({inner})")
        else:
            parts.append(f"{words} {inner}".strip())
    return ", ".join(parts)


def plural(count: Any, word: str, many: str = "") -> str:
    """`1 node`, `3 nodes`, `1 GPU`, `8 GPUs` (`many`: a plural that is not word + s)."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def listed(names: list[str], shown: int = 3) -> str:
    """Names in one line, the first `shown` of them: `gpu.count, gpu.model, gpu.driver and 14 more`."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
