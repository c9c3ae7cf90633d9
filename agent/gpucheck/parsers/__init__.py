"""Pure parsers: tool output text -> JSON-serialisable dict.

Each kind's module exposes `parse(text) -> dict` and raises ParseError (with a one-line reason)
when the text is not that tool's output. No I/O, no subprocesses: collection happens elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

from . import dcgmi, horovod_build, ibstat, nccl_debug, nccl_tests, nvidia_smi_xml, perftest, topo, xid
from ._common import ParseError

__all__ = ["PARSERS", "ParseError", "parse"]

PARSERS: dict[str, Callable[[str], dict]] = {
    "nccl-tests": nccl_tests.parse,
    "perftest": perftest.parse,
    "ibstat": ibstat.parse,
    "horovod-build": horovod_build.parse,
    "xid": xid.parse,
    "topo": topo.parse,
    "nccl-debug": nccl_debug.parse,
    "dcgmi": dcgmi.parse,
    "nvidia-smi-xml": nvidia_smi_xml.parse,
}


def parse(kind: str, text: str) -> dict:
    """Parse `text` as the output of `kind`; ParseError (never KeyError) for an unknown kind."""
    parser = PARSERS.get(kind)
    if parser is None:
        raise ParseError(f"unknown kind {kind!r}; known: {', '.join(sorted(PARSERS))}")
    return parser(text)
