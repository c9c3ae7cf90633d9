"""``python -m lab.fakenvml build`` | ``python -m lab.fakenvml check SCENARIO...``"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from . import FakeNvmlError, build_library

# Loads the library by path (not through pynvml) and reports nvmlInit_v2's return code.
_INIT = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).nvmlInit_v2())"


def check(libdir: Path, scenario: Path) -> bool:
    env = dict(os.environ, FAKENVML_SCENARIO=str(scenario))
    env.pop("FAKENVML_TRACE", None)
    proc = subprocess.run([sys.executable, "-c", _INIT, str(libdir / "libnvidia-ml.so.1")],
                          env=env, capture_output=True, text=True, timeout=30, check=False)
    ok = proc.returncode == 0 and "rejected" not in proc.stderr
    print(f"{'ok  ' if ok else 'BAD '} {scenario} (nvmlInit_v2 -> {proc.stdout.strip() or '?'})")
    if not ok:
        sys.stdout.write(proc.stderr)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.fakenvml", description=__doc__)
    parser.add_argument("--cache", type=Path, help="build cache (default ~/.cache/gpucheck/fakenvml)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="compile the library; print the directory that holds it")
    chk = sub.add_parser("check", help="load scenario files through the library; report errors")
    chk.add_argument("scenarios", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        libdir = build_library(args.cache)
    except FakeNvmlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if args.cmd == "build":
        print(libdir)
        return 0
    results = [check(libdir, s.resolve()) for s in args.scenarios]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
