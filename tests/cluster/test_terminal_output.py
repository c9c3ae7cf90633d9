"""What a node printed never reaches the admin's terminal raw: an escape sequence (a title change, a screen
clear), a carriage return that hides a line, a newline that forges one. They were printed as they came."""

from __future__ import annotations

import io
import json

from gpucheck.cluster.context import NodeOutcome
from gpucheck.cluster.progress import PlainProgress
from gpucheck.model import Status
from gpucheck.redact import for_terminal

HOSTILE = "exit 1: \x1b]0;owned\x07\x1b[2J\rnode02 pass all good\nnode03 pass\u2028 sshpass -p s3cret"


def test_the_progress_line_shows_a_nodes_control_characters_as_escapes() -> None:
    out = io.StringIO()
    PlainProgress(2, out).update(NodeOutcome("node01", Status.ERROR, f"agent crashed: {HOSTILE}", "agent-crashed",
                                             1.0))
    line = out.getvalue()
    assert line.count("\n") == 1 and line.endswith("\n")  # one line per host, however many the node printed
    assert not any(c in line[:-1] for c in "\x1b\x07\r\n\u2028")
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x0dnode02 pass all good\\nnode03 pass\\u2028" in line
    assert "s3cret" not in line and "[redacted]" in line


def test_a_node_reason_is_one_line_whatever_the_node_printed() -> None:
    from gpucheck.cluster import fanout

    crashed = fanout.interpret("node01", HOSTILE + "\n", "", 1, 1.0, 300)
    assert crashed.kind == "agent-crashed" and "\n" not in crashed.reason and "\x1b" not in crashed.reason
    report = {"exit_code": 2, "results": [{"check": "gpu.x\nnode09 pass\x1b[2J", "status": "fail"}]}
    judged = fanout.interpret("node01", json.dumps(report), "", 2, 1.0, 300)
    assert judged.reason == "1 fail: gpu.x\\nnode09 pass\\x1b[2J"


def test_a_summary_keeps_its_own_lines_and_escapes_the_rest() -> None:
    text = "node01 ERROR: " + HOSTILE + "\n2 nodes checked\n"
    shown = for_terminal(text, newlines=True)
    assert shown.splitlines()[-1] == "2 nodes checked"
    assert "\x1b" not in shown and "\r" not in shown and "\\x1b]0;owned" in shown
