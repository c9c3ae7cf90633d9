"""The `gpucheck` command: one parser for the node-side commands (gpucheck.cli) and `gpucheck cluster`
(gpucheck.cluster.cli). The only module that knows both."""

from __future__ import annotations

import argparse
import sys

from . import __version__, cli
from .cli_types import Parser, guarded
from .cluster import cli as cluster_cli
from .model import EXIT_UNKNOWN


def build_parser() -> Parser:
    parser = Parser(prog="gpucheck", description="Prove that GPU servers are ready for distributed training.",
                    epilog=cli.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpucheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    cli.add_parsers(sub)
    cluster_cli.add_parser(sub)
    return parser


def dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_UNKNOWN
    handlers = {**cli.HANDLERS, "cluster": cluster_cli.run}
    return handlers[args.command](args)


def main(argv: list[str] | None = None) -> int:
    """Whatever happens, one of the exit codes 0-3; anything unexpected is one line and exit 3."""
    return guarded(lambda: dispatch(argv))


if __name__ == "__main__":
    sys.exit(main())
