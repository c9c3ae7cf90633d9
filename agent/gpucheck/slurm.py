"""Slurm's side, through its client commands: a node's state and reason (`show_node`), this machine's NodeName
(`this_node`), every node (`all_nodes`), and `scontrol` itself. What gpucheck may do with a node it judged is
drain_rule's; this module only reads and runs.

Whatever a client says when it cannot (not installed, slurmctld down, a node Slurm does not know, no permission) is
a SlurmError with one line, never a traceback. Clients find the cluster as scontrol does: SLURM_CONF, else
/etc/slurm/slurm.conf.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from .process import run

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
    reason_at: str = ""  # when the reason was set, as Slurm appends it ("[root@2026-11-29T18:08:17]": local time)

    @property
    def flags(self) -> set[str]:
        return set(self.state.rstrip("*").replace("*", "").split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: no new job goes there."""
        return "DRAIN" in self.flags or self.state.startswith("DRAIN")

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


# A node name scontrol would read as more than one node (a hostlist: gpu-[01-26], a,b, gpu-*) or as nothing.
NOT_ONE_NODE = re.compile(r"[\[\],*?\s=]|^$")


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
    # Reason is the record's last field: on a line of its own (show node NAME), or the rest of the line
    # (--oneliner). A line that starts with it is preferred: an admin's Comment before it may hold "Reason=".
    reason = re.search(r"^\s*Reason=(.*)$", text, re.M) or re.search(r"(?:^|\s)Reason=(.*)$", text, re.M)
    gres = re.search(r"(?:^|\s)Gres=(\S+)", text)

    def value(m: re.Match[str] | None) -> str:
        text = m.group(1).strip() if m else ""
        return "" if text == "(null)" else text

    stamp = re.search(r"\s*\[[^\]]*@([^\]]*)\]\s*$", value(reason))
    return NodeState(name, value(state), value(reason)[:stamp.start()] if stamp else value(reason), value(gres),
                     stamp.group(1) if stamp else "")


def this_node(explicit: str | None = None) -> str:
    """This machine's NodeName in Slurm: `explicit`, else $SLURMD_NODENAME (set in prologs and epilogs), else the
    node whose NodeName or NodeHostName is this host's name (short or full), as sinfo lists them: two columns of
    Slurm's own, never a search of a node's free text (a drain reason, a comment) that could name another host."""
    if explicit is not None:
        return one_node(explicit)
    if os.environ.get("SLURMD_NODENAME"):
        return one_node(os.environ["SLURMD_NODENAME"])
    full = socket.gethostname()
    names = {full, full.split(".")[0]}
    listing = client("sinfo", ["--all", "--noheader", "--Node", "--format=%N|%n"])
    found = {node for node, host in (line.strip().split("|", 1) for line in listing.splitlines() if "|" in line)
             if node in names or host in names}
    if len(found) == 1:
        return found.pop()
    if found:
        raise SlurmError(f"Slurm has more than one node for {' or '.join(sorted(names))} ({', '.join(sorted(found))}):"
                         " pass this node's name with --slurm-node")
    raise SlurmError(f"Slurm knows no node named {' or '.join(sorted(names))} (NodeName or NodeHostName): "
                     "pass the node's name with --slurm-node")
