"""`python -m gpucheck.cluster ARGS`: the same as `gpucheck cluster ARGS`, usable before (and apart
from) the main command line."""

from __future__ import annotations

import sys

from ..cli_types import Parser, guarded
from .cli import add_parser, run


def main(argv: list[str] | None = None) -> int:
    def command() -> int:
        parser = Parser(prog="gpucheck")
        add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
        return run(parser.parse_args(["cluster", *(sys.argv[1:] if argv is None else argv)]))

    return guarded(command)


if __name__ == "__main__":
    sys.exit(main())
