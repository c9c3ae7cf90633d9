"""The cluster report as JUnit XML: a suite of cluster checks and one suite per node."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from .junit_xml import document, failure_message


def _case(parent: ET.Element, classname: str, name: str, result: dict[str, Any]) -> None:
    case = ET.SubElement(parent, "testcase", classname=classname, name=name,
                         time=f"{float(result.get('duration_s') or 0):.3f}")
    status = result.get("status")
    if status in ("fail", "warn"):
        message = failure_message(result.get("reason", ""), result.get("measured"), result.get("expected"))
        node = ET.SubElement(case, "failure", message=message, type=status)
        node.text = "\n".join(x for x in (result.get("remediation"), result.get("evidence")) if x)
    elif status == "error":
        ET.SubElement(case, "error", message=str(result.get("reason", "")), type="error").text = result.get("evidence")
    elif status == "skip":
        ET.SubElement(case, "skipped", message=str(result.get("reason", "")))


def _suite(parent: ET.Element, name: str, **attrs: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name, **attrs)


def _totals(element: ET.Element) -> None:
    counted = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in element.iter("testcase"):
        counted["tests"] += 1
        counted["failures"] += case.find("failure") is not None
        counted["errors"] += case.find("error") is not None
        counted["skipped"] += case.find("skipped") is not None
    for key, value in counted.items():
        element.set(key, str(value))


def render_junit(doc: dict[str, Any]) -> str:
    """One testcase per node-check and per cluster check; a node with no report is one testcase with
    an <error> (its checks could not run), whatever its status."""
    root = ET.Element("testsuites", name="gpucheck cluster", time=f"{doc.get('duration_s', 0):.3f}")
    cluster = _suite(root, "gpucheck.cluster", timestamp=str(doc.get("started", "")))
    for result in doc.get("cluster", []):
        _case(cluster, "cluster." + ".".join(result["check"].split(".")[1:2]), result["check"], result)
    for host, node in doc.get("nodes", {}).items():
        suite = _suite(root, f"gpucheck.node.{host}", hostname=host, time=f"{float(node.get('wall_s') or 0):.3f}")
        report = node.get("report")
        if report:
            for result in report.get("results", []):
                _case(suite, f"{host}.{result['check'].split('.')[0]}", result["check"], result)
        else:
            case = ET.SubElement(suite, "testcase", classname=host, name="gpucheck node",
                                 time=f"{float(node.get('wall_s') or 0):.3f}")
            ET.SubElement(case, "error", message=str(node.get("reason", "")),
                          type=str(node.get("kind", "pending"))).text = node.get("evidence") or None
        _totals(suite)
    _totals(cluster)
    _totals(root)
    return document(root)
