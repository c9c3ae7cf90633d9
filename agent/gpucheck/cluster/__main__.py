"""`python -m gpucheck.cluster ARGS`: the same as `gpucheck cluster ARGS`, usable before (and apart
from) the main command line."""

from __future__ import annotations

import sys

from ..cli_types import Parser
from ..model import EXIT_UNKNOWN
from .cli import add_parser, run


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="gpucheck")
    add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
    args = parser.parse_args(["cluster", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except KeyboardInterrupt:
        print("gpucheck: interrupted", file=sys.stderr)
        return EXIT_UNKNOWN


if __name__ == "__main__":
    sys.exit(main())
