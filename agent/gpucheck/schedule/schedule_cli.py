"""`gpucheck schedule`: queue each node's scheduled active checks in Slurm (docs/slurm.md), or keep them as
Kubernetes Jobs with --kubernetes (kube_queue.py, docs/kubernetes.md). Bad input and a Slurm or an API server that
cannot be asked are one line and exit 3."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from typing import Any, NoReturn

from .. import slurm
from ..cli_types import fail
from ..model import EXIT_OK
from . import jobs

DURATION = re.compile(r"(\d+)\s*([smhdw]?)")
UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

EPILOG = """\
Each node of the partition gets one job per kind, gpucheck-KIND-NODE: the whole node (--exclusive), in the
scheduled-checks partition (the slurm role's slurm_scheduled_checks: the lowest PriorityTier, PreemptMode=REQUEUE),
so it starts only where no user job runs, and a user job that needs the node preempts it: Slurm requeues it and
the node's kept reports say "preempted", never a failure. A check that fails drains the node with the reason
"gpucheck: scheduled KIND: ...", which the passive health check does not undo. Each job, at its end, queues the
next one EVERY later, so squeue shows when every node's next check begins. Run it again at any time: a node and
kind already queued is left as it is.

With --kubernetes, each GPU Node gets one Job per kind, gpucheck-KIND-NODE in namespace gpucheck: the DaemonSet's
gpucheck container (your image) running gpucheck node --kubernetes --scheduled KIND on that Node alone, holding
its GPUs at the PriorityClass gpucheck-active, which every user pod preempts (kept as preempted, never a failure).
A Job that ended stays until its kind is due again (EVERY after it ended), then it is replaced: run this again on
an interval (the DaemonSet does, for its own Node, when its SCHEDULE is set: deploy/kubernetes/30-daemonset.yaml).

exit codes: 0 done; 3 bad input, or Slurm or the API server could not be asked (not a Slurm client, slurmctld
down, no partition; no kubeconfig, the rights of deploy/kubernetes/10-rbac.yaml missing).

examples:
  gpucheck schedule                        daily light checks and a weekly burn-in on every node of the partition
  gpucheck schedule --dry-run              what it would queue, and what is queued now
  gpucheck schedule --weekly 14d --weekly-args="--full --burn-seconds 600"
  gpucheck schedule --daily 0              weekly only (a kind already queued stays: --off first)
  gpucheck schedule --nodes node07,node08  only these nodes
  gpucheck schedule --off                  cancel every scheduled check
  squeue -p gpucheck -o "%.10i %.32j %.9T %S"   the schedule, as Slurm has it
  gpucheck schedule --kubernetes --kubeconfig ~/.kube/config --weekly 0   daily Jobs on every GPU Node
  kubectl -n gpucheck get jobs -l app.kubernetes.io/component=scheduled-check   the Jobs, as Kubernetes has them
"""


def duration(text: str) -> int:
    """1d, 7d, 12h, 30m, 3600s or a number of seconds; 0 turns that kind off."""
    match = DURATION.fullmatch(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError("a duration such as 1d, 7d, 12h, 30m or 3600 (seconds); 0 turns it off")
    value = int(match.group(1)) * UNIT_S[match.group(2)]
    if 0 < value < 600:
        raise argparse.ArgumentTypeError(f"{text}: at least 10 minutes between two checks of a node (0: off)")
    return value


class _Refused(Exception):
    pass


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


# The scheduled job's own options: what it sets itself (which node, how it tells Slurm, where the report goes).
JOBS_OWN = ("scheduled", "slurm", "slurm_node", "format", "output")


def node_args(text: str) -> list[str]:
    """`gpucheck node`'s options for a scheduled check, read by gpucheck node's own parser: every spelling it
    accepts (--slurm-n gpu-b, --slurm-node=gpu-b, -o x) is caught, not just the full names."""
    from .. import cli

    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    parser = _QuietParser(prog="gpucheck", add_help=False)
    cli.add_parsers(parser.add_subparsers(dest="command", parser_class=_QuietParser))
    defaults = parser.parse_args(["node"])
    try:
        given = parser.parse_args(["node", *argv])
    except _Refused as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: not options gpucheck node takes ({exc})") from None
    taken = [f"--{dest.replace('_', '-')}" for dest in JOBS_OWN if getattr(given, dest) != getattr(defaults, dest)]
    if taken:
        raise argparse.ArgumentTypeError(f"{', '.join(taken)} is the scheduled job's own")
    return argv


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schedule", help="queue the periodic active checks of idle nodes in Slurm",
                       description="Queue each node's scheduled active checks as Slurm jobs: the light active "
                                   "checks daily, the full burn-in weekly (both configurable), each on one idle "
                                   "node at a time, in a partition user jobs preempt; results go to the node's "
                                   "kept reports, and so to the history.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partition", default=jobs.DEFAULT_PARTITION, help="the scheduled-checks partition (default: "
                   "%(default)s)")
    for kind in jobs.KINDS:
        p.add_argument(f"--{kind}", type=duration, metavar="EVERY", default=jobs.DEFAULT_EVERY_S[kind],
                       help=f"how often the {kind} check runs on each node (default: "
                            f"{jobs.DEFAULT_EVERY_S[kind] // 86400}d; 0: off)")
        p.add_argument(f"--{kind}-args", type=node_args, metavar="ARGS", default=jobs.DEFAULT_ARGS[kind],
                       help=f"gpucheck node's options for it, one string, after = (default: "
                            f"--{kind}-args=\"{shlex.join(jobs.DEFAULT_ARGS[kind])}\")")
    p.add_argument("--nodes", metavar="NAME[,NAME...]", help="only these nodes (default: every node of the partition)")
    p.add_argument("--gpucheck", default="gpucheck", metavar="PATH", help="the gpucheck command on the nodes "
                   "(default: %(default)s, on the job's PATH)")
    p.add_argument("--dry-run", action="store_true", help="say what would be queued, queue nothing")
    p.add_argument("--off", action="store_true", help="cancel every scheduled check in the partition (with "
                   "--kubernetes: delete their Jobs)")
    p.add_argument("--kubernetes", action="store_true", help="keep them as Kubernetes Jobs instead of Slurm jobs "
                   "(below the epilog)")
    p.add_argument("--kubeconfig", metavar="PATH", help="with --kubernetes: the kubeconfig (default: in a pod its "
                   "service account, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--namespace", default="gpucheck", help="with --kubernetes: gpucheck's namespace, where the "
                   "Jobs go (default: %(default)s)")
    p.add_argument("--daemonset", default="gpucheck-node", metavar="NAME", help="with --kubernetes: gpucheck's "
                   "DaemonSet, whose pod the Jobs' pods are made from (default: %(default)s)")
    p.add_argument("--next", choices=jobs.KINDS, help=argparse.SUPPRESS)  # a job queuing its own successor
    p.add_argument("--node", help=argparse.SUPPRESS)


def cmd_schedule(args: argparse.Namespace) -> int:
    settings = jobs.Settings(partition=args.partition,
                             every_s={kind: getattr(args, kind) for kind in jobs.KINDS},
                             args={kind: getattr(args, f"{kind}_args") for kind in jobs.KINDS},
                             gpucheck=args.gpucheck)
    if bool(args.next) != bool(args.node):
        fail("--next and --node go together (the scheduled job queuing its successor)")
    if args.kubernetes:
        return on_kubernetes(settings, args)
    if args.kubeconfig:
        fail("--kubeconfig goes with --kubernetes")
    try:
        if args.off:
            return cancel_all(settings, args.dry_run)
        if args.next:
            return queue_successor(settings, args.next, args.node)
        return queue_missing(settings, args.nodes, args.dry_run)
    except slurm.SlurmError as exc:
        fail(f"slurm: {exc}")


def on_kubernetes(settings: jobs.Settings, args: argparse.Namespace) -> int:
    from ..kubernetes.api import KubernetesError
    from . import kube_queue

    if args.next:
        fail("--next is Slurm's (a job queuing its successor): with --kubernetes, run gpucheck schedule again")
    if args.partition != jobs.DEFAULT_PARTITION:
        fail("--partition is Slurm's: with --kubernetes the Jobs go to --namespace")
    if not args.off and not settings.kinds():
        fail("every kind of check is off (--daily 0 --weekly 0): nothing to schedule")
    try:
        queue = kube_queue.Queue(args.kubeconfig, args.namespace, args.daemonset)
        if args.off:
            return kube_queue.cancel_all(queue, args.dry_run)
        return kube_queue.queue_due(settings, queue, [n for n in (args.nodes or "").split(",") if n], args.dry_run)
    except KubernetesError as exc:
        fail(f"kubernetes: {exc}")


def cancel_all(settings: jobs.Settings, dry_run: bool) -> int:
    found = jobs.queued(settings.partition)
    for job in found:
        if not dry_run:
            jobs.cancel(job.job)
        print(f"{job.name}: job {job.job} ({job.state}) {'would be ' if dry_run else ''}cancelled")
    if not found:
        print(f"no scheduled check is queued in partition {settings.partition}")
    return EXIT_OK


def queue_successor(settings: jobs.Settings, kind: str, node: str) -> int:
    """Called by a scheduled job at its end: the next check of its node, EVERY from now, unless one is queued."""
    every = settings.every_s.get(kind, 0)
    if not every:
        print(f"{jobs.job_name(kind, node)}: {kind} checks are off: nothing queued")
        return EXIT_OK
    me = os.environ.get("SLURM_JOB_ID", "")
    name = jobs.job_name(kind, node)
    other = [j for j in jobs.queued(settings.partition) if j.name == name and j.job != me and j.state != "RUNNING"]
    if other:
        print(f"{name}: job {other[0].job} already queued ({other[0].state}, begins {other[0].begins})")
        return EXIT_OK
    job = jobs.submit(settings, kind, node, f"now+{every}")
    print(f"{name}: job {job} queued, to begin {every} s from now")
    return EXIT_OK


def queue_missing(settings: jobs.Settings, nodes_arg: str | None, dry_run: bool) -> int:
    nodes = [n for n in (nodes_arg or "").split(",") if n] or jobs.partition_nodes(settings.partition)
    if not nodes:
        fail(f"partition {settings.partition} has no nodes (is the slurm role's slurm_scheduled_checks on?)")
    if not settings.kinds():
        fail("every kind of check is off (--daily 0 --weekly 0): nothing to schedule")
    for node in nodes:  # every name checked before anything is queued
        slurm.one_node(node)
    live = {j.name: j for j in jobs.queued(settings.partition) if j.state in jobs.LIVE_STATES}
    for node in nodes:
        for kind in settings.kinds():
            name = jobs.job_name(kind, node)
            if name in live:
                job = live[name]
                print(f"{name}: job {job.job} already queued ({job.state}, begins {job.begins})")
            elif dry_run:
                print(f"{name}: would queue: {shlex.join(settings.args[kind])}, every {settings.every_s[kind]} s")
            else:
                job = jobs.submit(settings, kind, node, "now")
                print(f"{name}: job {job} queued: {shlex.join(settings.args[kind])}, every {settings.every_s[kind]} s")
    return EXIT_OK
