"""What every gpucheck command line shares: the parser that turns usage errors into one line and exit 3,
and the option types. Owned by neither command: `gpucheck.cli` (the node-side commands) and
`gpucheck.cluster.cli` both import it."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from .model import EXIT_UNKNOWN


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_UNKNOWN, f"gpucheck: error: {message} (see --help)\n")


def fail(message: str) -> NoReturn:
    """Bad input or a file that cannot be written: one line on stderr, exit 3."""
    print(f"gpucheck: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_UNKNOWN)


def positive_number(kind: type, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError("must be greater than 0")
        return value
    return parse


seconds = positive_number(float, "a number of seconds")
whole_number = positive_number(int, "a whole number")


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("must be in (0, 1]")
    return value


def size(text: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[KMG]?", text):
        raise argparse.ArgumentTypeError(f"'{text}' is not a size like 64M, 1G or 1048576")
    return text
