"""`gpucheck slurm`: who holds a node and what gpucheck may do with it (drain_rule's table), from any Slurm client:
`show` a node's holder, print the `table`, `apply` a verdict as one of the six paths. The rolling upgrade drains,
resumes and reads nodes only through it (roles/gpu_upgrade), so its Slurm decisions are the table's too."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import drain_rule, slurm
from .cli_types import fail
from .model import EXIT_OK, EXIT_UNKNOWN
from .redact import for_terminal

EPILOG = """\
A node is held by whoever took it out of service: an admin (their own drain reason, DOWN, FAIL, MAINT, a pending
reboot), a passive check of gpucheck's, an active one (a scheduled check, gpucheck cluster --drain), the rolling
upgrade, or nobody. Each path may drain, resume or leave a node by who holds it: `gpucheck slurm table` (and
docs/slurm.md) has every cell. NODE is one NodeName, never a hostlist.

exit codes: 0 shown, or the verdict applied (the line says what was done, "left ... as it is" included);
3 bad input, or Slurm could not be asked or refused (one line).

examples:
  gpucheck slurm show gpu-a17                   state, reason and holder
  gpucheck slurm show gpu-a17 --format json     {"node", "state", "reason", "holder"}
  gpucheck slurm table                          what each path may do, by holder
  gpucheck slurm apply gpu-a17 --as upgrade --fail "to tf-horovod-r550 (driver 550.163.01)"
  gpucheck slurm apply gpu-a17 --as upgrade --pass      resume it if the upgrade (or a passive check) drained it
"""


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser("slurm", help="who holds a Slurm node, and apply a verdict by gpucheck's drain table",
                         description="Who holds a Slurm node (an admin, a gpucheck check, the rolling upgrade, "
                                     "nobody) and what each of gpucheck's paths may do with it.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = cmd.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser("show", help="a node's state, reason and holder")
    show.add_argument("node", metavar="NODE")
    show.add_argument("--format", choices=("text", "json"), default="text")
    verbs.add_parser("table", help="what each path may do with a node, by who holds it (Markdown)")
    apply = verbs.add_parser("apply", help="drain, resume or leave NODE as PATH may, by the table")
    apply.add_argument("node", metavar="NODE")
    apply.add_argument("--as", dest="path", required=True, choices=tuple(drain_rule.PATHS),
                       help="the path whose column applies")
    verdict = apply.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--fail", metavar="WHY", help="a failure: drain with the path's reason head and WHY")
    verdict.add_argument("--pass", dest="passed", action="store_true", help="a pass: resume what the path may")
    verdict.add_argument("--error", action="store_true", help="could not judge (changes nothing, says why)")
    apply.add_argument("--scheduled", metavar="KIND", default="check",
                       help="with --as scheduled: its kind, in the reason (default: check)")
    apply.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    if args.verb == "table":
        print(drain_rule.render_table(), end="")
        return EXIT_OK
    if args.verb == "apply" and args.fail is not None and not args.fail.strip():
        fail("--fail needs a reason (WHY): it is the drain reason's text")
    try:
        current = slurm.show_node(args.node)
        if args.verb == "show":
            holder = drain_rule.holder_of(current)
            return _say(args, {"node": current.name, "state": current.state, "reason": current.reason,
                               "holder": holder},
                        f"{current.name}: {current.state}, held by {holder}"
                        + (f" ({current.reason})" if current.reason else ""))
        verdict = "fail" if args.fail is not None else "pass" if args.passed else "error"
        action = drain_rule.decide(current, args.path, verdict, [args.fail or ""], args.scheduled)
        drain_rule.apply(action)
    except slurm.SlurmError as exc:
        print(f"gpucheck: slurm: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    return _say(args, {"node": action.node, "holder": action.holder, "action": action.verb, "text": action.describe()},
                action.describe())


def _say(args: argparse.Namespace, doc: dict[str, str], line: str) -> int:
    # A reason may carry a node's own text (its findings): escaped for the terminal, strict JSON for a program.
    print(json.dumps(doc) if args.format == "json" else for_terminal(" ".join(line.split())))
    return EXIT_OK
