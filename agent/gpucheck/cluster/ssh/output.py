"""What a remote command printed, kept within bounds: the first HEAD_CHARS and the last `limit`
characters of each stream, with one line in between saying how much was cut.

Fabric's runner (invoke's) keeps all of a command's output and joins the whole of it again for every
1000 bytes read (its auto-responder), so a node that prints a flood costs the controller memory and
time that grow with the square of it. BoundedRemote reads each stream once, keeps a bounded head
and tail, and runs no responder (we never answer prompts: commands run without a terminal and
without stdin). The node's JSON report is the last thing its agent prints, so the tail keeps it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import IO, Any

from fabric.runners import Remote

from .result import CUT_NOTE

HEAD_CHARS = 64 * 1024
STDOUT_TAIL_CHARS = 16 * 1024 * 1024  # a node report, --full on 8 GPUs, is well under 1 MiB
STDERR_TAIL_CHARS = 1024 * 1024


class Bounded:
    """Chunks of text in, at most head + tail (plus the cut line) out; linear in what goes in."""

    def __init__(self, tail_chars: int, head_chars: int = HEAD_CHARS):
        self.head_chars, self.tail_chars = head_chars, tail_chars
        self.head: list[str] = []
        self.head_len = 0
        self.tail: deque[str] = deque()
        self.tail_len = 0
        self.cut = 0

    def add(self, data: str) -> None:
        if self.head_len < self.head_chars:
            room = self.head_chars - self.head_len
            self.head.append(data[:room])
            self.head_len += min(room, len(data))
            data = data[room:]
            if not data:
                return
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_chars:
            dropped = self.tail.popleft()
            self.tail_len -= len(dropped)
            self.cut += len(dropped)

    def parts(self) -> list[str]:
        note = [CUT_NOTE.format(self.cut)] if self.cut else []
        return [*self.head, *note, *self.tail]

    def text(self) -> str:
        return "".join(self.parts())


class BoundedRemote(Remote):
    """Fabric's Remote runner, its streams read through Bounded (see the module's docstring)."""

    def handle_stdout(self, buffer_: list[str], hide: bool, output: IO[str]) -> None:
        self.keep(buffer_, self.read_proc_stdout, STDOUT_TAIL_CHARS)

    def handle_stderr(self, buffer_: list[str], hide: bool, output: IO[str]) -> None:
        self.keep(buffer_, self.read_proc_stderr, STDERR_TAIL_CHARS)

    def keep(self, buffer_: list[str], reader: Callable[[int], Any], tail_chars: int) -> None:
        """Read the stream to its end; buffer_ (read by the runner once this thread has ended) gets
        what is kept, also when the read ends in an error (a closed channel: a timeout, Ctrl-C)."""
        kept = Bounded(tail_chars)
        try:
            for data in self.read_proc_output(reader):
                kept.add(data)
        finally:
            buffer_.extend(kept.parts())
