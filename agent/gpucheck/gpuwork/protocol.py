"""The output lines of the GPU programs: `GPUCHECK_GPUWORK ` then one JSON object per event (docs/burnin.md).

Each line is flushed as soon as it is written, so a program killed later (a wedged GPU during the burn)
has already delivered what it measured. Human progress goes to standard error."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

MARKER = "GPUCHECK_GPUWORK "
EXIT_OK = 0
EXIT_UNAVAILABLE = 3  # also a bad command line: one line on stderr


class TestCannotRun(Exception):
    """A test that could not run for a reason that is not the GPU's (its message is the result's `error`)."""


class Interrupted(Exception):
    """A test stopped by `cause` after measuring `figures`: the result carries both (the bad words a memory
    test found before an uncorrectable ECC error, the clock reasons a burn saw before the GPU fell over)."""

    def __init__(self, cause: Exception, figures: dict[str, Any]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.figures = figures


def finite(value: Any) -> Any:
    """The value with every NaN or infinity replaced by None: the lines are strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def significant(value: float, digits: int = 4) -> float:
    """A measured rate rounded to `digits` significant digits (777.1 TFLOP/s; a slow fake GPU's 0.0003)."""
    return float(f"{value:.{digits}g}")


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(MARKER + json.dumps(finite(event), allow_nan=False) + "\n")
    sys.stdout.flush()


def progress(message: str) -> None:
    sys.stderr.write(f"gpuwork: {message}\n")
    sys.stderr.flush()
