"""The `gpucheck` command: one parser for the node-side commands (gpucheck.cli) and `gpucheck cluster`
(gpucheck.cluster.cli). The only module that knows both."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from . import __version__
from .cli_types import EXIT_CODES_HELP, Parser, guarded
from .model import EXIT_UNKNOWN

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
  gpucheck verify after.json --driver '550.*'   does a saved report pass, on that driver
  gpucheck history show node07           node07's figures over its last runs (every cluster run is recorded)
  gpucheck history collect -i inventory/prod   every node's kept reports (health checks, scheduled checks)
  gpucheck rma 3                         GPU3's evidence for the vendor in one archive: identity, failures, Xids
  gpucheck schedule                      daily light checks and a weekly burn-in on idle nodes, as Slurm jobs
  gpucheck slurm show gpu-a17            who holds the node in Slurm (an admin, a gpucheck check, the upgrade)
  gpucheck watch --slurm                 follow the kernel log and NVML; drain this node as a fault appears

Each command's description, options, exit codes and examples: gpucheck COMMAND --help
"""


Handlers = dict[str, Callable[[argparse.Namespace], int]]


# Each group of commands: its parsers and handlers, imported only when a command line names one of them (or for
# `gpucheck --help`): a Slurm health check runs `gpucheck node` every few minutes on every node, and importing every
# other command's modules cost it 0.045 CPU-s of its 0.33 (measured, the fake DGX H100).
def _node_side(sub: Any) -> Handlers:
    from . import cli

    cli.add_parsers(sub)
    return cli.HANDLERS


def _cluster(sub: Any) -> Handlers:
    from .cluster import cli as cluster_cli

    cluster_cli.add_parser(sub)
    return {"cluster": cluster_cli.run}


def _diff(sub: Any) -> Handlers:
    from .history import diff_cli, verify_cli

    diff_cli.add_parser(sub)
    verify_cli.add_parser(sub)
    return {"diff": diff_cli.run, "verify": verify_cli.run}


def _history(sub: Any) -> Handlers:
    from .cluster import collect_cli
    from .history import history_cli

    collect_cli.add_parser(*history_cli.add_parser(sub))
    return {"history": lambda args: (collect_cli.run if args.verb == "collect" else history_cli.run)(args)}


def _kept(sub: Any) -> Handlers:
    from . import kept_cli

    kept_cli.add_parser(sub)
    return {"kept": kept_cli.run}


def _rma(sub: Any) -> Handlers:
    from .rma import rma_cli

    rma_cli.add_parser(sub)
    return {"rma": rma_cli.run}


def _slurm(sub: Any) -> Handlers:
    from . import slurm_cli

    slurm_cli.add_parser(sub)
    return {"slurm": slurm_cli.run}


def _watch(sub: Any) -> Handlers:
    from .watch import watch_cli

    watch_cli.add_parser(sub)
    return {"watch": watch_cli.run}


def _schedule(sub: Any) -> Handlers:
    from .schedule import schedule_cli

    schedule_cli.add_parser(sub)
    return {"schedule": schedule_cli.cmd_schedule}


# In the order `gpucheck --help` lists them.
COMMANDS: list[tuple[tuple[str, ...], Callable[[Any], Handlers]]] = [
    (("node", "parse", "profiles", "checks", "net"), _node_side), (("cluster",), _cluster), (("diff", "verify"), _diff),
    (("history",), _history), (("kept",), _kept), (("rma",), _rma), (("schedule",), _schedule),
    (("slurm",), _slurm), (("watch",), _watch)]


def _build(command: str | None) -> tuple[Parser, Handlers]:
    """The parser of every command, or only of the group that has `command`."""
    parser = Parser(prog="gpucheck", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpucheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    handlers: Handlers = {}
    for names, add in COMMANDS:
        if command is None or command in names:
            handlers.update(add(sub))
    return parser, handlers


def build_parser() -> Parser:
    """Every command's parser."""
    return _build(None)[0]


def dispatch(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    named = argv[0] if argv and any(argv[0] in names for names, _ in COMMANDS) else None
    parser, handlers = _build(named)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_UNKNOWN
    return handlers[args.command](args)


def main(argv: list[str] | None = None) -> int:
    """Whatever happens, one of the exit codes 0-3; anything unexpected is one line and exit 3."""
    return guarded(lambda: dispatch(argv))


if __name__ == "__main__":
    sys.exit(main())
