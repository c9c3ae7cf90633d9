"""Helpers shared by the parsers: the error type, text clean-up, number conversion."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable


class ParseError(ValueError):
    """The input is not recognisable output of this tool. str(e) is a one-line human reason."""

    def __init__(self, reason: str) -> None:
        # Keep the promise that the reason is one line, whatever a caller passes in.
        super().__init__(" ".join(str(reason).split()))


# Prefixes that launchers put in front of every line of a remote program's output:
# OpenMPI --tag-output ("[1,0]<stdout>:"), pdsh/clush ("node01: "), srun --label ("0: "; with 10 tasks
# or more srun pads the number to the width of the largest: " 0: ", "15: ").
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|[A-Za-z0-9][\w.-]*: | {0,6}\d+: )")

# Control characters that never appear in tool output printed to a terminal (ESC does: colours).
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_STRAY = re.compile(_BINARY_CHARS.pattern + r"|\x1b(?!\[)")  # and an ESC that starts no colour sequence


def text_lines(text: str, kind: str) -> list[str]:
    """Return the lines of `text` (any newline convention), or raise ParseError if it is not text."""
    if not isinstance(text, str):
        raise ParseError(f"not {kind} output: expected text, got {type(text).__name__}")
    if "\x00" in text or len(_BINARY_CHARS.findall(text)) > max(8, len(text) // 50):
        raise ParseError(f"not {kind} output: binary data")
    text = _ANSI_ESCAPE.sub("", text.lstrip("\ufeff"))
    if not text.strip():
        raise ParseError(f"not {kind} output: empty input")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def drop_stray_bytes(text: str) -> tuple[str, int]:
    """`text` without the characters that no printed text holds (NUL, stray control bytes, U+FFFD for bytes
    that were not UTF-8), and how many there were. For logs that pick such bytes up as a matter of course
    (the kernel's: a driver printing a binary buffer, a record torn by a crash); tool output that holds them
    is refused by `text_lines` instead, as a corrupted capture."""
    if not isinstance(text, str):
        return text, 0  # text_lines refuses it, with the reason
    return _STRAY.subn("", text)


def strip_prefix(line: str) -> str:
    """Remove one launcher prefix (mpirun tag, pdsh host, srun label) if the line has one."""
    return _LAUNCHER_PREFIX.sub("", line, count=1)


def number(value: str | None) -> int | float | None:
    """'400' -> 400, '2.5' -> 2.5, '67.03 W' -> 67.03, 'N/A' / '' / None -> None."""
    if value is None:
        return None
    match = re.match(r"\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", value)
    if not match:
        return None
    text = match.group(1)
    result = float(text)
    if result != result or result in (float("inf"), float("-inf")):
        return None
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return result


def guard(kind: str) -> Callable[[Callable[[str], dict]], Callable[[str], dict]]:
    """Turn any unexpected exception inside a parser into a ParseError naming the kind.

    The parsers are written not to raise anything else; this is the safety net that keeps
    a surprise in some new tool version from becoming a traceback in `gpucheck parse`.
    """

    def decorate(func: Callable[[str], dict]) -> Callable[[str], dict]:
        @functools.wraps(func)
        def wrapper(text: str) -> dict:
            try:
                return func(text)
            except ParseError:
                raise
            except (ValueError, IndexError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                raise ParseError(f"not {kind} output: {type(exc).__name__}: {exc}") from exc

        return wrapper

    return decorate
