"""Telling the workload manager what a gpucheck run found: Slurm (drain_rule: drain, resume) or Kubernetes
(kubernetes/node_rule: taint, condition, label), one contract (docs/slurm.md's table) and one interface: a
`Scheduler` (`Slurm` or `Kubernetes`) tells it for one node; `chosen` gives the one `gpucheck node`'s command line
names, as a function that writes what was done into the report's facts (the history's transitions) and returns the
exit code the run gives. `gpucheck watch` holds one too.

Exit codes, alike for both: 2 on a failure (the node is drained or tainted now, or was before), 3 when the
scheduler could not be told, else 0, also after a harness error and when the breaker held the drain (a prolog's
non-zero exit would make Slurm drain the node itself).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .model import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN

Tell = Callable[[Any], int]  # the run's report -> the exit code


class Unreached(Exception):
    """The workload manager could not be told (why, in one line)."""


@dataclass(frozen=True)
class Held:
    """Who holds the node, as a repair asks before it begins and while it waits (repair/flow.py)."""
    name: str  # the node as the scheduler names it
    ours: bool  # held by one of gpucheck's checks (drain_rule.REPAIRABLE), not handed to a person: a repair may begin
    busy: bool  # work still runs there (Slurm: its jobs; Kubernetes: pods holding its GPUs)
    described: str  # its state, for a sentence


@dataclass(frozen=True)
class Stop:
    """How the scheduler stopped a scheduled check that a signal ended."""
    outcome: str  # preempted (it runs again), cancelled, out of time, stopped (not known)
    job: str  # the scheduler's job: Slurm's job id, the pod's name
    state: str  # the job's state as the scheduler has it
    said: str  # what the scheduler said, for the report's reason
    brief: str  # the job and its state, in a few words
    again: str  # whether and when it runs again


class Scheduler(Protocol):
    name: str  # "slurm" or "kubernetes": what the run says and the key of its facts
    title: str  # its name in a sentence
    node: str | None  # the node as the scheduler names it; None: this host's

    def tell(self, path: str, exit_code: int, findings: list[str], held_by: Any = None, scheduled: str | None = None,
             head: str | None = None) -> Any:
        """What `path` (drain_rule.PATHS) did with the node for a run that exited `exit_code` with `findings` (the
        failed checks' "<id> <reason>"): something with `verb`, `describe()` and `record(path)`. An automatic
        path's drain is put to the breaker (`held_by`, node.yaml's). Raises Unreached."""

    def holds(self) -> Held:
        """Who holds the node now and whether work still runs there (gpucheck watch's repairs). Raises
        Unreached."""

    def job(self) -> str | None:
        """The scheduler's job this run is in (a scheduled check runs in one), or None."""

    def stopped(self) -> Stop:
        """How the scheduler stopped the scheduled check of this job, which a signal just ended."""


# Slurm's state of a job it stopped, once settled: a preempted job is requeued (PENDING again, Restarts + 1), a
# cancelled one CANCELLED. Both read COMPLETING at the moment the SIGTERM arrives (Slurm 22.05, seen in the lab), so
# the state is read again until it settles, well inside KillWait (30 s by default) before Slurm's SIGKILL.
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "PREEMPTED"}
UNSETTLED = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"}
SETTLE_S = 10.0


class Slurm:
    name, title = "slurm", "Slurm"

    def __init__(self, node: str | None = None) -> None:
        self.node = node

    def tell(self, path: str, exit_code: int, findings: list[str], held_by: Any = None, scheduled: str | None = None,
             head: str | None = None) -> Any:
        from . import drain_rule
        from . import slurm as client

        try:
            return drain_rule.tell(path, exit_code, findings, self.node, scheduled, held_by, head)
        except client.SlurmError as exc:
            raise Unreached(str(exc)) from None

    def holds(self) -> Held:
        from . import drain_rule
        from . import slurm as client

        try:
            node = client.show_node(client.this_node(self.node))
        except client.SlurmError as exc:
            raise Unreached(str(exc)) from None
        ours = (node.drained and drain_rule.holder_of(node) in drain_rule.REPAIRABLE
                and not node.reason.startswith(drain_rule.NEEDS_HANDS_HEAD))
        return Held(node.name, ours, node.has_jobs, f"{node.state}, {node.reason or 'no reason'}")

    def job(self) -> str | None:
        return os.environ.get("SLURM_JOB_ID")

    def stopped(self) -> Stop:
        from . import slurm as client

        job = self.job() or "?"
        deadline = time.monotonic() + SETTLE_S
        try:
            while True:
                state, reason = client.job_state(job)
                if state not in UNSETTLED or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        except client.SlurmError as exc:
            state, reason = "not read", str(exc)
        outcome = ("preempted" if state in REQUEUED else "cancelled" if state.startswith("CANCEL")
                   else "out of time" if state in ("TIMEOUT", "DEADLINE") else "stopped")
        again = {"preempted": "Slurm requeued it: it runs again once the node is idle",
                 "stopped": "whether Slurm requeues it is not known"}.get(
            outcome, "it does not run again until `gpucheck schedule` queues it")
        return Stop(outcome, job, state, f"job {job} {state}, reason {reason}", f"job {job} {state}", again)


class Kubernetes:
    name, title = "kubernetes", "Kubernetes"

    def __init__(self, node: str | None = None, kubeconfig: str | None = None) -> None:
        self.node, self.kubeconfig = node, kubeconfig

    def tell(self, path: str, exit_code: int, findings: list[str], held_by: Any = None, scheduled: str | None = None,
             head: str | None = None) -> Any:
        """`scheduled` and `head` are words of Slurm's drain reason: a Node's condition says the findings, those of
        a node handed to a person after its repair starting `needs-hands:` (node_rule.NEEDS_HANDS)."""
        from . import drain_rule
        from .kubernetes import api, node_rule

        active_passed = drain_rule.PATHS[path][0] == "active" and drain_rule.verdict_of(exit_code) == "pass"
        if head == drain_rule.NEEDS_HANDS_HEAD:
            findings = [f"{node_rule.NEEDS_HANDS} {finding}" for finding in findings]
        try:
            return api.tell(path, exit_code, findings, self.node, self.kubeconfig, active_passed, held_by)
        except api.KubernetesError as exc:
            raise Unreached(str(exc)) from None

    def holds(self) -> Held:
        from . import drain_rule
        from .kubernetes import api, node_rule

        name = api.this_node(self.node)
        try:
            client = api.connect(self.kubeconfig)
            node, pods = api.read_node(client, name), api.gpu_pods(client, name)
        except api.KubernetesError as exc:
            raise Unreached(str(exc)) from None
        holder, message = node_rule.holder_of(node), node_rule.message_of(node)
        ours = holder in drain_rule.REPAIRABLE and not message.startswith(node_rule.NEEDS_HANDS)
        taint = f"tainted {node_rule.TAINT_KEY}={holder}" if holder != "nobody" else "not tainted by gpucheck"
        using = f"; its GPUs held by pod {', '.join(pods[:3])}" if pods else ""
        return Held(name, ours, bool(pods), f"{taint}, {message or 'no condition'}{using}")

    def job(self) -> str | None:
        from .kubernetes import pod_stop

        return pod_stop.this_pod()[0] if os.environ.get("KUBERNETES_SERVICE_HOST") else None

    def stopped(self) -> Stop:
        from .kubernetes import api, pod_stop

        job = self.job() or "?"
        try:
            outcome, said = pod_stop.how_stopped(self.kubeconfig)
        except api.KubernetesError as exc:
            outcome, said = "stopped", f"not read: {exc}"
        again = {"preempted": "its Job starts it again once the node's GPUs are free",
                 "cancelled": "it does not run again unless its Job is created again"}.get(
            outcome, "whether its Job starts it again is not known")
        return Stop(outcome, job, outcome, said, f"pod {job}", again)


def add_kubernetes_options(parser: Any) -> None:
    """The options naming the Node and the API server, alike in `gpucheck node` and `gpucheck watch`."""
    parser.add_argument("--kubernetes-node", metavar="NAME", help="this node's Node (default: $NODE_NAME, as "
                        "deploy/kubernetes sets it from the pod's spec.nodeName, else this host's name)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="for --kubernetes (default: in a pod its service "
                        "account, else $KUBECONFIG, else ~/.kube/config)")


def misused(args: argparse.Namespace) -> str | None:
    """What is wrong with the scheduler options given together, in one line, or None."""
    if args.kubernetes and args.slurm:
        return "--kubernetes and --slurm each tell a scheduler: give one"
    if (args.kubernetes_node or args.kubeconfig) and not args.kubernetes:
        return "--kubernetes-node and --kubeconfig need --kubernetes"
    return None


def scheduler_of(args: argparse.Namespace) -> Scheduler | None:
    """The scheduler `gpucheck node`'s arguments name (--scheduled alone: Slurm's, as `gpucheck schedule` runs it)."""
    if args.kubernetes:
        return Kubernetes(args.kubernetes_node, args.kubeconfig)
    if args.slurm or args.scheduled:
        return Slurm(args.slurm_node)
    return None


def chosen(args: argparse.Namespace, site: Any, active: bool) -> Tell | None:
    """The scheduler `gpucheck node`'s arguments name, or None: `active` says the run had active checks."""
    if args.kubernetes:
        return lambda report: kubernetes(args.kubernetes_node, report, active, args.kubeconfig, site.breaker)
    if args.slurm or args.scheduled:
        return lambda report: slurm(args.slurm_node, report, args.scheduled, site.breaker)
    return None


def slurm(node: str | None, report: Any, scheduled: str | None = None, held_by: Any = None) -> int:
    """Drain or resume this node in Slurm by the report's verdict. The path is the scheduled check's, a prolog's
    or epilog's (Slurm says so in SLURM_SCRIPT_CONTEXT), else the health check's."""
    context = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
    path = "scheduled" if scheduled else "prolog" if context.startswith(("prolog", "epilog")) else "health-check"
    return told(Slurm(node), path, report, held_by, scheduled)


def kubernetes(node: str | None, report: Any, active: bool, kubeconfig: str | None = None,
               held_by: Any = None) -> int:
    """Taint, untaint or keep this node's Kubernetes Node by the report's verdict: a run with active checks (a
    Job's --full) takes an active check's path, any other the health check's."""
    return told(Kubernetes(node, kubeconfig), "scheduled" if active else "health-check", report, held_by)


def told(scheduler: Scheduler, path: str, report: Any, held_by: Any = None, scheduled: str | None = None) -> int:
    """`path`'s run told to `scheduler`, what it did said and kept in the report (facts.slurm or facts.kubernetes:
    the history's transitions); the exit code."""
    from .drain_rule import findings, verdict_of

    try:
        done = scheduler.tell(path, report.exit_code, findings(report.results), held_by, scheduled)
    except Unreached as exc:
        print(f"gpucheck: {scheduler.name}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"gpucheck: {scheduler.name}: {done.describe()}", file=sys.stderr)
    report.facts[scheduler.name] = done.record(path)
    if done.verb == "held":
        return EXIT_OK
    return EXIT_FAIL if verdict_of(report.exit_code) == "fail" else EXIT_OK  # drained or tainted now, or before
