"""Progress lines with durations, on stderr (stdout is kept for results)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def say(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr, flush=True)


def fmt_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s"


@contextmanager
def step(what: str, hint: str = "") -> Iterator[None]:
    """Print `what ...` (with an optional hint such as an expected duration), then `what: done in N s`."""
    say(f"{what} ..." + (f" ({hint})" if hint else ""))
    start = time.monotonic()
    try:
        yield
    except BaseException:
        say(f"{what}: stopped after {fmt_duration(time.monotonic() - start)}")
        raise
    say(f"{what}: done in {fmt_duration(time.monotonic() - start)}")


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
