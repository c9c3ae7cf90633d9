"""A `gpucheck node` run that a signal stopped (SIGTERM from `timeout` or Slurm, SIGINT, SIGHUP) before it could
judge anything: what it leaves behind. Its --output says it was stopped, so yesterday's report never reads as this
run's; a scheduled check (gpucheck schedule) is kept among the node's reports as preempted, cancelled or out of
time, never as a failure."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .files import write_output
from .process import Stopped, children_end_with_command
from .tell import Stop


def stopped_report(args: argparse.Namespace, reason: str, remediation: str) -> Any:
    """A report of one `gpucheck.run` error: the run was stopped before it could judge anything."""
    import datetime as dt
    import socket

    from . import __version__
    from .model import Report, Result, Status

    stopped = Result("gpucheck.run", Status.ERROR, reason=reason, remediation=remediation)
    return Report(host=socket.gethostname(), profile=args.profile or "not chosen", results=[stopped],
                  started=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), version=__version__)


def replace_stale_output(args: argparse.Namespace, why: str) -> None:
    """A stopped run's --output says so: the last run's report (a pass from yesterday) must not stay in place as if
    it were this one's (a node_exporter textfile, a health dashboard read it as current)."""
    from .report.node import render

    report = stopped_report(args, f"not finished: {why}; the last report was replaced, it is not this run's",
                            "run gpucheck node again, with the time it needs")
    try:
        write_output(args.output, render(report, args.format))
    except OSError as exc:
        print(f"gpucheck: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)


def keep_scheduled(args: argparse.Namespace, why: str, scheduler: Any) -> None:
    """A scheduled check its scheduler stopped (tell.Slurm, tell.Kubernetes) is kept among the node's reports as
    what it was: preempted by a user's job or pod (it runs again), cancelled, or out of time. An error, never a
    failure: it judged nothing, drains nothing, and ends no repeat offender's run of failures (docs/history.md)."""
    from .node import kept_reports
    from .report.node import render

    try:
        with children_end_with_command():  # the stopped run started its last child: the scheduler's is this one's
            stop = scheduler.stopped()
    except Stopped as exc:  # a second signal
        job = scheduler.job() or "?"
        stop = Stop("stopped", job, "not read", f"{job}: not read ({exc})", job, "whether it runs again is not known")
    report = stopped_report(args, f"{stop.outcome}: {scheduler.title} stopped this scheduled {args.scheduled} check "
                                  f"({why}; {stop.said}); {stop.again}", "nothing: the node was not judged")
    report.facts["scheduled"] = {"kind": args.scheduled, "job": stop.job, "stopped": stop.outcome,
                                 "job_state": stop.state}
    if note := kept_reports.keep(report, render(report, "json"), active=False):
        print(f"gpucheck: note: {note}", file=sys.stderr)
    print(f"gpucheck: scheduled {args.scheduled} check {stop.outcome} ({stop.brief}): kept as such, not a failure",
          file=sys.stderr)
