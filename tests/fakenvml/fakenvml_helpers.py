"""Helpers shared by the fake NVML tests (a unique module name: ``conftest`` is shared by all test dirs)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
