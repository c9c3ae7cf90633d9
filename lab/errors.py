"""The one exception the lab raises for anything a user should read as a one-line message, and how a lab command
turns it (and Ctrl-C) into that line and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable

# Exit codes follow the monitoring convention used by gpucheck itself.
EXIT_OK = 0
EXIT_WARN = 1
EXIT_FAIL = 2
EXIT_UNKNOWN = 3


class LabError(Exception):
    """A failure the CLI prints as one line (no traceback) and turns into an exit code."""

    def __init__(self, message: str, code: int = EXIT_UNKNOWN) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def reported(command: Callable[[], int]) -> int:
    """`command()`'s exit code; a LabError is its one line on stderr and its code, Ctrl-C is said and 130."""
    try:
        return command()
    except LabError as exc:
        print(f"lab: error: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130
