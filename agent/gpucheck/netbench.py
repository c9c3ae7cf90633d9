"""A small TCP bandwidth test between two nodes, for clusters without InfiniBand (and without iperf3).

`gpucheck net serve` accepts one connection and reports what it received; `gpucheck net send HOST`
streams zeros for a few seconds. The receiver's figure is the one reported: it counts what arrived.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

DEFAULT_PORT = 18515 + 100  # beside perftest's default port, rarely used by anything else
CHUNK = 1024 * 1024


def serve(port: int = DEFAULT_PORT, bind: str = "0.0.0.0", accept_timeout: float = 30.0) -> dict[str, Any]:
    """Receive one stream; return bytes, seconds and Gb/s."""
    with socket.create_server((bind, port), reuse_port=False) as server:
        server.settimeout(accept_timeout)
        print(json.dumps({"listening": port}), flush=True)  # the sender may start now
        try:
            conn, peer = server.accept()
        except TimeoutError:
            return {"error": f"no sender connected within {accept_timeout:g} s"}
        with conn:
            conn.settimeout(accept_timeout)
            total, began = 0, None
            buffer = bytearray(CHUNK)
            while True:
                n = conn.recv_into(buffer)
                if not n:
                    break
                if began is None:
                    began = time.monotonic()  # from the first byte: connection setup is not bandwidth
                total += n
            elapsed = time.monotonic() - (began or time.monotonic())
    return {"peer": peer[0], "bytes": total, "seconds": round(elapsed, 4),
            "Gbps": round(total * 8 / 1e9 / elapsed, 3) if elapsed > 0 else None}


def send(host: str, port: int = DEFAULT_PORT, seconds: float = 3.0, connect_timeout: float = 10.0) -> dict[str, Any]:
    payload = bytes(CHUNK)
    deadline = time.monotonic() + connect_timeout
    while True:  # the server may still be starting
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                return {"error": f"connection to {host}:{port} refused"}
            time.sleep(0.1)
        except OSError as exc:
            return {"error": f"cannot connect to {host}:{port}: {exc.strerror or exc}"}
    with sock:
        total, began = 0, time.monotonic()
        while time.monotonic() - began < seconds:
            sock.sendall(payload)
            total += len(payload)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # wait until the receiver has read everything and closed
    return {"bytes": total, "seconds": round(time.monotonic() - began, 4)}
