"""The cluster report as JUnit XML: a suite of cluster checks and one suite per node. Text from the
nodes may hold what XML 1.0 cannot (a terminal's escape sequences, NUL): such characters are dropped
(junit_xml.xml_text), so the file always parses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ..junit_xml import document, failure_message, xml_text
from .wording import number, status_of


def _seconds(value: Any) -> str:
    return number(value if isinstance(value, int | float) else 0.0, ".3f")


def _case(parent: ET.Element, classname: str, name: str, result: dict[str, Any]) -> None:
    case = ET.SubElement(parent, "testcase", classname=xml_text(classname), name=xml_text(name),
                         time=_seconds(result.get("duration_s") or 0))
    status = status_of(result)
    if status in ("fail", "warn"):
        message = failure_message(result.get("reason", ""), result.get("measured"), result.get("expected"))
        node = ET.SubElement(case, "failure", message=xml_text(message), type=status)
        node.text = xml_text("\n".join(str(x) for x in (result.get("remediation"), result.get("evidence")) if x))
    elif status == "error":
        ET.SubElement(case, "error", message=xml_text(result.get("reason", "")),
                      type="error").text = xml_text(result.get("evidence") or "") or None
    elif status == "skip":
        ET.SubElement(case, "skipped", message=xml_text(result.get("reason", "")))


def _suite(parent: ET.Element, name: str, **attrs: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=xml_text(name), **{k: xml_text(v) for k, v in attrs.items()})


def _totals(element: ET.Element) -> None:
    counted = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in element.iter("testcase"):
        counted["tests"] += 1
        counted["failures"] += case.find("failure") is not None
        counted["errors"] += case.find("error") is not None
        counted["skipped"] += case.find("skipped") is not None
    for key, value in counted.items():
        element.set(key, str(value))


def _results(value: Any) -> list[dict[str, Any]]:
    return [r for r in value or () if isinstance(r, dict)] if isinstance(value, list) else []


def render_junit(doc: dict[str, Any]) -> str:
    """One testcase per node-check and per cluster check; a node with no report is one testcase with
    an <error> (its checks could not run), whatever its status."""
    root = ET.Element("testsuites", name="gpucheck cluster", time=_seconds(doc.get("duration_s", 0)))
    cluster = _suite(root, "gpucheck.cluster", timestamp=str(doc.get("started", "")))
    for result in _results(doc.get("cluster")):
        check = str(result.get("check", ""))
        _case(cluster, "cluster." + ".".join(check.split(".")[1:2]), check, result)
    for host, node in (doc.get("nodes") or {}).items():
        node = node if isinstance(node, dict) else {}
        suite = _suite(root, f"gpucheck.node.{host}", hostname=str(host), time=_seconds(node.get("wall_s") or 0))
        report = node.get("report")
        if isinstance(report, dict):
            for result in _results(report.get("results")):
                check = str(result.get("check", ""))
                _case(suite, f"{host}.{check.split('.')[0]}", check, result)
        else:
            case = ET.SubElement(suite, "testcase", classname=xml_text(host), name="gpucheck node",
                                 time=_seconds(node.get("wall_s") or 0))
            ET.SubElement(case, "error", message=xml_text(node.get("reason", "")),
                          type=xml_text(node.get("kind", status_of(node) or "error"))
                          ).text = xml_text(node.get("evidence") or "") or None
        _totals(suite)
    _totals(cluster)
    _totals(root)
    return document(root)
