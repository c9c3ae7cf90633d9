"""Telling the workload manager what a `gpucheck node` run found: Slurm (drain_rule: drain, resume) or Kubernetes
(kubernetes/node_rule: taint, condition, label), one contract (docs/slurm.md's table) and one interface: `chosen`
gives the function that tells the one the command line names; it writes what it did into the report's facts (the
history's transitions) and returns the exit code the run gives.

Exit codes, alike for both: 2 on a failure (the node is drained or tainted now, or was before), 3 when the
scheduler could not be told, else 0, also after a harness error and when the breaker held the drain (a prolog's
non-zero exit would make Slurm drain the node itself).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from .model import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN

Tell = Callable[[Any], int]  # the run's report -> the exit code


def chosen(args: argparse.Namespace, site: Any, active: bool) -> Tell | None:
    """The scheduler `gpucheck node`'s arguments name, or None: `active` says the run had active checks."""
    if args.slurm or args.scheduled:
        return lambda report: slurm(args.slurm_node, report, args.scheduled, site.breaker)
    if args.kubernetes:
        return lambda report: kubernetes(args.kubernetes_node, report, active, args.kubeconfig, site.breaker)
    return None


def slurm(node: str | None, report: Any, scheduled: str | None = None, held_by: Any = None) -> int:
    """Drain or resume this node in Slurm by the report's verdict and drain_rule's table (a drain put to the
    breaker, node.yaml's `held_by`). The path is the scheduled check's, a prolog's or epilog's (Slurm says so in
    SLURM_SCRIPT_CONTEXT), else the health check's."""
    from . import drain_rule
    from . import slurm as slurm_client

    context = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
    path = "scheduled" if scheduled else "prolog" if context.startswith(("prolog", "epilog")) else "health-check"
    try:
        action = drain_rule.tell(path, report.exit_code, drain_rule.findings(report.results), node, scheduled,
                                 held_by)
    except slurm_client.SlurmError as exc:
        print(f"gpucheck: slurm: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    return _said("slurm", path, action, report)


def kubernetes(node: str | None, report: Any, active: bool, kubeconfig: str | None = None,
               held_by: Any = None) -> int:
    """Taint, untaint or keep this node's Kubernetes Node by the same table (kubernetes/node_rule), a taint put to
    the breaker (node.yaml's `held_by`): a run with active checks (a Job's --full) takes an active check's path, any
    other the health check's."""
    from . import drain_rule
    from .kubernetes import api

    path = "scheduled" if active else "health-check"
    passed = active and report.exit_code in (EXIT_OK, EXIT_WARN)
    try:
        change = api.tell(path, report.exit_code, drain_rule.findings(report.results), node, kubeconfig, passed,
                          held_by)
    except api.KubernetesError as exc:
        print(f"gpucheck: kubernetes: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    return _said("kubernetes", path, change, report)


def _said(scheduler: str, path: str, done: Any, report: Any) -> int:
    """What `path` did (a drain_rule.Action or a node_rule.Change: describe, record, verb) said, and kept in the
    report (facts.slurm or facts.kubernetes: the history's transitions); the exit code."""
    from .drain_rule import verdict_of

    print(f"gpucheck: {scheduler}: {done.describe()}", file=sys.stderr)
    report.facts[scheduler] = done.record(path)
    if done.verb == "held":
        return EXIT_OK
    return EXIT_FAIL if verdict_of(report.exit_code) == "fail" else EXIT_OK  # drained or tainted now, or before
