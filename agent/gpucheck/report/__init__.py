"""Render a node Report as text, JSON, JUnit XML or a Prometheus textfile."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

from ..model import Report, Status

FORMATS = ("text", "json", "junit", "prometheus")
STATUS_WORD = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip",
               Status.ERROR: "ERROR"}


def show(value: Any, limit: int = 48) -> str:
    """A short one-line rendering of a measured/expected value for the table."""
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, dict):
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in value.values()}
        if value and len(distinct) == 1 and all(re.fullmatch(r"GPU\d+", k) for k in value):
            text = f"all {len(value)} GPUs: {show(next(iter(value.values())), limit)}"
        else:
            text = ", ".join(f"{k}={show(v, limit)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ",".join(show(v, limit) for v in value) or "[]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_text(report: Report) -> str:
    rows = [(STATUS_WORD[r.status], r.check, show(r.measured), show(r.expected), r.reason) for r in report.results]
    headers = ("STATUS", "CHECK", "MEASURED", "EXPECTED", "REASON")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers[:4])]
    lines = [f"gpucheck node on {report.host} — profile {report.profile}", ""]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*headers))
    lines += [fmt.format(*row) for row in rows]
    fixes = [r for r in report.results if r.status in (Status.FAIL, Status.ERROR, Status.WARN) and r.remediation]
    if fixes:
        lines += ["", "What to do:"]
        lines += [f"  {r.check}: {r.remediation}" for r in fixes]
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines += ["", f"{summary} in {report.duration_s:.2f} s — exit code {report.exit_code}"]
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str) + "\n"


def render_junit(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", name=f"gpucheck.node.{report.host}", tests=str(len(report.results)),
                       failures=str(counts["fail"] + counts["warn"]), errors=str(counts["error"]),
                       skipped=str(counts["skip"]), time=f"{report.duration_s:.3f}", timestamp=report.started,
                       hostname=report.host)
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"{report.host}.{r.check.split('.')[0]}",
                             name=r.check, time=f"{r.duration_s:.3f}")
        message = f"{r.reason} (measured {show(r.measured, 200)}, expected {show(r.expected, 200)})"
        if r.status in (Status.FAIL, Status.WARN):
            node = ET.SubElement(case, "failure", message=message, type=r.status.value)
            node.text = "\n".join(x for x in (r.remediation, r.evidence) if x)
        elif r.status == Status.ERROR:
            node = ET.SubElement(case, "error", message=r.reason, type="error")
            node.text = r.evidence
        elif r.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=r.reason)
        else:
            ET.SubElement(case, "system-out").text = r.reason
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def render_prometheus(report: Report) -> str:
    """For node_exporter's textfile collector: one gauge per check status, plus the summary."""
    host, profile = _label(report.host), _label(report.profile)
    lines = [
        "# HELP gpucheck_check_status 1 for the check's current status (pass, warn, fail, skip, error).",
        "# TYPE gpucheck_check_status gauge",
    ]
    for r in report.results:
        for status in Status:
            lines.append(f'gpucheck_check_status{{host="{host}",profile="{profile}",check="{_label(r.check)}",'
                         f'status="{status.value}"}} {1 if r.status == status else 0}')
    lines += [
        "# HELP gpucheck_exit_code 0 pass, 1 warn, 2 fail, 3 could not run.",
        "# TYPE gpucheck_exit_code gauge",
        f'gpucheck_exit_code{{host="{host}",profile="{profile}"}} {report.exit_code}',
        "# HELP gpucheck_duration_seconds Time the node check took.",
        "# TYPE gpucheck_duration_seconds gauge",
        f'gpucheck_duration_seconds{{host="{host}"}} {report.duration_s:.3f}',
    ]
    return "\n".join(lines) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "junit": render_junit, "prometheus": render_prometheus}


def render(report: Report, fmt: str) -> str:
    return RENDERERS[fmt](report)
