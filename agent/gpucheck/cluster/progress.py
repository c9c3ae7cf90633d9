"""Fan-out progress: a rich progress bar on a terminal, one plain line per host otherwise (CI logs,
pipes), so a long run always shows it is alive and which hosts went wrong. Reasons are redacted as
the report's are, and what a node printed that a terminal would act on is shown as escapes (redact.py)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..model import Status
from ..redact import for_terminal
from .context import NodeOutcome

MARK = {Status.PASS: "pass", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.ERROR: "ERROR", Status.SKIP: "skip"}
STYLE = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.ERROR: "magenta",
         Status.SKIP: "dim"}


class PlainProgress:
    def __init__(self, total: int, stream: TextIO):
        self.total, self.stream, self.done = total, stream, 0

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def update(self, outcome: NodeOutcome) -> None:
        self.done += 1
        width = len(str(self.total))
        self.stream.write(f"[{self.done:>{width}}/{self.total}] {outcome.host:<16} {MARK[outcome.status]:<5} "
                          f"{outcome.wall_s:6.1f} s  {for_terminal(outcome.reason)}\n")
        self.stream.flush()


class RichProgress:
    """The bar, and a line above it for each host that did not pass (healthy hosts stay quiet)."""

    def __init__(self, total: int, stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream)
        self.progress = Progress(TextColumn("gpucheck node on {task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=self.console)
        self.task = self.progress.add_task(f"{total} hosts", total=total)

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def update(self, outcome: NodeOutcome) -> None:
        from rich.markup import escape

        if outcome.status != Status.PASS:
            reason = escape(for_terminal(outcome.reason))
            self.progress.console.print(f"[{STYLE[outcome.status]}]{MARK[outcome.status]:<5}[/] "
                                        f"{escape(outcome.host)}: {reason}", highlight=False)
        self.progress.advance(self.task)


def make(total: int, stream: TextIO | None = None) -> PlainProgress | RichProgress:
    stream = stream or sys.stdout
    return RichProgress(total, stream) if stream.isatty() else PlainProgress(total, stream)
