"""The node report as a Prometheus textfile, for node_exporter's textfile collector."""

from __future__ import annotations

import math

from ...model import Report, Result, Status
from .. import gpu_figures
from ..values import time_of


def label(value: str) -> str:
    """A label value escaped as the text exposition format wants it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


FIGURE_HELP = {
    "gpucheck_gpu_figure": "A figure an active GPU check measured on one GPU in this run (unit in the figure name).",
    "gpucheck_last_active_gpu_figure": "A figure of the newest kept run of active checks that passed, carried by "
                                       "a passive run (unit in the figure name; its time: "
                                       "gpucheck_last_active_pass_timestamp_seconds).",
}


def figure_samples(results: list[Result], host: str, metric: str = "gpucheck_gpu_figure") -> list[str]:
    """One sample per finite numeric per-GPU figure (a string figure, such as the sdc checksum, is no sample); the
    unit is in the figure's name."""
    samples = []
    for r in results:
        for gpu, figures in (gpu_figures.per_gpu(r.measured) or {}).items():
            for name, value in figures.items():
                if isinstance(value, str) or not math.isfinite(value):
                    continue
                samples.append(f'{metric}{{host="{host}",check="{label(r.check)}",gpu="{label(gpu)}",'
                               f'figure="{label(name)}"}} {value!r}')
    if not samples:
        return []
    return [f"# HELP {metric} {FIGURE_HELP[metric]}", f"# TYPE {metric} gauge", *samples]


def render_prometheus(report: Report) -> str:
    """One gauge per check status, plus the exit code, the duration, each per-GPU figure of this run and, in a
    passive run, of the last run of active checks that passed, and when that was."""
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
    lines += figure_samples(report.results, host)
    lines += figure_samples(report.last_active, host, "gpucheck_last_active_gpu_figure")
    lines += last_active_pass(report, host)
    return "\n".join(lines) + "\n"


def last_active_pass(report: Report, host: str) -> list[str]:
    """When the node last passed its active checks (facts.last_active_pass, from the reports it kept): an alert can
    say "no active check passed in 8 days"."""
    when = report.facts.get("last_active_pass")
    stamp = time_of(when) if when else None
    if stamp is None:
        return []
    return ["# HELP gpucheck_last_active_pass_timestamp_seconds When the node last passed a run of active checks "
            "(gpucheck node --full), as it kept its reports.",
            "# TYPE gpucheck_last_active_pass_timestamp_seconds gauge",
            f'gpucheck_last_active_pass_timestamp_seconds{{host="{host}"}} {stamp.timestamp():.0f}']
