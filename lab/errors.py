"""The one exception the lab raises for anything a user should read as a one-line message."""

from __future__ import annotations

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
