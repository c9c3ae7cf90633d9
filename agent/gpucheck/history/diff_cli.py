"""`gpucheck diff`: its command line (history/diff.py compares). Bad input is one line and exit 3."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli_types import Bounded, fail
from ..files import read_file
from ..model import EXIT_OK
from .diff import DEFAULT_NOISE_PCT, DiffError, diff_runs, render_json, render_text

MAX_REPORT_B = 256 * 1024 * 1024  # `gpucheck diff` reads at most this of a report: 256 nodes' report.json is ~50 MiB
noise_pct = Bounded(float, "a percentage", 0, 1000, limits="percent, more than 0, at most 1000")
DIFF_EPILOG = """\
exit codes: 0 nothing got worse, 1 a check got worse to warn or a figure dropped beyond --noise, 2 a check (a
node's or, of two cluster reports, the cluster's own) got worse to fail or error, or a node with a report before
has none after, 3 could not compare (a file that is not a gpucheck report). An internal error is one line and
exit 3; GPUCHECK_DEBUG=1 adds its traceback.

examples:
  gpucheck diff before.json after.json   one node before and after an upgrade (playbooks/upgrade.yml runs it)
  gpucheck diff --noise 2 old/report.json new/report.json
                                         two cluster runs, node by node; figures moved by more than 2 %
"""


def add_parser(sub: Any) -> None:
    diff = sub.add_parser("diff", help="what changed between two runs: versions, verdicts, figures",
                          epilog=DIFF_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                          description="Compare two runs of a node (`gpucheck node --format json` reports) or of a "
                                      "cluster (two cluster reports' report.json, node by node, then the cluster's "
                                      "own checks): the versions "
                                      "that changed, the checks whose verdict moved, and the figures (TFLOP/s, "
                                      "GB/s, Gb/s, per second) that moved by more than --noise.")
    diff.add_argument("before", metavar="BEFORE", help="the earlier run's report")
    diff.add_argument("after", metavar="AFTER", help="the later run's report")
    diff.add_argument("--noise", type=noise_pct, default=DEFAULT_NOISE_PCT, metavar="PCT",
                      help="a figure within this many percent of its earlier value has not moved "
                           "(default: %(default)g)")
    diff.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")


def load_report(path: str) -> Any:
    """A report file's JSON, or one line and exit 3 saying why it is none."""
    try:
        data = read_file(path, MAX_REPORT_B)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    if len(data) > MAX_REPORT_B:
        fail(f"{path}: more than {MAX_REPORT_B // 2**20} MiB, not a gpucheck report")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        fail(f"{path}: not JSON ({exc}): give reports written with --format json, or a cluster report's "
             "report.json")


def run(args: argparse.Namespace) -> int:
    docs = [load_report(path) for path in (args.before, args.after)]
    try:
        diffs = diff_runs(docs[0], docs[1], args.before, args.after, args.noise)
    except DiffError as exc:
        fail(str(exc))
    sys.stdout.write((render_json if args.format == "json" else render_text)(diffs, args.noise))
    return max((d.exit_code() for d in diffs), default=EXIT_OK)
