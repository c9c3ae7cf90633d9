"""A `gpucheck node` run that a signal stopped (SIGTERM from `timeout` or Slurm, SIGINT, SIGHUP) before it could
judge anything: what it leaves behind. Its --output says it was stopped, so yesterday's report never reads as this
run's; a scheduled check (gpucheck schedule) is kept among the node's reports as preempted, cancelled or out of
time, never as a failure."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from .files import write_output
from .process import Stopped, children_end_with_command


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


# Slurm's state of a job it stopped, once settled: a preempted job is requeued (PENDING again, Restarts + 1), a
# cancelled one CANCELLED. Both read COMPLETING at the moment the SIGTERM arrives (Slurm 22.05, seen in the lab), so
# the state is read again until it settles, well inside KillWait (30 s by default) before Slurm's SIGKILL.
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "PREEMPTED"}
UNSETTLED = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"}
SETTLE_S = 10.0


def settled_state(job: str) -> tuple[str, str]:
    from . import slurm

    deadline = time.monotonic() + SETTLE_S
    while True:
        state, reason = slurm.job_state(job)
        if state not in UNSETTLED or time.monotonic() > deadline:
            return state, reason
        time.sleep(0.25)


def keep_scheduled(args: argparse.Namespace, why: str) -> None:
    """A scheduled check Slurm stopped is kept among the node's reports as what it was: preempted by a user job
    (Slurm requeues it), cancelled, or out of time. An error, never a failure: it judged nothing, drains nothing,
    and ends no repeat offender's run of failures (docs/history.md)."""
    from . import slurm
    from .node import kept_reports
    from .report.node import render

    job = os.environ.get("SLURM_JOB_ID", "?")
    try:
        with children_end_with_command():  # the stopped run started its last child: scontrol is this one's
            state, slurm_reason = settled_state(job)
    except (slurm.SlurmError, Stopped) as exc:
        state, slurm_reason = "not read", str(exc)
    outcome = ("preempted" if state in REQUEUED else "cancelled" if state.startswith("CANCEL")
               else "out of time" if state in ("TIMEOUT", "DEADLINE") else "stopped")
    again = {"preempted": "Slurm requeued it: it runs again once the node is idle",
             "stopped": "whether Slurm requeues it is not known"}.get(
        outcome, "it does not run again until `gpucheck schedule` queues it")
    report = stopped_report(args, f"{outcome}: Slurm stopped this scheduled {args.scheduled} check ({why}; job {job}"
                                  f" {state}, reason {slurm_reason}); {again}", "nothing: the node was not judged")
    report.facts["scheduled"] = {"kind": args.scheduled, "job": job, "stopped": outcome, "job_state": state}
    if note := kept_reports.keep(report, render(report, "json"), active=False):
        print(f"gpucheck: note: {note}", file=sys.stderr)
    print(f"gpucheck: scheduled {args.scheduled} check {outcome} (job {job} {state}): kept as such, not a failure",
          file=sys.stderr)
