"""ansible-playbook against the lab inventory, for `build` and `demo`: every line of its output goes to a log
file as it comes (line by line, so `tail -f LOG` follows it and a killed run keeps all it said), and the
terminal gets what a person watches for: each play as it starts, each task that failed (with its output),
the recap, and, when it has been quiet for 30 s, which task is running and for how long. A failure Ansible
was told to ignore (`...ignoring`) stays in the log only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from lab import config
from lab.errors import LabError
from lab.progress import fmt_duration

TASK_START = ("TASK [", "RUNNING HANDLER [")
PLAY_START = ("PLAY [", "PLAY RECAP")
FAILED = re.compile(r"^(fatal: |failed: |\[ERROR\]|ERROR!)|UNREACHABLE!")
RECAP_LINE = re.compile(r"^\S+\s+: ok=\d+")
IGNORED = "...ignoring"
INDENT = "    "
TASK_NAME = re.compile(r"^((?:TASK|RUNNING HANDLER) \[[^\]]*\])")
HEARTBEAT_S = 30.0  # the longest the terminal stays quiet while a playbook runs


def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    found = str(beside) if beside.is_file() else shutil.which("ansible-playbook")
    if not found:
        raise LabError("ansible-playbook is missing: install ansible-core (pip install ansible-core)")
    return found


def playbook_command(playbook: Path, extra_vars: dict | None = None) -> list[str]:
    """The ansible-playbook argv against the lab inventory (run in the playbook's directory: its ansible.cfg)."""
    cmd = [ansible_playbook(), "-i", str(config.INVENTORY), str(playbook)]
    if extra_vars:
        cmd += ["--extra-vars", json.dumps(extra_vars)]
    return cmd


def shown(lines: Iterable[str]) -> Iterator[str]:
    """Of ansible-playbook's output lines (each ending in a newline), those the terminal shows: play headers,
    the recap, and each task block (its header and its lines) that holds a failure not ignored; no blank line."""
    block: list[str] = []

    def flush() -> Iterator[str]:
        if any(FAILED.search(line) for line in block) and not any(line.strip() == IGNORED for line in block):
            yield from block
        block.clear()

    for line in lines:
        if not line.strip():
            continue
        if line.startswith(TASK_START + PLAY_START):
            yield from flush()
        if line.startswith(PLAY_START) or RECAP_LINE.match(line):
            yield line
        else:
            block.append(line)
    yield from flush()


class Heartbeat:
    """While the terminal has had nothing for `every` seconds (a task that compiles Horovod for 20 minutes says
    nothing until it ends), one line: the task running and for how long, so a person sees it is alive."""

    def __init__(self, terminal: TextIO, every: float, log: Path):
        self.terminal, self.every, self.log = terminal, every, log
        self.lock = threading.Lock()
        self.began = self.said_at = self.task_since = time.monotonic()
        self.task = "the playbook's start"
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="playbook-heartbeat", daemon=True)

    def saw(self, line: str) -> None:
        started = TASK_NAME.match(line)
        if started:
            with self.lock:
                self.task, self.task_since = started.group(1), time.monotonic()

    def say(self, text: str) -> None:
        with self.lock:
            self.terminal.write(text)
            self.terminal.flush()
            self.said_at = time.monotonic()

    def _watch(self) -> None:
        while not self.done.wait(max(0.0, self.said_at + self.every - time.monotonic())):
            now = time.monotonic()
            if now - self.said_at >= self.every:
                self.say(f"{INDENT}... still running {self.task}: {fmt_duration(now - self.task_since)} on it, "
                         f"{fmt_duration(now - self.began)} in all (every line: tail -f {self.log})\n")

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()


def run_playbook(playbook: Path, log: Path, extra_vars: dict | None = None, terminal: TextIO | None = None,
                 heartbeat_s: float = HEARTBEAT_S) -> int:
    """Run it; every output line into `log` as it comes, `shown` lines on the terminal (stderr), and a line every
    `heartbeat_s` that the terminal is otherwise quiet (Heartbeat). Its exit code."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
    out_terminal = terminal or sys.stderr
    heartbeat = Heartbeat(out_terminal, heartbeat_s, log)

    def logged(source: Iterable[str], out: TextIO) -> Iterator[str]:
        for line in source:
            out.write(line)  # line-buffered file: on disk before the next line is read
            heartbeat.saw(line)
            yield line

    with open(log, "w", buffering=1) as out, subprocess.Popen(
        playbook_command(playbook, extra_vars), cwd=playbook.parent, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env,
    ) as proc, heartbeat:
        assert proc.stdout is not None
        for line in shown(logged(proc.stdout, out)):
            heartbeat.say(INDENT + line)
        return proc.wait()
