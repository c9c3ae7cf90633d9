#!/usr/bin/env python3
"""Serve the stand-in NVIDIA repository to the lab hosts over HTTP, read-only, as NVIDIA's server serves
its repositories (standard library only; the lab starts it with the controller's Python).

    python3 -I serve.py --listen ADDR:PORT --directory DIR --gpucheck-lab

Only GET and HEAD of files under DIR; one line per request on stderr (the lab's log of it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class Handler(SimpleHTTPRequestHandler):
    def list_directory(self, path):  # type: ignore[no-untyped-def]
        self.send_error(404, "no directory listings")  # NVIDIA's server lists, apt never asks
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The gpucheck lab's server of the stand-in NVIDIA repository.")
    parser.add_argument("--listen", required=True, help="ADDR:PORT")
    parser.add_argument("--directory", required=True)
    parser.add_argument("--gpucheck-lab", nargs="?", const="0", metavar="INSTANCE",
                        help="marks this process as the lab's (config.TAG: its instance after =)")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), functools.partial(Handler, directory=args.directory))
    server.daemon_threads = True
    sys.stderr.write(f"serving {args.directory} on http://{host}:{port}/\n")
    sys.stderr.flush()
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
