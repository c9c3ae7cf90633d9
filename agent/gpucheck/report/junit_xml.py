"""What the node's and the cluster's JUnit XML share: the failure message and the document's text."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from .values import show


def failure_message(reason: Any, measured: Any, expected: Any) -> str:
    return f"{reason} (measured {show(measured, 200)}, expected {show(expected, 200)})"


def document(root: ET.Element) -> str:
    """The indented XML with its declaration (indents `root` in place)."""
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
