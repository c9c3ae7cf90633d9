"""What the cluster report must not carry: secrets, and numbers JSON cannot hold.

An inventory's ssh options and the command line can hold passwords (a ProxyCommand through
`sshpass -p`, a proxy URL with `user:password@`), and so can error messages that quote them. Every
string written to the report directory (and the terminal summary) goes through `redact`: a
ProxyCommand's value, anything after `-o ...Password`, the argument of `sshpass -p` and of a
password option or assignment, a token's, secret's or API key's assignment, a bearer token, and the password of
a URL become REDACTED. A NaN or infinite float
(an agent's measurement) is written as the string "nan"/"inf"/"-inf": report.json stays JSON that
any language reads."""

from __future__ import annotations

import math
import re
from typing import Any

REDACTED = "[redacted]"
SECRET_KEYS = frozenset({"proxy_command"})  # a mapping's value under this key is a secret as a whole
VALUE = r"""(?:"[^"\n]*"?|'[^'\n]*'?|[^\s'"]\S*)"""  # one word, or a quoted string (maybe unclosed)
PATTERNS = (
    # ProxyCommand=..., ProxyCommand ..., ProxyCommand("...") (paramiko's message): the rest of the line,
    # or the quoted value
    re.compile(r"""(?i)(proxy_?command[ \t]*(?:=[ \t]*|\([ \t]*|[ \t]+)(?=\S))("[^"\n]*"|'[^'\n]*'|[^\n]*)"""),
    # -o PasswordAuthentication=..., -o "SomePassword x": anything after the option's name
    re.compile(r"""(?i)(-o[ \t]*["']?[ \t]*\w*pass(?:word|wd|phrase)\w*)([^\n]+)"""),
    # sshpass -p SECRET, sshpass -pSECRET (after other sshpass options)
    re.compile(r"""(?i)(\bsshpass\b(?:[ \t]+-[a-oq-z]\S*)*[ \t]+-p[ \t]*)(""" + VALUE + ")"),
    # --password SECRET, --passwd=SECRET
    re.compile(r"""(?i)(--?(?:password|passwd|pass)(?:=|[ \t]+))(""" + VALUE + ")"),
    # password=SECRET, ansible_ssh_pass: SECRET, PASSWORD=SECRET
    re.compile(r"""(?i)(\b\w*(?:password|passwd|_pass)\w*[ \t]*[=:][ \t]*)(""" + VALUE + ")"),
    # scheme://user:SECRET@host
    re.compile(r"""(?i)(\b[a-z][a-z0-9+.-]*://[^\s/@:'"]*:)([^\s/@'"]+)(?=@)"""),
    # token=SECRET, HF_TOKEN: SECRET, client_secret=..., api_key=..., AWS_SECRET_ACCESS_KEY=... (a node's text
    # quoting its environment or a config line)
    re.compile(r"""(?i)(\b\w*(?:token|secret|api_?key|access_?key)\w*[ \t]*[=:][ \t]*)(""" + VALUE + ")"),
    # Authorization: Bearer SECRET
    re.compile(r"""(?i)(\bbearer[ \t]+)(""" + VALUE + ")"),
)
# no secret without one of these: the common case is fast
TRIGGER = re.compile(r"(?i)proxy|pass|://|token|secret|key|bearer")
# What a terminal acts on instead of showing: C0 and C1 controls (an escape sequence, a carriage return, a bell)
# and the Unicode line and paragraph separators. A tab is shown as it is.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def for_terminal(text: str, newlines: bool = False) -> str:
    """`text` as the admin's terminal may print it: redacted, and what a node printed that a terminal would act on
    (`\\x1b]0;...`, `\\r`) written as an escape; newlines too, unless the text is made of lines (`newlines`)."""
    return escaped(redact(text), newlines)


def escaped(text: str, newlines: bool = False) -> str:
    """`text` with what a terminal would act on written as an escape (newlines too, unless `newlines`): for text
    already redacted, such as a report file rendered from a cleaned document."""
    shown = CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
    return shown if newlines else shown.replace("\n", "\\n")


def redact(text: str) -> str:
    """`text` with every secret it holds replaced by REDACTED."""
    if not TRIGGER.search(text):
        return text
    for pattern in PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def clean(value: Any, key: str | None = None) -> Any:
    """A copy of a JSON-like value, every string redacted and every non-finite float a string.
    Mapping keys are kept (host names, check ids, metric names)."""
    if isinstance(value, str):
        return REDACTED if key in SECRET_KEYS and value else redact(value)
    if isinstance(value, dict):
        return {k: clean(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    return value
