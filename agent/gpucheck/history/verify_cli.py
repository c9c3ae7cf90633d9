"""`gpucheck verify REPORT --driver VERSION`: does a node report (gpucheck node --format json) pass, on this driver?
The rolling upgrade's last word on a node (roles/gpu_upgrade, verify.yml): the node's text stays in this program's
output, never in an Ansible template."""

from __future__ import annotations

import argparse
import fnmatch
from typing import Any

from ..cli_types import fail
from ..model import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN
from ..redact import for_terminal
from .diff_cli import load_report

EPILOG = """\
exit codes: 0 the report passes (warnings allowed) and, with --driver, NVML's driver matches; 2 it does not (one
line says why: the exit code, the driver, the checks that failed or could not judge); 3 bad input, or not a node
report.

examples:
  gpucheck verify /var/lib/gpucheck/upgrade/after.json --driver '550.163.01*'
"""
WHY_MAX = 600  # the failed checks' reasons, as much as a drain reason or a task's message can show


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser("verify", help="does a saved node report pass, on the driver you expect",
                         description="Whether a node report (gpucheck node --format json) passes: no check failed "
                                     "or could not judge, and with --driver, NVML reported that driver version.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("report", metavar="REPORT", help="a node report's JSON file")
    cmd.add_argument("--driver", metavar="VERSION", help="the driver NVML must report; * matches any characters "
                                                         "(550.163.01*)")


def run(args: argparse.Namespace) -> int:
    doc = load_report(args.report)
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list) or not isinstance(doc.get("facts", {}), dict):
        fail(f"{args.report}: not a node report (no results): give gpucheck node's --format json")
    bad = [r for r in results if isinstance(r, dict) and r.get("status") in ("fail", "error")]
    code = EXIT_FAIL if any(r.get("status") == "fail" for r in bad) else EXIT_UNKNOWN if bad else EXIT_OK
    driver = str(doc.get("facts", {}).get("driver_version") or "")
    wrong_driver = args.driver is not None and not fnmatch.fnmatchcase(driver, args.driver)
    if code == EXIT_OK and not wrong_driver:
        print(for_terminal(f"{args.report}: passes" + (f" on driver {driver}" if args.driver else "")))
        return EXIT_OK
    why = "; ".join(" ".join(f"{r.get('check')} {r.get('reason', '')}".split()) for r in bad)
    said = f"gpucheck node exits {code}, NVML driver {driver or '?'}"
    if args.driver is not None:
        said += f" (wanted {args.driver})"
    if why:
        said += ": " + (why if len(why) <= WHY_MAX else why[:WHY_MAX - 1] + "…")
    print(for_terminal(said))
    return EXIT_FAIL
