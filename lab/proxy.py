#!/usr/bin/env python3
"""The lab's forward proxy: lets lab hosts reach the package archives, and nothing else.

A process in a lab host's network namespace has no route out. `up` starts this proxy on the
bridge address (the only address the hosts can reach besides each other); the hosts' apt and pip
are configured to use it. Plain HTTP requests (apt) are forwarded, HTTPS goes through CONNECT
tunnels (pip); both only to the allowed host names on ports 80/443. Anything else gets 403 before
any connection is made, so no other address is ever contacted.

Standard library only; run as `python3 -I proxy.py --listen ADDR:PORT --allow HOST ... --gpucheck-lab`.
"""

from __future__ import annotations

import argparse
import http.client
import selectors
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ALLOWED_PORTS = (80, 443)
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
}
TIMEOUT = 120.0
CHUNK = 64 * 1024


def is_allowed(host: str, port: int, allowed: frozenset[str]) -> bool:
    """Only exact allowed host names (never addresses, never subdomains) on 80/443."""
    return port in ALLOWED_PORTS and host.lower().rstrip(".") in allowed


def split_authority(authority: str, default_port: int) -> tuple[str, int]:
    host, sep, port = authority.rpartition(":")
    if not sep or not port.isdigit() or "]" in port:
        return authority.strip("[]"), default_port
    return host.strip("[]"), int(port)


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpucheck-lab-proxy"
    allowed: frozenset[str] = frozenset()
    timeout = TIMEOUT

    def setup(self) -> None:
        super().setup()
        self.upstreams: dict[tuple[str, int], http.client.HTTPConnection] = {}

    def finish(self) -> None:
        for conn in self.upstreams.values():
            conn.close()
        super().finish()

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.client_address[0]} {format % args}\n")

    def refuse(self, host: str, port: int) -> None:
        body = (f"gpucheck lab proxy: {host}:{port} is not allowed; lab hosts may reach only "
                f"{', '.join(sorted(self.allowed))} on ports 80/443\n").encode()
        self.send_response(403)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_CONNECT(self) -> None:
        host, port = split_authority(self.path, 443)
        if not is_allowed(host, port, self.allowed):
            self.refuse(host, port)
            return
        try:
            upstream = socket.create_connection((host, port), timeout=30)
        except OSError as exc:
            self.send_error(502, f"cannot reach {host}:{port}: {exc}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        self.relay(self.connection, upstream)

    @staticmethod
    def relay(client: socket.socket, upstream: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        try:
            while True:
                events = sel.select(timeout=TIMEOUT)
                if not events:
                    return
                for key, _ in events:
                    data = key.fileobj.recv(CHUNK)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            upstream.close()

    def forward(self) -> None:
        url = urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.send_error(400, "a proxy request needs an absolute http:// URL (use CONNECT for https)")
            return
        host, port = url.hostname, url.port or 80
        if not is_allowed(host, port, self.allowed):
            self.refuse(host, port)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed meanwhile
            conn = self.upstreams.get((host, port))
            if conn is None:
                conn = self.upstreams[(host, port)] = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
            try:
                conn.request(self.command, path, body=body, headers=headers)
                resp = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                del self.upstreams[(host, port)]
                if attempt == 2:
                    self.send_error(502, f"{host}:{port}: {exc}")
                    return
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        chunked = not no_body and resp.getheader("Content-Length") is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if no_body:
            resp.read()
            return
        while data := resp.read1(CHUNK):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        if resp.will_close:
            conn.close()
            self.upstreams.pop((host, port), None)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = forward


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """One log line (a client that hangs up mid-answer is normal), not a traceback."""
        exc = sys.exc_info()[1]
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {client_address[0]} connection error: {exc!r}\n")


def serve(listen: str, allowed: list[str]) -> None:
    host, port = split_authority(listen, 3128)

    class Handler(ProxyHandler):
        pass

    Handler.allowed = frozenset(h.lower() for h in allowed)
    server = ProxyServer((host, port), Handler)
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} listening on {host}:{port}; allowed: "
                     f"{', '.join(sorted(Handler.allowed))}\n")
    sys.stderr.flush()
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The gpucheck lab's allow-list forward proxy.")
    parser.add_argument("--listen", required=True, help="ADDR:PORT (the lab bridge address)")
    parser.add_argument("--allow", action="append", default=[], help="a host name hosts may reach")
    parser.add_argument("--gpucheck-lab", nargs="?", const="0", metavar="INSTANCE",
                        help="marks this process as the lab's (config.TAG: its instance after =)")
    args = parser.parse_args(argv)
    try:
        serve(args.listen, args.allow)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
