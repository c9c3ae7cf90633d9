"""Opening one SSH connection (Fabric over paramiko) with the inventory's user, port, key and
known_hosts, and saying in one line why it could not be opened. client.py builds everything else on it.

`open_connection` is the one way in: it reads the host's key file first (an unreadable key is that
host's `auth` error, never the run's end), and tells a server that accepted the connection but never
sent its SSH banner (a hung sshd, a dead port forward) from other handshake failures. paramiko's own
log is silenced (its transport thread reports such a failure as an ERROR record, which Python would
print on stderr): every failure is the host's outcome, said once, by `classify_connect_error`."""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import time
from typing import Any

from ...model import Status
from ..context import Options
from ..inventory import Host


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: Any):
        super().__init__(f"{hostname} {key.get_name()} {key.get_base64()[:16]}...")
        self.hostname = hostname
        self.key = key


class KeyFileUnreadable(Exception):
    def __init__(self, path: str, why: str):
        super().__init__(f"cannot read key file {path}: {why}")


class NoBanner(Exception):
    """The server accepted the TCP connection and said nothing within the connect timeout."""


def _policies() -> tuple[Any, Any]:
    from paramiko import MissingHostKeyPolicy

    class RefuseUnknown(MissingHostKeyPolicy):
        """Unknown host: refused, and never written anywhere (no AutoAdd)."""

        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    class AcceptUnknownOnce(MissingHostKeyPolicy):
        """StrictHostKeyChecking=no: this connection only; nothing is saved. Changed keys stay refused
        (paramiko raises BadHostKeyException before asking a policy)."""

    return RefuseUnknown(), AcceptUnknownOnce()


REFUSE_UNKNOWN, ACCEPT_UNKNOWN_ONCE = _policies()


def quiet_paramiko() -> None:
    """paramiko logs a failed handshake from its transport thread (`Exception (client): ...`, with a
    traceback for some); with no logging set up Python prints that on stderr. Each failure is the
    host's outcome instead."""
    logger = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


def connect_timeout(host: Host, options: Options) -> float:
    """Seconds to wait for TCP, the SSH banner and authentication: the host's own, else the run's."""
    return host.connect_timeout or options.connect_timeout


def connection(host: Host, options: Options) -> Any:
    """A Fabric Connection to `host`, not yet open: the inventory's user, port, key and known_hosts
    (read, never written), unknown host keys refused unless the host's ssh options accept them, and
    its commands' output kept within bounds (output.py)."""
    from fabric import Config, Connection

    from .output import BoundedRemote

    quiet_paramiko()
    timeout = connect_timeout(host, options)
    kwargs: dict[str, Any] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if host.key_file:
        # the inventory names the key: use it (and the agent), not every key in ~/.ssh
        kwargs.update(key_filename=host.key_file, look_for_keys=False)
    conn = Connection(host.address, user=host.user, port=host.port, connect_timeout=max(1, math.ceil(timeout)),
                      connect_kwargs=kwargs, gateway=host.proxy_command,
                      config=Config(overrides={"runners": {"remote": BoundedRemote}}))
    conn.client.set_missing_host_key_policy(REFUSE_UNKNOWN if host.strict_host_key_checking
                                            else ACCEPT_UNKNOWN_ONCE)
    for path in host.known_hosts:
        with contextlib.suppress(OSError):  # a missing known_hosts file is no key, as for ssh
            conn.client.load_system_host_keys(path)  # read-only: never saved back
    return conn


def check_key_file(host: Host) -> None:
    """Raises KeyFileUnreadable when the inventory names a key file we cannot read."""
    if not host.key_file:
        return
    try:
        with open(host.key_file, "rb") as key:
            key.read(1)
    except OSError as exc:
        raise KeyFileUnreadable(host.key_file, exc.strerror or str(exc)) from None


def open_connection(conn: Any, host: Host, timeout: float) -> None:
    """conn.open(); raises KeyFileUnreadable or NoBanner (see the module's docstring) where those are
    the reason, else what paramiko raised."""
    check_key_file(host)
    began = time.monotonic()
    try:
        conn.open()
    except Exception as exc:
        transport = conn.client.get_transport()
        no_banner = transport is not None and not getattr(transport, "remote_version", "x")
        waited = isinstance(exc.__context__, TimeoutError) or time.monotonic() - began >= 0.9 * timeout
        if no_banner and waited and not isinstance(exc, UnknownHostKey):
            raise NoBanner() from exc
        raise


def classify_connect_error(host: Host, exc: BaseException, timeout: float) -> tuple[Status, str, str]:
    """(status, kind, reason) for an exception raised while connecting. A host that does not answer
    fails (the node is the problem); a refused key or a broken handshake is an error (ours to fix)."""
    from paramiko.ssh_exception import (
        AuthenticationException,
        BadHostKeyException,
        NoValidConnectionsError,
        PasswordRequiredException,
        ProxyCommandFailure,
        SSHException,
    )

    where = f"{host.address}:{host.port}"
    if isinstance(exc, KeyFileUnreadable):
        return Status.ERROR, "auth", str(exc)
    if isinstance(exc, NoBanner):
        return (Status.FAIL, "unreachable", f"unreachable: {where}: accepted the connection but sent no SSH banner "
                f"within {timeout:g} s (a hung sshd?)")
    if isinstance(exc, UnknownHostKey):
        return (Status.ERROR, "host-key",
                f"host key of {exc.hostname} is not in known_hosts ({', '.join(host.known_hosts) or 'none'}): "
                "refused, not added; check its fingerprint and add it (ssh-keyscan)")
    if isinstance(exc, BadHostKeyException):
        return (Status.ERROR, "host-key", f"host key of {where} does not match known_hosts (reinstalled node, "
                "or someone in the middle): refused")
    if isinstance(exc, PasswordRequiredException):
        return Status.ERROR, "auth", f"key file {host.key_file} needs a passphrase: use ssh-agent"
    if isinstance(exc, AuthenticationException):
        key = f" with key {host.key_file}" if host.key_file else ""
        return Status.ERROR, "auth", f"authentication failed as {host.user}@{where}{key}: {exc}"
    if isinstance(exc, ProxyCommandFailure):  # its text holds the command, which may hold a password
        return Status.ERROR, "ssh", f"the proxy command to {where} failed: {exc.error}"
    if isinstance(exc, NoValidConnectionsError):
        errors = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()}))
        return Status.FAIL, "unreachable", f"unreachable: {where}: {errors.lower()}"
    if isinstance(exc, socket.gaierror):
        return Status.FAIL, "unreachable", f"unreachable: cannot resolve {host.address}: {exc.strerror}"
    if isinstance(exc, TimeoutError):
        return Status.FAIL, "unreachable", f"unreachable: {where}: no answer within {timeout:g} s"
    if isinstance(exc, SSHException | EOFError):
        return Status.ERROR, "ssh", f"SSH handshake with {where} failed: {exc or type(exc).__name__}"
    if isinstance(exc, OSError):
        return Status.FAIL, "unreachable", f"unreachable: {where}: {(exc.strerror or str(exc)).lower()}"
    return Status.ERROR, "ssh", f"cannot connect to {where}: {type(exc).__name__}: {exc}"
