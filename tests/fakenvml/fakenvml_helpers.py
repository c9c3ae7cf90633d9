"""Helpers shared by the fake NVML tests (a unique module name: ``conftest`` is shared by all test dirs)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.fakenvml import env_for

PROBE = Path(__file__).resolve().parent / "probe.py"


@dataclass
class ProbeResult:
    """Answers of one probe run: ``answers[(gpu, key)] = ("value", V) | ("error", CLASS)``."""

    lines: list[dict[str, Any]]
    stderr: str
    answers: dict[tuple[int | None, str], tuple[str, Any]] = field(default_factory=dict)
    done: bool = False

    def __post_init__(self) -> None:
        for line in self.lines:
            if line.get("done"):
                self.done = True
            elif "error" in line:
                self.answers[(line["gpu"], line["key"])] = ("error", line["error"])
            else:
                self.answers[(line["gpu"], line["key"])] = ("value", line["value"])

    def value(self, key: str, gpu: int | None = None) -> Any:
        kind, val = self.answers[(gpu, key)]
        assert kind == "value", f"{key} on GPU {gpu} raised {val}"
        return val

    def error(self, key: str, gpu: int | None = None) -> str:
        kind, val = self.answers[(gpu, key)]
        assert kind == "error", f"{key} on GPU {gpu} answered {val!r}, expected an error"
        return val


def parse_lines(stdout: str | bytes | None) -> list[dict[str, Any]]:
    if isinstance(stdout, bytes):
        stdout = stdout.decode()
    return [json.loads(line) for line in (stdout or "").splitlines() if line.strip()]


RATE_LIMIT_S = 0.05  # the library stats the file at most this often
DEADLINE_S = 2.0

# One process, one nvmlInit: answers each expression read on stdin with one JSON line.
WATCHER = r"""
import json, sys
import pynvml as nv
nv.nvmlInit()
h = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
def ask(fn, *args):
    try:
        return fn(*args)
    except nv.NVMLError as e:
        return type(e).__name__
ecc = lambda i: ask(nv.nvmlDeviceGetTotalEccErrors, h[i], nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
temp = lambda i: ask(nv.nvmlDeviceGetTemperature, h[i], nv.NVML_TEMPERATURE_GPU)
reasons = lambda i: ask(nv.nvmlDeviceGetCurrentClocksEventReasons, h[i])
name = lambda i: ask(nv.nvmlDeviceGetName, h[i])
count = lambda: ask(nv.nvmlDeviceGetCount)
handle = lambda i: ask(lambda: nv.nvmlDeviceGetHandleByIndex(i) and True)
print(json.dumps(len(h)), flush=True)
for line in sys.stdin:
    print(json.dumps(eval(line)), flush=True)
"""


class Watcher:
    """The watcher process: ``ask(expr)`` evaluates one expression in it, ``until(expr, value)`` polls."""

    def __init__(self, libdir: Path, scenario: Path, tmp_path: Path) -> None:
        self.trace = tmp_path / "trace"
        self.stderr_path = tmp_path / "watcher.stderr"
        with self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", WATCHER], env=env_for(scenario, libdir, self.trace),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.gpus = self._answer()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line)

    def _answer(self) -> Any:
        try:
            return json.loads(self.lines.get(timeout=10))
        except queue.Empty:
            raise AssertionError(f"the watcher did not answer; stderr:\n{self.stderr()}") from None

    def ask(self, expr: str) -> Any:
        assert self.proc.stdin
        self.proc.stdin.write(expr + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def until(self, expr: str, expected: Any) -> float:
        """Seconds until ``expr`` answers ``expected`` (fails after DEADLINE_S)."""
        start = time.monotonic()
        while (got := self.ask(expr)) != expected:
            assert time.monotonic() - start < DEADLINE_S, f"{expr} still answers {got!r}, not {expected!r}"
            time.sleep(0.005)
        return time.monotonic() - start

    def until_said(self, text: str, times: int) -> None:
        """Make calls (each may check the file) until stderr holds `text` `times` times (fails after DEADLINE_S)."""
        start = time.monotonic()
        while (said := self.stderr().count(text)) < times:
            self.ask("count()")
            assert time.monotonic() - start < DEADLINE_S, f"stderr says {text!r} {said} times, not {times}"
            time.sleep(0.005)

    def traced(self, line: str) -> bool:
        return self.trace.is_file() and line in self.trace.read_text().splitlines()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
