"""What one remote command gave (`Remote`: its output, exit status, or why it did not run to its end), and
the bounded tail of its output that evidence carries. Made by the SSH layer (client.py, background.py) and by
the Slurm jobs (srun.py); read by every stage."""

from __future__ import annotations

import re
from dataclasses import dataclass

TAIL_CHARS = 4000
# The line put where a command's output was cut to its head and tail (output.py), and how to find it again.
CUT_NOTE = "\n[gpucheck: {} characters of output cut here]\n"
CUT = re.compile(r"\[gpucheck: (\d+) characters of output cut here\]")
TIMEOUT_EXITS = (124, 137)  # what `limited`'s coreutils timeout exits with: it sent TERM, then KILL


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def banner_lines(text: str) -> list[str]:
    """What OpenMPI-style output says went wrong: each line printed outside its `----` banners, and
    each banner's first line (its headline), in order; [] when the text has no banner."""
    lines = text.splitlines()
    if not any(line.startswith("-----") for line in lines):
        return []
    out: list[str] = []
    inside, headline = False, False
    for line in lines:
        if line.startswith("-----"):
            inside = not inside
            headline = inside
            continue
        if not line.strip():
            continue
        if headline or not inside:
            if not line.startswith("$ "):
                out.append(line.strip())
            headline = False
    return out


@dataclass
class Remote:
    """What one remote command gave. `error` says why it did not run to its end (connect failure,
    timeout); `exit` is its exit status when it ended."""

    host: str
    command: str
    stdout: str = ""
    stderr: str = ""
    exit: int | None = None
    error: str | None = None
    kind: str = ""  # when error: unreachable | auth | host-key | ssh | timeout | killed | copy
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit == 0

    @property
    def timed_out(self) -> bool:
        return self.kind == "timeout"

    @property
    def killed_on_node(self) -> bool:
        """The node's own `timeout` (see `limited`) ended the command."""
        return self.exit in TIMEOUT_EXITS

    @property
    def output(self) -> str:
        return "\n".join(x.rstrip() for x in (self.stdout, self.stderr) if x.strip())

    def describe(self) -> str:
        """One line: why this did not succeed (or 'exit 0')."""
        if self.error:
            return self.error
        banner = banner_lines(self.output)
        last = "; ".join(banner[:2]) if banner else next(
            (line.strip() for line in reversed(self.output.splitlines()) if any(c.isalnum() for c in line)), "")
        if self.exit == 127:
            return f"command not found (exit 127): {last[:200]}"
        return f"exit {self.exit}" + (f": {last[:200]}" if last else "")

    def evidence(self) -> str:
        head = f"$ {self.command}\n" if self.command else ""
        return head + tail(self.output)
