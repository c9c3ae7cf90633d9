"""`ldd FILE...`: what each library a program or extension needs resolved to.

Handles `name => /path (0x...)`, `name => not found`, lines without `=>` (the loader, vdso), the old
`linux-vdso.so.1 =>  (0x...)`, `statically linked`, `not a dynamic executable`, missing symbol
versions, `ldd:` errors, `FILE:` headers when several files were given, and stray lines (a shell
prompt pasted with the output), which are kept under `ignored`.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ._common import ParseError, guard, text_lines

KIND = "ldd"

_ARROW = re.compile(r"^\s*(?P<name>\S+)\s+=>\s*(?P<target>.*?)\s*(?:\((?P<addr>0x[0-9a-fA-F]+)\))?\s*$")
_PLAIN = re.compile(r"^\s*(?P<path>\S+)\s+\((?P<addr>0x[0-9a-fA-F]+)\)\s*$")
_SYMVER = re.compile(r"version `(?P<version>[^']+)' not found(?: \(required by (?P<by>[^)]+)\))?")


def empty_result() -> dict[str, Any]:
    """The shape `parse` returns, naming nothing: for a caller that must go on when ldd printed
    something unreadable."""
    return _summarise([_section(None)], [], [])


def _section(name: str | None) -> dict[str, Any]:
    return {"file": name, "libraries": [], "not_found": [], "version_errors": [], "static": False,
            "not_dynamic": False}


def _summarise(sections: list[dict[str, Any]], errors: list[str], ignored: list[str]) -> dict[str, Any]:
    return {
        "file": sections[0]["file"],
        "libraries": [lib for sec in sections for lib in sec["libraries"]],
        "not_found": [name for sec in sections for name in sec["not_found"]],
        "version_errors": [err for sec in sections for err in sec["version_errors"]],
        "static": any(sec["static"] for sec in sections),
        "not_dynamic": any(sec["not_dynamic"] for sec in sections),
        "sections": sections,
        "errors": errors,
        "ignored": ignored,
    }


@guard(KIND)
def parse(text: str) -> dict:
    """-> {file, libraries: [{name, path, found}], not_found, version_errors, static, not_dynamic,
    sections (one per FILE: header), errors (ldd's own), ignored}."""
    sections: list[dict[str, Any]] = []
    errors: list[str] = []
    ignored: list[str] = []
    recognised = False  # a line in ldd's grammar: a FILE: header or a stray line alone is not ldd output

    def current() -> dict[str, Any]:
        if not sections:
            sections.append(_section(None))
        return sections[-1]

    for raw in text_lines(text, KIND):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if symver := _SYMVER.search(stripped):
            current()["version_errors"].append({"version": symver["version"], "required_by": symver["by"],
                                                "line": stripped})
        elif stripped.startswith("ldd:"):
            errors.append(stripped)
        elif "not a dynamic executable" in stripped or stripped == "statically linked":
            current()["not_dynamic" if "dynamic" in stripped else "static"] = True
        elif arrow := _ARROW.match(line):
            target = arrow["target"].strip()
            if target == "not found":
                current()["libraries"].append({"name": arrow["name"], "path": None, "found": False})
                current()["not_found"].append(arrow["name"])
            else:
                current()["libraries"].append({"name": arrow["name"], "path": target or None, "found": True})
        elif plain := _PLAIN.match(line):
            path = plain["path"]
            current()["libraries"].append({"name": os.path.basename(path),
                                           "path": path if path.startswith("/") else None, "found": True})
        elif not line[:1].isspace() and stripped.endswith(":") and " " not in stripped:
            sections.append(_section(stripped[:-1]))
            continue
        else:
            ignored.append(stripped)
            continue
        recognised = True
    if not recognised:
        raise ParseError(f"not {KIND} output: no \"name => path\", \"not found\", \"statically linked\", "
                         "\"not a dynamic executable\" or ldd: line")
    return _summarise(sections or [_section(None)], errors, ignored)
