"""Telling Slurm what gpucheck found, through `scontrol`: drain a failed node with a `gpucheck:` reason, resume it
once it passes, and never touch a drain someone else made (LBNL NHC's rule: an admin's own drain is never undone).

One job: read a node's state and reason, and drain or resume it. `gpucheck node --slurm` (HealthCheckProgram,
prolog, epilog) and `gpucheck cluster --drain` both decide with `decide` and act with `apply`. Whatever
scontrol says when it cannot (not installed, slurmctld down, a node Slurm does not know, no permission) is a
SlurmError with one line, never a traceback. Clients find the cluster as scontrol does: SLURM_CONF, else
/etc/slurm/slurm.conf.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from .model import EXIT_FAIL, EXIT_UNKNOWN
from .process import run

REASON_PREFIX = "gpucheck:"  # a resume undoes only the drains that carry it
# The rolling upgrade's drain (playbooks/upgrade.yml): a node half-way through its upgrade, or stopped by one, may
# pass the passive checks, and must not be put back by them; only the upgrade resumes it.
UPGRADE_PREFIX = "gpucheck: upgrade"
# A scheduled active check's drain (gpucheck schedule, docs/slurm.md): the passive health check cannot see what an
# active check saw (a slow GPU, a memory fault under load), so its pass must not put the node back.
SCHEDULED_PREFIX = "gpucheck: scheduled"
REASON_MAX = 240  # Slurm keeps longer reasons, but sinfo -R and squeue show the first few dozen characters
SCONTROL_TIMEOUT_S = 30.0
# What scontrol prints when it cannot do what it was asked, and what that means here.
KNOWN_FAILURES = (
    (re.compile(r"Unable to contact slurm controller|Connection refused|connect failure", re.I),
     "slurmctld does not answer (is it running, and is this machine's slurm.conf the cluster's?)"),
    (re.compile(r"fetch_config|_establish_config_source|Could not establish a configuration source", re.I),
     "no Slurm configuration here (SLURM_CONF, /etc/slurm/slurm.conf): is this machine a client of the cluster?"),
    (re.compile(r"Node \S+ not found|Invalid node name", re.I), "Slurm does not know node {node}"),
    (re.compile(r"Invalid user id|Access/permission denied|Permission denied", re.I),
     "not allowed to change node states (run as root or SlurmUser)"),
    (re.compile(r"Invalid node state specified", re.I), "Slurm refused to {doing} {node}"),
    (re.compile(r"authentication error|Munge", re.I), "munge refused the request (is munged running, with the "
                                                      "cluster's key?)"),
)


class SlurmError(Exception):
    """scontrol could not do it. str(e) is one line."""


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # as scontrol prints it: IDLE, MIXED+DRAIN, DOWN*+DRAIN ...
    reason: str  # without the "[user@time]" Slurm appends
    gres: str = ""  # as scontrol prints it: gpu:8, gpu:h100:8(S:0-1), (null)

    @property
    def flags(self) -> set[str]:
        return set(self.state.rstrip("*").replace("*", "").split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: no new job goes there."""
        return "DRAIN" in self.flags or self.state.startswith("DRAIN")

    @property
    def out_of_service(self) -> bool:
        """Drained, down, failed or in maintenance: taken out of service by whoever set that state."""
        return bool(self.flags & OUT_OF_SERVICE) or self.drained

    @property
    def gpus(self) -> int:
        """The GPUs Slurm has as this node's GRES (gpu:8, gpu:h100:8(S:0-1), several types summed)."""
        counts = re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", self.gres)
        return sum(int(n) for n in counts)

    @property
    def runs_jobs_now(self) -> bool:
        """Idle and in service, its slurmd answering: a job asking for the whole node starts there at once."""
        return self.state == "IDLE"

    @property
    def has_jobs(self) -> bool:
        """A job runs (or is ending) there: its GPUs are someone's, no active check may load them."""
        return bool(self.flags & {"ALLOCATED", "ALLOC", "MIXED", "COMPLETING", "COMP"})

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)

    @property
    def upgrading(self) -> bool:
        return self.drained and self.reason.startswith(UPGRADE_PREFIX)

    @property
    def drained_by_scheduled_check(self) -> bool:
        return self.drained and self.reason.startswith(SCHEDULED_PREFIX)


# A node name scontrol would read as more than one node (a hostlist: gpu-[01-26], a,b, gpu-*) or as nothing.
NOT_ONE_NODE = re.compile(r"[\[\],*?\s=]|^$")
# States in which someone (an admin, or Slurm itself) took the node out of service: theirs to end, not gpucheck's.
OUT_OF_SERVICE = {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING", "MAINT"}


def one_node(name: str) -> str:
    """`name`, checked to mean exactly one node to scontrol: gpucheck acts on the node it judged, never a range."""
    if NOT_ONE_NODE.search(name):
        raise SlurmError(f"{name!r} is not one Slurm node name (scontrol reads [ ] , * ? = and blanks as a list or a "
                         "pattern): give the node's own NodeName (--slurm-node, slurm_node_name)")
    return name


def scontrol(args: list[str], node: str = "", doing: str = "change the state of") -> str:
    """Run scontrol; its stdout, or a SlurmError saying in one line why not."""
    return client("scontrol", args, node, doing)


def client(program: str, args: list[str], node: str = "", doing: str = "change the state of",
           input_text: str | None = None) -> str:
    """Run one of Slurm's client commands (scontrol, squeue, sbatch, sinfo); its stdout, or a SlurmError saying in
    one line why not."""
    done = run([program, *args], SCONTROL_TIMEOUT_S, input_text=input_text)
    if done.not_found:
        raise SlurmError(f"{program} not found on PATH: is this a Slurm node (the slurm-client package)?")
    if done.timed_out:
        raise SlurmError(f"{program} {args[0] if args else ''} did not answer within {SCONTROL_TIMEOUT_S:g} s "
                         "(slurmctld hung?)")
    if done.returncode != 0:
        said = " ".join((done.stderr.strip() or done.stdout.strip()).split())
        for pattern, meaning in KNOWN_FAILURES:
            if pattern.search(said):
                raise SlurmError(f"{meaning.format(node=node or '?', doing=doing)}: {program} said: {said[:200]}")
        raise SlurmError(f"{program} {' '.join(args[:2])} exited {done.returncode}: {said[:200]}")
    return done.stdout


def show_node(name: str) -> NodeState:
    """The node's state and reason (`scontrol show node NAME`: one `key=value` line each, Reason whole)."""
    text = scontrol(["show", "node", one_node(name)], name)
    if re.search(r"(?:^|\s)State=\S", text) is None:
        raise SlurmError(f"Slurm does not know node {name}: scontrol show node printed no State")
    return _node_state(name, text)


def job_state(job_id: str) -> tuple[str, str]:
    """(JobState, Reason) of a job as slurmctld has it now (`scontrol show job ID`)."""
    text = client("scontrol", ["show", "job", job_id], doing="read the state of job")
    state = re.search(r"(?:^|\s)JobState=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(\S+)", text)
    return (state.group(1) if state else "UNKNOWN"), (reason.group(1) if reason else "None")


def all_nodes() -> dict[str, NodeState]:
    """Every node Slurm knows, by NodeName (`scontrol show node --oneliner`: one line each, Reason last)."""
    out: dict[str, NodeState] = {}
    for line in scontrol(["show", "node", "--oneliner"]).splitlines():
        name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        if name is not None and re.search(r"(?:^|\s)State=\S", line):
            out[name.group(1)] = _node_state(name.group(1), line)
    return out


def _node_state(name: str, text: str) -> NodeState:
    """One node's record as scontrol prints it, on its own lines or --oneliner: Reason runs to the end of its line
    (less the "[user@time]" Slurm appends), "(null)" is nothing."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(.*)$", text, re.M)
    gres = re.search(r"(?:^|\s)Gres=(\S+)", text)

    def value(m: re.Match[str] | None) -> str:
        text = m.group(1).strip() if m else ""
        return "" if text == "(null)" else text

    return NodeState(name, value(state), re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", value(reason)), value(gres))


def this_node(explicit: str | None = None) -> str:
    """This machine's NodeName in Slurm: `explicit`, else $SLURMD_NODENAME (set in prologs and epilogs), else the
    node whose NodeName or NodeHostName is this host's name (short or full)."""
    if explicit:
        return explicit
    if os.environ.get("SLURMD_NODENAME"):
        return os.environ["SLURMD_NODENAME"]
    full = socket.gethostname()
    names = {full, full.split(".")[0]}
    listing = scontrol(["show", "node", "--oneliner"])
    for line in listing.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if fields.get("NodeName") in names or fields.get("NodeHostName") in names:
            return fields["NodeName"]
    raise SlurmError(f"Slurm knows no node named {' or '.join(sorted(names))} (NodeName or NodeHostName): "
                     "pass the node's name with --slurm-node")


def drain_reason(findings: list[str], scheduled: str | None = None) -> str:
    """`gpucheck: <check> <reason>[; ...]` on one line (`gpucheck: scheduled KIND: ...` for a scheduled active
    check), at most REASON_MAX characters."""
    text = " ".join("; ".join(findings).split())
    head = f"{SCHEDULED_PREFIX} {scheduled}:" if scheduled else REASON_PREFIX
    reason = f"{head} {text}".strip()
    return reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 1] + "…"


@dataclass(frozen=True)
class Action:
    verb: str  # drain | resume | keep
    node: str
    reason: str  # the drain reason, or why nothing is done

    def describe(self) -> str:
        if self.verb == "drain":
            return f"drained {self.node}: {self.reason}"
        if self.verb == "resume":
            return f"resumed {self.node} (its drain was gpucheck's: {self.reason})"
        return f"left {self.node} as it is: {self.reason}"


def verdict_of(exit_code: int) -> str:
    """fail (a check failed), error (could not judge, nothing failed) or pass (warnings are no reason to drain)."""
    return "fail" if exit_code == EXIT_FAIL else "error" if exit_code == EXIT_UNKNOWN else "pass"


def decide(current: NodeState, verdict: str, findings: list[str], scheduled: str | None = None) -> Action:
    """What to do with a node gpucheck judged: `verdict` is fail (drain), pass (resume a drain of ours) or
    error (could not judge: change nothing, a blip must never drain a node or put a bad one back). `scheduled`:
    the kind of scheduled active check that judged it (gpucheck schedule), None for any other run."""
    name = current.name
    if current.upgrading and verdict != "error":
        return Action("keep", name, f"drained by gpucheck's rolling upgrade ({current.reason}): only the upgrade "
                                    "(playbooks/upgrade.yml) resumes it")
    if verdict == "fail":
        if current.out_of_service and not current.ours:
            return Action("keep", name, f"already {current.state} by someone else ({current.reason or 'no reason'}): "
                                        "gpucheck leaves an admin's state alone")
        reason = drain_reason(findings, scheduled)
        if current.drained and current.reason == reason:
            return Action("keep", name, f"already drained for the same reason ({reason})")
        return Action("drain", name, reason)
    if verdict == "pass":
        if current.drained_by_scheduled_check and not scheduled:
            return Action("keep", name, f"drained by a scheduled active check ({current.reason}): this run cannot "
                                        "see what that check saw; resume it once repaired (scontrol update "
                                        f"nodename={name} state=resume)")
        if current.drained and current.ours:
            return Action("resume", name, current.reason)
        why = f"drained by someone else ({current.reason or 'no reason'}): only its owner resumes it" \
            if current.drained else f"in service ({current.state})"
        return Action("keep", name, why)
    return Action("keep", name, "gpucheck could not judge it (a harness error): a node is never drained or resumed "
                                "on a run that proved nothing")


def apply(action: Action) -> None:
    if action.verb == "drain":
        scontrol(["update", f"nodename={one_node(action.node)}", "state=drain", f"reason={action.reason}"], action.node,
                 "drain")
    elif action.verb == "resume":
        scontrol(["update", f"nodename={one_node(action.node)}", "state=resume"], action.node,
                 "resume (a node whose slurmd does not respond cannot be resumed)")
