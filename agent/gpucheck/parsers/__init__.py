"""Pure parsers: tool output text -> JSON-serialisable dict.

Each kind's module exposes `parse(text) -> dict` and raises ParseError (with a one-line reason)
when the text is not that tool's output. No I/O, no subprocesses: collection happens elsewhere.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Mapping

from ._common import ParseError

__all__ = ["PARSERS", "ParseError", "marked_records", "parse"]

# kind -> module. Modules are imported on first use: their regexes cost more at start-up than a
# node check takes, and a node run needs only two or three kinds.
MODULES = {
    "nccl-tests": "nccl_tests",
    "perftest": "perftest",
    "ibstat": "ibstat",
    "ib-counters": "ib_counters",
    "horovod-build": "horovod_build",
    "xid": "xid",
    "topo": "topo",
    "nccl-debug": "nccl_debug",
    "dcgmi": "dcgmi",
    "nvidia-smi-xml": "nvidia_smi_xml",
    "ldd": "ldd",
    "ldconfig": "ldconfig",
}


class _LazyParsers(Mapping[str, Callable[[str], dict]]):
    def __getitem__(self, kind: str) -> Callable[[str], dict]:
        return importlib.import_module(f"{__name__}.{MODULES[kind]}").parse

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)


PARSERS: Mapping[str, Callable[[str], dict]] = _LazyParsers()


def parse(kind: str, text: str) -> dict:
    """Parse `text` as the output of `kind`; ParseError (never KeyError) for an unknown kind."""
    if kind not in MODULES:
        raise ParseError(f"unknown kind {kind!r}; known: {', '.join(sorted(MODULES))}")
    return PARSERS[kind](text)


def marked_records(text: str, mark: str) -> Iterator[dict]:
    """The JSON objects of the lines that start with `mark` (what a probe run in another interpreter prints), in
    order; a marked line that is not a JSON object is passed over."""
    for line in text.splitlines():
        if line.startswith(mark):
            try:
                record = json.loads(line[len(mark):])
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
