"""The watcher's Prometheus textfile: beside node.yaml's prometheus_textfile (the one `gpucheck node` writes), as
gpucheck-watch.prom, so that neither replaces the other's metrics (node_exporter's textfile collector reads every
*.prom there). Its names are its own (gpucheck_watch_*): a second file with the node run's names and labels would
make the collector refuse both.

A heartbeat (the time of the last loop that wrote it) says the watcher is alive: alert when it is older than a few
polls. Rewritten whole (atomically) when something changed, and at least once a minute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..files import write_atomically
from ..model import Report, Status
from ..report.node.prometheus import label

FILE_NAME = "gpucheck-watch.prom"
HEARTBEAT_S = 60.0


@dataclass
class WatchMetrics:
    host: str
    path: Path | None  # None: node.yaml names no textfile
    events: dict[str, int] = field(default_factory=dict)  # source (kernel_log, nvml) -> changes judged
    scheduler: str = "slurm"  # the one told (tell.py): its actions are counted under its name
    actions: dict[str, int] = field(default_factory=dict)  # action (drain, held, keep) -> count
    statuses: dict[str, str] = field(default_factory=dict)  # check -> its status when the watcher last ran it
    last_event_s: float = 0.0
    written_s: float = 0.0
    dirty: bool = True

    @classmethod
    def beside(cls, textfile: str | None, host: str, scheduler: str) -> WatchMetrics:
        return cls(host, Path(textfile).with_name(FILE_NAME) if textfile else None, scheduler=scheduler)

    def judged(self, source: str, report: Report) -> None:
        self.events[source] = self.events.get(source, 0) + 1
        self.statuses.update({r.check: r.status.value for r in report.results})
        self.last_event_s = time.time()
        self.dirty = True

    def acted(self, verb: str) -> None:
        self.actions[verb] = self.actions.get(verb, 0) + 1
        self.dirty = True

    def render(self) -> str:
        host = label(self.host)
        lines = ["# HELP gpucheck_watch_heartbeat_timestamp_seconds When gpucheck watch last wrote this file "
                 "(alive while it keeps moving).",
                 "# TYPE gpucheck_watch_heartbeat_timestamp_seconds gauge",
                 f'gpucheck_watch_heartbeat_timestamp_seconds{{host="{host}"}} {time.time():.0f}',
                 "# HELP gpucheck_watch_events_total Changes the watcher judged, by where it saw them.",
                 "# TYPE gpucheck_watch_events_total counter"]
        lines += [f'gpucheck_watch_events_total{{host="{host}",source="{label(s)}"}} {n}'
                  for s, n in sorted(self.events.items())]
        actions = f"gpucheck_watch_{self.scheduler}_actions_total"
        lines += [f"# HELP {actions} What the watcher did in {self.scheduler} on a failure (drain, held by the "
                  "breaker, keep: someone else's state).",
                  f"# TYPE {actions} counter"]
        lines += [f'{actions}{{host="{host}",action="{label(a)}"}} {n}'
                  for a, n in sorted(self.actions.items())]
        lines += ["# HELP gpucheck_watch_check_status 1 for the status a check had when the watcher last ran it.",
                  "# TYPE gpucheck_watch_check_status gauge"]
        for check, status in sorted(self.statuses.items()):
            lines += [f'gpucheck_watch_check_status{{host="{host}",check="{label(check)}",status="{s.value}"}} '
                      f'{int(s.value == status)}' for s in Status]
        if self.last_event_s:
            lines += ["# HELP gpucheck_watch_last_event_timestamp_seconds When the watcher last judged a change.",
                      "# TYPE gpucheck_watch_last_event_timestamp_seconds gauge",
                      f'gpucheck_watch_last_event_timestamp_seconds{{host="{host}"}} {self.last_event_s:.0f}']
        return "\n".join(lines) + "\n"

    def write(self) -> str | None:
        """Write the file when something changed or the heartbeat is due; a one-line note when it cannot be."""
        if self.path is None or not (self.dirty or time.time() - self.written_s >= HEARTBEAT_S):
            return None
        try:
            write_atomically(self.path, self.render())
        except OSError as exc:
            return f"the Prometheus textfile {self.path} is not written: {exc.strerror or exc}"
        self.written_s, self.dirty = time.time(), False
        return None
