"""`gpucheck kept`: the reports this node keeps (node/kept_reports.py, docs/history.md), oldest first: what an admin
node's `gpucheck history collect` reads over SSH. Read-only; bad input is one line and exit 3."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .cli_types import fail, whole_number
from .model import EXIT_OK
from .node import kept_reports

EPILOG = """\
A name is the report's start time (UTC), its verdict, and -full for a run of active checks:
20261127T050000Z-fail-full.json. Names sort by time, so --after NAME continues where an earlier read ended.

exit codes: 0 listed (nothing kept is an empty list); 3 bad input, or the folder cannot be read.

examples:
  gpucheck kept                                         the names, oldest first
  gpucheck kept --json --after 20261127T050000Z-pass.json --max 50   the next 50, whole, one JSON a line
"""


def kept_name(text: str) -> str:
    if not kept_reports.NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a kept report's name (20261127T050000Z-pass.json)")
    return text


def add_parser(sub: Any) -> None:
    kept = sub.add_parser("kept", help="the reports this node keeps (what `gpucheck history collect` reads)",
                          description="The node's kept reports: every run that did not pass, every run of active "
                                      "checks, the latest passive pass; what Slurm's health check and the scheduled "
                                      "checks saw between two cluster runs.",
                          epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    kept.add_argument("--after", type=kept_name, metavar="NAME", help="only the reports kept after this one")
    kept.add_argument("--max", type=whole_number, metavar="N", help="at most N of them, the oldest first")
    kept.add_argument("--json", action="store_true", help='each report whole, one JSON object a line: {"name": ..., '
                      '"report": {...}}, or {"name": ..., "error": "why"} for one that cannot be read')
    kept.add_argument("--reports", type=Path, metavar="DIR", help="the folder (default: /var/lib/gpucheck/reports, "
                      "or $GPUCHECK_STATE_DIR/reports)")


def run(args: argparse.Namespace) -> int:
    folder = args.reports or kept_reports.folder()
    try:
        names = kept_reports.listing(folder, args.after)[:args.max]
    except FileNotFoundError:
        names = []  # no run has kept anything here yet
    except OSError as exc:
        fail(f"cannot read {folder}: {exc.strerror or exc}")
    for name in names:
        if not args.json:
            print(name)
            continue
        try:
            entry = {"name": name, "report": kept_reports.read(folder / name)}
        except (OSError, ValueError, RecursionError) as exc:
            entry = {"name": name, "error": getattr(exc, "strerror", None) or str(exc) or type(exc).__name__}
        print(json.dumps(entry, separators=(",", ":")))
    return EXIT_OK
