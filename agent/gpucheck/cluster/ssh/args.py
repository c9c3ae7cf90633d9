"""The few OpenSSH `-o` options in `ansible_ssh_common_args`/`ansible_ssh_extra_args` that change how
we connect: which known_hosts files to trust, whether unknown host keys are accepted, the connect
timeout and a ProxyCommand. Everything else (ControlMaster, ...) has no meaning for one Fabric call."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass

DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
# StrictHostKeyChecking values that let an unknown host in (we still never write known_hosts).
ACCEPTS_UNKNOWN = {"no", "off", "false", "accept-new"}


class SshArgsError(ValueError):
    """Unparseable ssh arguments; str(e) is one line."""


@dataclass(frozen=True)
class SshOptions:
    user_known_hosts: tuple[str, ...] | None = None
    global_known_hosts: tuple[str, ...] | None = None
    strict_host_key_checking: str | None = None
    connect_timeout: float | None = None
    proxy_command: str | None = None

    def known_hosts_files(self) -> tuple[str, ...]:
        """Files to read, as ssh would: global first, then the user's; `none`//dev/null mean no file."""
        files = (*(self.global_known_hosts or DEFAULT_GLOBAL_KNOWN_HOSTS),
                 *(self.user_known_hosts or DEFAULT_USER_KNOWN_HOSTS))
        return tuple(os.path.expanduser(f) for f in files if f.lower() != "none" and f != "/dev/null")


def _options(words: list[str]) -> list[tuple[str, str]]:
    """(key, value) of every `-o Key=Value`, `-oKey=Value` or `-o "Key Value"`."""
    found = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-o" and i + 1 < len(words):
            text, i = words[i + 1], i + 2
        elif word.startswith("-o") and len(word) > 2:
            text, i = word[2:], i + 1
        else:
            i += 1
            continue
        key, sep, value = text.partition("=")
        if not sep:
            key, _, value = text.strip().partition(" ")
        found.append((key.strip().lower(), value.strip()))
    return found


def parse(*args: str | None) -> SshOptions:
    words: list[str] = []
    for text in args:
        if not text:
            continue
        try:
            words += shlex.split(str(text))
        except ValueError as exc:
            raise SshArgsError(f"cannot split ssh arguments {text!r}: {exc}") from None
    values: dict[str, str] = {}
    for key, value in _options(words):
        values.setdefault(key, value)  # ssh keeps the first value given for an option
    timeout = values.get("connecttimeout")
    try:
        connect_timeout = float(timeout) if timeout is not None else None
    except ValueError:
        connect_timeout = math.nan
    if connect_timeout is not None and not (math.isfinite(connect_timeout) and connect_timeout > 0):
        raise SshArgsError(f"ConnectTimeout={timeout!r} is not a number of seconds above 0")
    return SshOptions(
        user_known_hosts=tuple(values["userknownhostsfile"].split()) if "userknownhostsfile" in values else None,
        global_known_hosts=tuple(values["globalknownhostsfile"].split()) if "globalknownhostsfile" in values else None,
        strict_host_key_checking=values.get("stricthostkeychecking", "").lower() or None,
        connect_timeout=connect_timeout,
        proxy_command=values.get("proxycommand") or None,
    )
