"""Run the GPU programs (`python -m gpucheck.gpuwork.*`) all at once and read their result lines.

One job: start every program at the same moment, each in its own session (process.start: a signal that ends
the agent ends them too), read the `GPUCHECK_GPUWORK {json}` lines each prints as it goes, and kill the group of
any program still running at the limit. What a program said before it was killed is kept: a worker killed
during the burn still delivers its memtest. A program stuck in the kernel (a wedged GPU) may not die even then:
it is left to the agent's exit (process.children_end_with_command) and costs only its own results.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...process import finish, kill_group, start

PREFIX = "GPUCHECK_GPUWORK "
LINE_MAX_B = 4 * 1024 * 1024  # a burn's windows for a day fit; a line longer than this is not a result
STDERR_TAIL_CHARS = 2000
KILL_GRACE_S = 5.0  # after SIGKILL, how long the pipes are read until they close
READ_CHUNK_B = 65536


@dataclass(frozen=True)
class Program:
    argv: list[str]
    env: dict[str, str]


def gpu_program(module: str, uuids: list[str], args: list[str]) -> Program:
    """`python -m <module> <args>` in the agent's own interpreter, seeing the GPUs `uuids` as CUDA devices 0, 1, ...
    in that order (docs/burnin.md: CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES the UUIDs)."""
    return Program([sys.executable, "-m", module, *args],
                   dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=",".join(uuids)))


@dataclass
class Outcome:
    """What one program said and how it ended."""

    begin: dict[str, Any] | None = None
    unavailable: str | None = None  # its `unavailable` event's reason, or why it could not be started
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # test -> its result line
    running: str | None = None  # the test started and not yet reported
    ended: bool = False  # its `end` line came
    exit: int | None = None  # None: killed, or not reaped
    timed_out: bool = False
    stuck: bool = False  # still holding its pipes after SIGKILL and the grace
    stray_lines: int = 0  # lines on standard output that are not contract lines
    stderr_tail: str = ""
    seconds: float = 0.0


class Reader:
    """One program's pipes: whole lines from standard output, the tail of standard error."""

    def __init__(self, label: str, proc: subprocess.Popen, outcome: Outcome) -> None:
        self.label, self.proc, self.outcome = label, proc, outcome
        self.pending = b""
        self.skipping = False  # inside a line longer than LINE_MAX_B: dropped up to its newline
        self.open = 2

    def take_stdout(self, data: bytes) -> None:
        self.pending += data
        while b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
            if self.skipping or len(line) > LINE_MAX_B:
                self.skipping = False
                self.outcome.stray_lines += 1
                continue
            self.line(line.decode("utf-8", "replace"))
        if len(self.pending) > LINE_MAX_B:
            self.pending, self.skipping = b"", True

    def finish_stdout(self) -> None:
        if self.pending and not self.skipping:
            self.line(self.pending.decode("utf-8", "replace"))
        self.pending = b""

    def take_stderr(self, data: bytes) -> None:
        text = self.outcome.stderr_tail + data.decode("utf-8", "replace")
        self.outcome.stderr_tail = text[-STDERR_TAIL_CHARS:]

    def line(self, text: str) -> None:
        event = parse_line(text)
        if event is None:
            self.outcome.stray_lines += 1
            return
        record(self.outcome, event)


def parse_line(text: str) -> dict[str, Any] | None:
    """The event of a contract line, or None for any other line."""
    text = text.rstrip("\r")
    if not text.startswith(PREFIX):
        return None
    try:
        event = json.loads(text[len(PREFIX):])
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


def record(outcome: Outcome, event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "begin":
        outcome.begin = event
    elif kind == "unavailable":
        outcome.unavailable = str(event.get("reason") or "the worker said it cannot run (no reason given)")
    elif kind == "start" and isinstance(event.get("test"), str):
        outcome.running = event["test"]
    elif kind == "result" and isinstance(event.get("test"), str):
        outcome.results[event["test"]] = event
        if outcome.running == event["test"]:
            outcome.running = None
    elif kind == "end":
        outcome.ended = True
    else:
        outcome.stray_lines += 1


def run_programs(programs: Mapping[str, Program], limit_s: float) -> dict[str, Outcome]:
    """Start every program at once; read them until each has closed its pipes or `limit_s` has passed, then
    kill the group of each one still running and read what it had written. One Outcome per label."""
    began = time.monotonic()
    outcomes = {label: Outcome() for label in programs}
    selector = selectors.DefaultSelector()
    readers: list[Reader] = []
    for label, program in programs.items():
        proc = start(program.argv, env=program.env)
        if proc is None:
            outcomes[label].unavailable = f"the worker could not be started: {' '.join(program.argv[:3])} ..."
            continue
        reader = Reader(label, proc, outcomes[label])
        readers.append(reader)
        for stream, is_stdout in ((proc.stdout, True), (proc.stderr, False)):
            fd = stream.fileno()
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, (reader, is_stdout))
    ends, killed = began + limit_s, False
    while any(r.open for r in readers):
        left = ends - time.monotonic()
        if left <= 0:
            if killed:
                break  # the grace after the kill is over too
            for reader in readers:
                if reader.open:
                    kill_group(reader.proc)
                    reader.outcome.timed_out = True
            ends, killed = time.monotonic() + KILL_GRACE_S, True
            continue
        for key, _ in selector.select(timeout=min(left, 1.0)):
            read_ready(selector, key)
    selector.close()
    for reader in readers:
        settle(reader, began)
    return outcomes


def read_ready(selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
    reader, is_stdout = key.data
    try:
        data = os.read(key.fd, READ_CHUNK_B)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if data:
        (reader.take_stdout if is_stdout else reader.take_stderr)(data)
        return
    selector.unregister(key.fd)
    reader.open -= 1
    if is_stdout:
        reader.finish_stdout()


def settle(reader: Reader, began: float) -> None:
    """Reap a program whose pipes closed (process.finish also forgets it); one still holding them is stuck."""
    outcome = reader.outcome
    outcome.seconds = round(time.monotonic() - began, 1)
    if reader.open:
        reader.finish_stdout()
        outcome.stuck = True
        return
    try:
        reader.proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # closed its pipes but lives on: killed with its group
        kill_group(reader.proc)
        outcome.timed_out = True
        try:
            reader.proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            outcome.stuck = True
            return
    done = finish(reader.proc, KILL_GRACE_S)
    outcome.exit = None if outcome.timed_out else done.returncode
