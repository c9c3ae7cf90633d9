"""The node report as a Prometheus textfile, for node_exporter's textfile collector."""

from __future__ import annotations

from ..model import Report, Status


def label(value: str) -> str:
    """A label value escaped as the text exposition format wants it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def render_prometheus(report: Report) -> str:
    """One gauge per check status, plus the exit code and the duration."""
    host, profile = label(report.host), label(report.profile)
    lines = [
        "# HELP gpucheck_check_status 1 for the check's current status (pass, warn, fail, skip, error).",
        "# TYPE gpucheck_check_status gauge",
    ]
    for r in report.results:
        for status in Status:
            lines.append(f'gpucheck_check_status{{host="{host}",profile="{profile}",check="{label(r.check)}",'
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
