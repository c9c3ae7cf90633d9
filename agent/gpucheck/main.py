"""The `gpucheck` command: one parser for the node-side commands (gpucheck.cli) and `gpucheck cluster`
(gpucheck.cluster.cli). The only module that knows both."""

from __future__ import annotations

import argparse
import sys

from . import __version__, cli, kept_cli
from .cli_types import EXIT_CODES_HELP, Parser, guarded
from .cluster import cli as cluster_cli
from .cluster import collect_cli
from .history import diff_cli, history_cli
from .model import EXIT_UNKNOWN
from .rma import rma_cli
from .schedule import schedule_cli

DESCRIPTION = "Prove that GPU servers are ready for distributed training."
# `gpucheck --help` only: each command's --help has its own description, options, exit codes and examples.
EPILOG = EXIT_CODES_HELP + """

examples:
  gpucheck node                          check this machine with the auto-selected profile
  gpucheck node --full                   also run the GPU burn-in and the benchmarks (NCCL, ib_write_bw)
  gpucheck node --slurm                  as Slurm's HealthCheckProgram, prolog or epilog
  gpucheck cluster -i inventory/prod     every node of the inventory, then the cluster-wide stages; a report
  gpucheck parse nccl-tests all_reduce.log    read a log you already have
  gpucheck profiles                      which profiles exist, which one this node gets
  gpucheck checks                        every check id and what it verifies
  gpucheck diff before.json after.json   what an upgrade changed: versions, verdicts, figures
  gpucheck history show node07           node07's figures over its last runs (every cluster run is recorded)
  gpucheck history collect -i inventory/prod   every node's kept reports (health checks, scheduled checks)
  gpucheck rma 3                         GPU3's evidence for the vendor in one archive: identity, failures, Xids
  gpucheck schedule                      daily light checks and a weekly burn-in on idle nodes, as Slurm jobs

Each command's description, options, exit codes and examples: gpucheck COMMAND --help
"""


def build_parser() -> Parser:
    parser = Parser(prog="gpucheck", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpucheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    cli.add_parsers(sub)
    cluster_cli.add_parser(sub)
    diff_cli.add_parser(sub)
    collect_cli.add_parser(*history_cli.add_parser(sub))
    kept_cli.add_parser(sub)
    rma_cli.add_parser(sub)
    schedule_cli.add_parser(sub)
    return parser


def dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_UNKNOWN
    if args.command == "history" and args.verb == "collect":
        return collect_cli.run(args)
    handlers = {**cli.HANDLERS, "cluster": cluster_cli.run, "diff": diff_cli.run, "history": history_cli.run,
                "kept": kept_cli.run, "rma": rma_cli.run, "schedule": schedule_cli.cmd_schedule}
    return handlers[args.command](args)


def main(argv: list[str] | None = None) -> int:
    """Whatever happens, one of the exit codes 0-3; anything unexpected is one line and exit 3."""
    return guarded(lambda: dispatch(argv))


if __name__ == "__main__":
    sys.exit(main())
