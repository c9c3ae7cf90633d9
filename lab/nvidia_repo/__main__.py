"""``python -m lab.nvidia_repo build DIR [--strict] [--key-home DIR]``: build the stand-in repository into DIR and
print its signing key's fingerprint and the sources.list line for it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .build import build
from .model import NvidiaRepoError
from .standin_sources import DEFAULT_CACHE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.nvidia_repo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    make = sub.add_parser("build", help="build the repositories into DIR (emptied first)")
    make.add_argument("dir", type=Path)
    make.add_argument("--strict", action="store_true",
                      help="leave out what NVIDIA's debian12 repository is known not to carry")
    make.add_argument("--key-home", type=Path, default=DEFAULT_CACHE / "gnupg",
                      help="GnuPG home that keeps the signing key, so the fingerprint stays the same "
                           "(default %(default)s)")
    args = parser.parse_args(argv)
    try:
        repo = build(args.dir, strict=args.strict, key_home=args.key_home)
    except NvidiaRepoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print(f"{len(repo.packages)} packages in {repo.nvidia}"
          + (f" ({len(repo.left_out)} left out: not in NVIDIA's debian12 repository)" if repo.left_out else ""))
    print(f"fingerprint {repo.fingerprint}")
    print(repo.source_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
