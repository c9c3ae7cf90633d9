"""What the node's and the cluster's JUnit XML share: the failure message and the document's text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .values import show

NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: Any) -> str:
    """Text XML 1.0 can hold: a kernel log's control bytes, a terminal's escapes and NUL are dropped."""
    return NOT_XML.sub("", str(value))


def failure_message(reason: Any, measured: Any, expected: Any) -> str:
    return f"{reason} (measured {show(measured, 200)}, expected {show(expected, 200)})"


def document(root: ET.Element) -> str:
    """The indented XML with its declaration (indents `root` in place); every text and attribute is made text XML
    1.0 can hold, so the file parses whatever a check's evidence held."""
    for element in root.iter():
        element.text = None if element.text is None else xml_text(element.text)
        element.tail = None if element.tail is None else xml_text(element.tail)
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
