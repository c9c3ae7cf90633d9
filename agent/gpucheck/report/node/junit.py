"""The node report as a JUnit XML testsuite: one testcase per check; per-GPU figures in its system-out."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ...model import Report, Status
from .. import gpu_figures
from ..junit_xml import document, failure_message


def render_junit(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", name=f"gpucheck.node.{report.host}", tests=str(len(report.results)),
                       failures=str(counts["fail"] + counts["warn"]), errors=str(counts["error"]),
                       skipped=str(counts["skip"]), time=f"{report.duration_s:.3f}", timestamp=report.started,
                       hostname=report.host)
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"{report.host}.{r.check.split('.')[0]}",
                             name=r.check, time=f"{r.duration_s:.3f}")
        figures = gpu_figures.lines(r.measured, r.expected)
        if r.status in (Status.FAIL, Status.WARN):
            node = ET.SubElement(case, "failure", message=failure_message(r.reason, r.measured, r.expected),
                                 type=r.status.value)
            node.text = "\n".join(x for x in (r.remediation, r.evidence) if x)
        elif r.status == Status.ERROR:
            node = ET.SubElement(case, "error", message=r.reason, type="error")
            node.text = r.evidence
        elif r.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=r.reason)
        else:
            ET.SubElement(case, "system-out").text = "\n".join([r.reason, *figures])
            continue
        if figures:
            ET.SubElement(case, "system-out").text = "\n".join(figures)
    return document(suite)
