"""`gpucheck cluster --launcher slurm`: the node checks on every node with one `srun` (one task per node, the
whole node: --exclusive), each node's output taken apart from the others' and judged exactly as the SSH fan-out
judges it (fanout.interpret). A node Slurm will not start a job on now (drained, down, not responding, busy) is
checked over SSH instead, at the same time, and says why: a drained node is the one an admin most needs checked.

Each task's stdout, stderr and exit status come back whole (srun.WRAP), so a node's report is judged from its own
output however srun interleaves the nodes'. A node whose task never said its exit status (its slurmd died, Slurm
killed the step) is an error naming what srun said about it; one still running when the job's time ran out is
timed out, as over SSH."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import NamedTuple

from ... import slurm
from ...model import Status
from .. import fanout
from ..context import NodeOutcome, Options
from ..inventory import Host
from ..ssh.result import tail
from . import srun

ALLOCATE_S = 30.0  # srun --immediate: the nodes were idle a moment ago; waiting longer means someone took them


class Split(NamedTuple):
    """What srun should run where, and where SSH goes instead (host name -> why); `busy`: the SSH hosts where a job
    runs, checked without the active checks whatever --full says (their GPUs are the job's)."""

    srun: list[Host]
    ssh: dict[str, str]
    busy: set[str]


def split(hosts: list[Host], states: dict[str, slurm.NodeState]) -> Split:
    """Hosts srun can run on now, and the others with why not."""
    ready, other, busy = [], {}, set()
    for host in hosts:
        state = states.get(srun.node_name(host))
        if state is None:
            other[host.name] = f"Slurm has no node {srun.node_name(host)} (set its slurm_node_name host variable)"
        elif not state.runs_jobs_now:
            other[host.name] = f"{state.state} in Slurm" + (f" ({state.reason})" if state.reason else "")
            if state.has_jobs:
                busy.add(host.name)
                other[host.name] += "; a job runs there: passive checks only"
        else:
            ready.append(host)
    return Split(ready, other, busy)


def outcome(host: str, task: srun.Task | None, seconds: float, wall_s: float, srun_said: str) -> NodeOutcome:
    """One node's outcome from what its task gave, judged as the SSH fan-out judges a command's output."""
    if task is None or task.exit is None:
        said = "; ".join(x.strip() for x in srun_said.splitlines() if host in x or "step" in x.lower())[:300]
        got = "\n".join(x for x in ((task.stderr, task.stdout) if task else ()) if x.strip())
        return NodeOutcome(host, Status.ERROR, "no report through srun: the task ended without an exit status"
                           + (f" ({said})" if said else ""), "slurm", wall_s, None, evidence=tail(
                               "\n".join(x for x in (got, srun_said) if x.strip()), fanout.TAIL_CHARS), via="srun")
    done = fanout.interpret(host, task.stdout, task.stderr, task.exit, wall_s, seconds)
    done.via = "srun"
    return done


def through_srun(hosts: list[Host], options: Options, gpus: int, on_done: Callable[[NodeOutcome], None]) -> None:
    """One srun over `hosts` (task i on host i); each node's outcome goes to on_done as its task ends, the rest's
    when srun does."""
    if not hosts:
        return
    names = [srun.node_name(h) for h in hosts]
    by_name = {srun.node_name(h): h.name for h in hosts}
    seconds = options.host_timeout
    program = ["/bin/sh", "-c", fanout.build_command(options)]
    job = srun.Job("nodes", names, program, seconds + ALLOCATE_S, gpus_per_node=gpus, immediate_s=ALLOCATE_S)
    told: set[str] = set()
    began = time.monotonic()

    def host_of(number: int, task: srun.Task | None) -> str:
        return (by_name.get(task.node) if task and task.node else None) or hosts[number].name

    def tell(number: int, task: srun.Task) -> None:
        host = host_of(number, task)
        if host not in told:
            told.add(host)
            on_done(outcome(host, task, seconds, time.monotonic() - began, ""))

    step = srun.run(job, on_task=tell)
    done = step.remote
    for number in range(len(hosts)):
        task = step.tasks.get(number)
        name = host_of(number, task)
        if name in told:
            continue
        told.add(name)
        if done.timed_out:  # still running when the job's time ran out: hung, as over SSH
            on_done(NodeOutcome(name, Status.FAIL, f"timed out: no report within {seconds:g} s (hung agent?)",
                                "timeout", done.wall_s, evidence=done.evidence(), via="srun"))
        elif done.error and task is None:  # Slurm ran nothing there: its reason is the node's
            on_done(NodeOutcome(name, Status.ERROR, done.error, "slurm", done.wall_s, evidence=done.evidence(),
                                via="srun"))
        else:
            on_done(outcome(name, task, seconds, done.wall_s, done.stderr))


def fan_out(hosts: Iterable[Host], options: Options, states: dict[str, slurm.NodeState],
            on_done: Callable[[NodeOutcome], None] | None = None) -> dict[str, NodeOutcome]:
    """Every host through srun, or over SSH where Slurm cannot run a job now (`states`: slurm.all_nodes())."""
    hosts = list(hosts)
    plan = split(hosts, states)
    outcomes: dict[str, NodeOutcome] = {}
    lock = threading.Lock()

    def done(result: NodeOutcome) -> None:
        with lock:
            if result.host in plan.ssh:
                result.slurm_state = plan.ssh[result.host]
            outcomes[result.host] = result
            if on_done:
                on_done(result)

    by_ssh = [h for h in hosts if h.name in plan.ssh and h.name not in plan.busy]
    with_jobs = [h for h in hosts if h.name in plan.busy]
    asides = [threading.Thread(target=fanout.fan_out, args=(group, group_options, done), daemon=True,
                               name="gpucheck-ssh-aside")
              for group, group_options in ((by_ssh, options), (with_jobs, replace(options, full=False))) if group]
    for side in asides:
        side.start()
    gpus = min((states[srun.node_name(h)].gpus for h in plan.srun), default=0)
    through_srun(plan.srun, options, gpus, done)
    for side in asides:
        side.join()
    return {h.name: outcomes[h.name] for h in hosts if h.name in outcomes}


def summary(outcomes: dict[str, NodeOutcome]) -> str:
    """One line: how many nodes were checked through srun, and which over SSH and why."""
    aside = {n: o.slurm_state for n, o in outcomes.items() if o.slurm_state}
    through = sum(1 for o in outcomes.values() if o.via == "srun")
    text = f"node checks: {through} node(s) through srun"
    if aside:
        shown = "; ".join(f"{n} ({why[:100]})" for n, why in list(aside.items())[:6])
        text += f"; over SSH, as Slurm runs no job there now: {shown}" + (
            f" and {len(aside) - 6} more" if len(aside) > 6 else "")
    return text
