"""`horovodrun --check-build`: which frameworks, controllers and tensor operations Horovod was built with.

Evidence only: the command has been seen listing PyTorch as built in a virtualenv without torch,
so the frameworks check asks Horovod itself (hvd.nccl_built() etc.) and keeps this as a record.
"""

from __future__ import annotations

import re

from ._common import ParseError, guard, text_lines

KIND = "horovod-build"

_VERSION = re.compile(r"^\s*Horovod v(?P<version>\d[\w.+-]*?):?\s*$")
_SECTION = re.compile(r"^\s*Available (?P<section>Frameworks|Controllers|Tensor Operations)\s*:\s*$")
_ITEM = re.compile(r"^\s*\[(?P<mark>[^\]]?)\]\s*(?P<name>\S.*)$")  # name: rstrip (a lazy `.*?\s*$` is quadratic)
_SECTION_KEYS = {"Frameworks": "frameworks", "Controllers": "controllers",
                 "Tensor Operations": "tensor_operations"}


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    result: dict = {"version": None, "frameworks": {}, "controllers": {}, "tensor_operations": {}}
    section = None
    seen_section = False
    for line in lines:
        if match := _VERSION.match(line):
            result["version"] = match["version"]
        elif match := _SECTION.match(line):
            section = _SECTION_KEYS[match["section"]]
            seen_section = True
        elif section and (match := _ITEM.match(line)):
            # "[X] TensorFlow" is built, "[ ] MXNet" is not.
            result[section][match["name"].rstrip().lower()] = match["mark"].strip() != ""
        elif line.strip():
            section = None
    if not seen_section:
        raise ParseError(f"not {KIND} output: no \"Available Frameworks/Controllers/Tensor Operations\" section")
    return result
