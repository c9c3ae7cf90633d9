"""What every GPU program shares: its command line (a usage error is one line and exit 3), opening CuPy and
the devices (`begin` or `unavailable`), running one test (`start`, then `result`), and `end`."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from . import device
from .errors import classify, describe
from .protocol import EXIT_OK, EXIT_UNAVAILABLE, Interrupted, TestCannotRun, emit, progress

SIZE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr and exit 3 (the agent's convention)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_UNAVAILABLE)


def whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not minimum <= value <= 2**40:
        raise argparse.ArgumentTypeError(f"must be in [{minimum}, 2^40]: {text!r}")
    return value


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be in (0, 86400] seconds: {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1): {text!r}")
    return value


def byte_count(text: str) -> int:
    """A size in bytes: a whole number, optionally with a binary suffix K, M, G or T (256M = 256 MiB)."""
    body, suffix = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    if suffix not in SIZE_SUFFIXES or not body.isdigit() or int(body) < 1:
        raise argparse.ArgumentTypeError(f"not a size in bytes (e.g. 268435456 or 256M): {text!r}")
    return int(body) * SIZE_SUFFIXES[suffix]


def name_list(known: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {','.join(known)}")
        return list(dict.fromkeys(names))

    return parse


def open_cuda() -> tuple[Any, int]:
    """CuPy and the number of devices, after printing `begin`; or `unavailable` and exit 3."""
    try:
        cp = device.import_cupy()
        devices = device.open_devices(cp)
        begin = device.begin_event(cp, devices)
    except device.Unavailable as exc:
        emit({"event": "unavailable", "reason": str(exc)})
        progress(str(exc))
        sys.exit(EXIT_UNAVAILABLE)
    emit(begin)
    progress(f"{begin['device']['name']}: CuPy {begin['cupy']}, CUDA runtime {begin['cuda_runtime']}, "
             f"{devices} device(s)")
    return cp, devices


def run_test(cp: Any, name: str, body: Callable[[], dict[str, Any]]) -> str | None:
    """Run one test and print its result. Returns why the program must stop (the context is lost), or None."""
    emit({"event": "start", "test": name})
    progress(f"{name}: start")
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    error = fault = stop = None
    try:
        with device.nvtx_range(name):
            figures = body()
    except TestCannotRun as exc:
        error = str(exc)
    except Exception as raised:
        exc = raised.cause if isinstance(raised, Interrupted) else raised
        figures = raised.figures if isinstance(raised, Interrupted) else {}
        outcome = classify(exc)
        error, fault = outcome.error, outcome.fault
        if outcome.context_lost or not device.healthy(cp):
            stop = f"the CUDA context is unusable after {name}: {describe(exc)}"
    seconds = round(time.perf_counter() - started, 3)
    emit({"event": "result", "test": name, "seconds": seconds, "error": error, "fault": fault, **figures})
    progress(f"{name}: {'fault: ' + fault if fault else 'error: ' + error if error else 'done'} ({seconds} s)")
    return stop


def finish(stopped: str | None) -> int:
    """`end` last; `stopped` says why tests were left out when the context was lost."""
    emit({"event": "end", **({"stopped": stopped} if stopped else {})})
    if stopped:
        progress(f"stopped: {stopped}")
    return EXIT_OK


def guarded(main: Callable[[], int]) -> int:
    """Anything that escapes a program is one line on stderr and exit 3 (GPUCHECK_DEBUG=1 adds the traceback)."""
    try:
        return main()
    except KeyboardInterrupt:
        return EXIT_UNAVAILABLE
    except Exception as exc:
        if os.environ.get("GPUCHECK_DEBUG") == "1":
            traceback.print_exc()
        sys.stderr.write(f"gpuwork: internal error: {describe(exc)}\n")
        return EXIT_UNAVAILABLE
