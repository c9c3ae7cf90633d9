"""What every gpucheck command line shares: the parser that turns usage errors into one line and exit 3,
the option types (the one place a number on a command line is read and bounded), and the guard that turns
whatever escapes a command into one line and exit 3. Owned by neither command: `gpucheck.cli` (the
node-side commands) and `gpucheck.cluster.cli` both import it."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import math
import os
import re
import select
import sys
import textwrap
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from .model import EXIT_UNKNOWN

# The exit codes both command lines' --help state (the Nagios/Slurm convention: model.exit_code).
EXIT_CODES_HELP = """\
exit codes (Nagios/Slurm convention): 0 all pass, 1 warnings only, 2 at least one failure,
3 could not run (bad input, or a check that could not run and no failure). An internal error is one line
and exit 3; GPUCHECK_DEBUG=1 adds its traceback.
"""

MAX_SECONDS = 7 * 24 * 3600  # one week: longer than any probe, benchmark, host or stage should ever take
MIN_SECONDS = 0.001  # below a millisecond a limit is no limit (`timeout 1e-320` means "never")
MAX_COUNT = 1_000_000  # forks, steps, rounds: beyond this it is a typo, not a plan
MAX_PORT = 65535
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}  # as workloads/allreduce_bench.py reads them
MAX_SIZE_B = 1024 ** 4  # 1T per rank: more than any GPU holds
DEBUG_VARIABLE = "GPUCHECK_DEBUG"  # set (not 0): an internal error also prints its traceback


class LimitsInHelp(argparse.HelpFormatter):
    """Adds an option type's `limits` to the option's help, so --help says what the parser enforces; and wraps
    text at spaces only, to the terminal's width: a word, a path or a list like `a,b,c` is never broken (argparse's
    own wrapping breaks long words and splits at hyphens: `all-` / `reduce`); a word longer than the width makes
    its line longer instead. Under RawDescriptionHelpFormatter, a paragraph of a description or epilog whose
    lines all start at the margin is prose, filled to the width like the rest; one with indented lines (examples
    in columns) keeps its layout, a line too long for the width wrapped within its column (see `table`)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        limits = getattr(action.type, "limits", None)
        return f"{text} ({limits})" if text and limits else text

    def _split_lines(self, text: str, width: int) -> list[str]:
        if isinstance(self, argparse.RawTextHelpFormatter):
            return super()._split_lines(text, width)
        return whole_words(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if not isinstance(self, argparse.RawDescriptionHelpFormatter):
            return "\n".join(indent + line for line in whole_words(text, width - len(indent)))
        if isinstance(self, argparse.RawTextHelpFormatter):
            return super()._fill_text(text, width, indent)
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if all(line[:1].strip() for line in lines):  # prose
                lines = whole_words(paragraph, width - len(indent))
            else:
                lines = table(lines, width - len(indent))
            paragraphs.append("\n".join(indent + line for line in lines))
        return "\n\n".join(paragraphs)


def whole_words(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """Text as lines of at most `width` characters, broken at spaces only: the first line after `first`, the
    others after `rest` (default: as many spaces)."""
    rest = " " * len(first) if rest is None else rest
    return textwrap.wrap(" ".join(text.split()), max(width, len(first) + 1, len(rest) + 1), initial_indent=first,
                         subsequent_indent=rest, break_long_words=False, break_on_hyphens=False)


TWO_COLUMNS = re.compile(r"(\s+\S.*?\s{2,})(\S.*)")  # "  gpucheck node --full      what it does"
MIN_COLUMN = 20  # narrower than this, a description is not worth its own column


def table(lines: list[str], width: int) -> list[str]:
    """Indented lines (examples: a command, two spaces or more, what it does) within `width`: a description
    wrapped in its own column, or under its command where the column would be narrower than MIN_COLUMN; a
    command too long goes on, indented 2 more; a line indented deeper than the commands (a description that
    goes on) stays in its column."""
    base = min((len(line) - len(line.lstrip()) for line in lines if line[:1].isspace() and line.strip()), default=0)
    under = " " * (base + 6)  # a description with no room for its column
    out: list[str] = []
    for line in lines:
        indent = line[:len(line) - len(line.lstrip())]
        columns = TWO_COLUMNS.fullmatch(line)
        if len(line) <= width:
            out.append(line)
        elif len(indent) > base:  # what a description above says, going on
            out += whole_words(line, width, indent if width - len(indent) >= MIN_COLUMN else under)
        elif not columns:
            out += whole_words(line, width, indent, indent + "  ")
        elif width - len(columns[1]) >= MIN_COLUMN:
            out += whole_words(columns[2], width, columns[1])
        else:
            out += whole_words(columns[1], width, indent, indent + "  ") + whole_words(columns[2], width, under)
    return out


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, formatter_class: type = argparse.HelpFormatter, **kwargs: Any) -> None:
        if not issubclass(formatter_class, LimitsInHelp):
            formatter_class = type(formatter_class.__name__, (LimitsInHelp, formatter_class), {})
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_UNKNOWN, f"gpucheck: error: {' '.join(message.split())} (see --help)\n")


def fail(message: str) -> NoReturn:
    """Bad input or a file that cannot be written: one line on stderr, exit 3."""
    print(f"gpucheck: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(EXIT_UNKNOWN)


# ---------------------------------------------------------------- option types

DECIMAL = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")  # no inf, nan, 1_000, spaces
WHOLE = re.compile(r"[-+]?[0-9]+")


def shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def quoted(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


class Bounded:
    """An option type: text -> a finite number with low < value (or low <= value) and value <= high.
    `limits` is what --help shows (see LimitsInHelp)."""

    def __init__(self, kind: type, what: str, low: float, high: float, *, low_included: bool = False,
                 limits: str = "", high_note: str = "") -> None:
        self.kind, self.what, self.low, self.high = kind, what, low, high
        self.low_included, self.high_note = low_included, high_note
        self.limits = limits or f"at most {shown(high)}{high_note}"
        self.__name__ = what  # argparse names a type by it in its own messages

    def __call__(self, text: str) -> Any:
        syntax = WHOLE if self.kind is int else DECIMAL
        if not syntax.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not {self.what}")
        if self.kind is int and len(text) > 30:  # int() refuses 4,300 digits; this long, it is out of bounds anyway
            value = -math.inf if text.startswith("-") else math.inf
        else:
            value = self.kind(text)  # float("1e999") is inf: out of bounds below
        if value > self.high:
            raise argparse.ArgumentTypeError(f"must be at most {shown(self.high)}{self.high_note}")
        if value <= 0 and self.low >= 0:
            raise argparse.ArgumentTypeError("must be greater than 0")
        if value < self.low or (value == self.low and not self.low_included):
            raise argparse.ArgumentTypeError(f"must be {'at least' if self.low_included else 'more than'} "
                                             f"{shown(self.low)}")
        return value


seconds = Bounded(float, "a number of seconds", MIN_SECONDS, MAX_SECONDS, low_included=True,
                  high_note=" (one week)", limits=f"seconds, {MIN_SECONDS:g} to {MAX_SECONDS} = one week")
whole_number = Bounded(int, "a whole number", 1, MAX_COUNT, low_included=True, limits=f"1 to {MAX_COUNT}")
port = Bounded(int, "a port number", 1, MAX_PORT, low_included=True, limits=f"1 to {MAX_PORT}")
fraction = Bounded(float, "a number", 0, 1, limits="more than 0, at most 1")
MAX_GPUS = 64  # NVML's indexes on one node: far more than any machine has


def gpu_index(text: str) -> int:
    """An NVML index, 0 to MAX_GPUS - 1 (--gpus)."""
    if not text.isdigit() or int(text) >= MAX_GPUS:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a GPU index (0 to {MAX_GPUS - 1}, as nvidia-smi "
                                         "numbers them)")
    return int(text)


def size(text: str) -> str:
    """Bytes per rank: 1048576, 64M, 1G (K, M, G are powers of 1024), at most 1T."""
    match = re.fullmatch(r"([1-9][0-9]*)([KMG]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a size like 64M, 1G or 1048576")
    if len(match[1]) > 16 or int(match[1]) * SIZE_UNITS[match[2]] > MAX_SIZE_B:
        raise argparse.ArgumentTypeError("must be at most 1T (1024G)")
    return text


size.limits = "at most 1T"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- running a command

def ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    """Where the terminal cannot show a character (LC_ALL=C, PYTHONIOENCODING=ascii): the report's dashes and
    ellipses as ASCII, anything else as '?'."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start:error.end]
    return "".join({"\u2014": "-", "\u2013": "-", "\u2026": "...", "\u00d7": "x"}.get(c, "?") for c in bad), error.end


codecs.register_error("gpucheck-ascii", ascii_fallback)


def prepare_streams() -> None:
    """Output must never crash on the terminal's encoding: characters it cannot show are replaced."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a closed or detached stream: nothing to print to
                reconfigure(errors="gpucheck-ascii")


def stdout_is_gone() -> bool:
    """Whether the reader of our standard output went away (`gpucheck parse ... | head -1`)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def guarded(command: Callable[[], int]) -> int:
    """Run a command so that nothing escapes it as a traceback and exit 1 (which Nagios and Slurm read as
    'warning'): an interrupt, a reader that went away (quiet, as Unix tools are) and any internal error are
    exit 3; the last one says `gpucheck: internal error: TYPE: MESSAGE (please report)` on one line, and its
    traceback too when GPUCHECK_DEBUG is set."""
    prepare_streams()
    try:
        code = command()
        sys.stdout.flush()  # a reader that went away shows here, not as a complaint at exit
        return code
    except KeyboardInterrupt:
        print("gpucheck: interrupted", file=sys.stderr)
        return EXIT_UNKNOWN
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and stdout_is_gone():
            devnull = os.open(os.devnull, os.O_WRONLY)  # nothing left to flush at exit: no second complaint
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_UNKNOWN
        if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            traceback.print_exc()
        what = ": ".join(part for part in (type(exc).__name__, " ".join(str(exc).split())) if part)
        print(f"gpucheck: internal error: {what} (please report)", file=sys.stderr)
        return EXIT_UNKNOWN
