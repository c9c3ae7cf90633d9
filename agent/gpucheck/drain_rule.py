"""Who holds a Slurm node, and what each of gpucheck's seven paths may do with it: one table, one function.

A node is held by whoever took it out of service, known from its state and reason (`holder_of`): an admin (a drain
with their own reason, DOWN, FAIL, MAINT, a pending reboot), one of gpucheck's passive checks (`gpucheck: <check>
...`), one of its active checks (`gpucheck: scheduled KIND: ...`, `gpucheck: cluster: ...`), the watcher (`gpucheck:
watch: ...`), the rolling upgrade (`gpucheck: upgrade ...`), or nobody. Each path (the health check, a prolog, a
scheduled check, `gpucheck cluster --drain`, `gpucheck watch`, its repair, the rolling upgrade) asks `decide`, which
reads RULES: what a fail, a pass and a could-not-judge may do to a node so held. A repair holds the node as an active
check does (`gpucheck: repair: ...`, `gpucheck: needs-hands: ...`): only a proof returns it. docs/slurm.md prints
the same table (`render_table`; a test holds them equal).

The rule's reasons: nobody undoes a state they did not make, except that an active check's pass clears a passive
drain (it ran every passive check too) and the upgrade's clears what it found before it (its last check is a full
passive run on the new stack); a passive check never undoes or overwrites what only an active check could see; a
pending reboot is the admin's (a resume cancels it: measured on slurmctld 22.05, as LBNL NHC found); a run that
proved nothing changes nothing; the watcher only drains (one check's pass proves nothing of the node), and what it
drained returns only through proof: an active check's pass (docs/watch.md).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from . import breaker
from .config import BreakerSettings
from .model import EXIT_FAIL, EXIT_UNKNOWN
from .slurm import NodeState, all_nodes, one_node, scontrol, show_node, this_node

REASON_PREFIX = "gpucheck:"  # every reason gpucheck writes starts so
UPGRADE_HEAD = "gpucheck: upgrade"  # + " to STACK (driver V)" / " to STACK stopped: ..." (roles/gpu_upgrade)
SCHEDULED_HEAD = "gpucheck: scheduled"  # + " KIND:" (gpucheck schedule)
CLUSTER_HEAD = "gpucheck: cluster:"  # gpucheck cluster --drain
WATCH_HEAD = "gpucheck: watch:"  # gpucheck watch --slurm
REPAIR_HEAD = "gpucheck: repair:"  # gpucheck watch repairing a node, then proving it (repair/)
NEEDS_HANDS_HEAD = "gpucheck: needs-hands:"  # a repair that did not work, or a fault back soon after one
REASON_MAX = 240  # Slurm keeps longer reasons, but sinfo -R and squeue show the first few dozen characters
VERDICTS = ("fail", "pass", "error")
REPAIRABLE = ("passive", "watch", "active")  # the holders whose drain (or taint) gpucheck watch's repair takes over

# Who holds the node, in the order `holder_of` asks: a pending reboot and maintenance first (whatever else the
# node shows, its admin has a plan for it), then the drain's reason, then DOWN and FAIL without a drain.
HOLDERS = {
    "nobody": "in service (IDLE, MIXED, ALLOCATED ...)",
    "passive": "drained by a passive check: `gpucheck: <check> ...` (health check, prolog)",
    "active": "drained by an active check: `gpucheck: scheduled KIND: ...`, `gpucheck: cluster: ...`; or by a repair "
              "under way or one that needs hands: `gpucheck: repair: ...`, `gpucheck: needs-hands: ...`",
    "watch": "drained by the watcher, as a fault appeared: `gpucheck: watch: <check> ...`",
    "upgrade": "drained by the rolling upgrade: `gpucheck: upgrade ...`",
    "admin-drain": "drained by someone else (any other reason, none included)",
    "down": "DOWN (no drain)",
    "fail": "FAIL or FAILING",
    "maint": "MAINT (a maintenance reservation is active)",
    "reboot": "a reboot pending or under way (`scontrol reboot`: REBOOT_REQUESTED, REBOOT_ISSUED)",
}
# The seven paths, each with the rules of its kind.
PATHS = {
    "health-check": ("passive", "Slurm's HealthCheckProgram: `gpucheck node --slurm`"),
    "prolog": ("passive", "a prolog or epilog: `gpucheck node --slurm` ($SLURMD_NODENAME)"),
    "scheduled": ("active", "a scheduled active check: `gpucheck node --scheduled KIND` (gpucheck schedule)"),
    "cluster": ("active", "`gpucheck cluster --drain` from the admin node"),
    "watch": ("watch", "the watcher, as a fault appears: `gpucheck watch --slurm` (never resumes)"),
    "repair": ("active", "the watcher's repair: takes the drain, then resumes on its proof (the repaired GPUs' "
                         "active checks) or hands the node to a person"),
    "upgrade": ("upgrade", "the rolling upgrade: `gpucheck slurm apply --as upgrade` (playbooks/upgrade.yml)"),
}
_KEEP = ("keep", "keep", "keep")
# holder -> kind of path -> what (fail, pass, error) may do: drain (with the path's own reason), resume, keep.
RULES: dict[str, dict[str, tuple[str, str, str]]] = {
    "nobody": {"passive": ("drain", "keep", "keep"), "active": ("drain", "keep", "keep"),
               "watch": ("drain", "keep", "keep"), "upgrade": ("drain", "keep", "keep")},
    # the watcher's drain replaces a passive one: what it saw as it happened then waits for proof, not a passive pass
    "passive": {"passive": ("drain", "resume", "keep"), "active": ("drain", "resume", "keep"),
                "watch": ("drain", "keep", "keep"), "upgrade": ("drain", "resume", "keep")},
    "active": {"passive": _KEEP, "active": ("drain", "resume", "keep"), "watch": _KEEP, "upgrade": _KEEP},
    "watch": {"passive": _KEEP, "active": ("drain", "resume", "keep"), "watch": _KEEP, "upgrade": _KEEP},
    "upgrade": {"passive": _KEEP, "active": _KEEP, "watch": _KEEP, "upgrade": ("drain", "resume", "keep")},
    **{holder: {"passive": _KEEP, "active": _KEEP, "watch": _KEEP, "upgrade": _KEEP}
       for holder in ("admin-drain", "down", "fail", "maint", "reboot")},
}


def holder_of(node: NodeState) -> str:
    """Who holds the node now (a key of HOLDERS), from its state flags and reason as scontrol shows them."""
    flags = node.flags
    if any(flag.startswith("REBOOT") for flag in flags):
        return "reboot"
    if flags & {"MAINT", "MAINTENANCE"}:
        return "maint"
    if node.drained:
        if node.reason.startswith(UPGRADE_HEAD + " "):
            return "upgrade"
        if node.reason.startswith((SCHEDULED_HEAD + " ", CLUSTER_HEAD, REPAIR_HEAD, NEEDS_HANDS_HEAD)):
            return "active"
        if node.reason.startswith(WATCH_HEAD):
            return "watch"
        return "passive" if node.reason.startswith(REASON_PREFIX) else "admin-drain"
    if flags & {"FAIL", "FAILING"}:
        return "fail"
    if "DOWN" in flags:
        return "down"
    return "nobody"


def head_of(path: str, scheduled: str | None = None) -> str:
    """The start of the drain reason `path` writes."""
    return {"scheduled": f"{SCHEDULED_HEAD} {scheduled}:", "cluster": CLUSTER_HEAD, "watch": WATCH_HEAD,
            "repair": REPAIR_HEAD, "upgrade": UPGRADE_HEAD}.get(path, REASON_PREFIX)


def drain_reason(findings: list[str], head: str = REASON_PREFIX) -> str:
    """`<head> <finding>[; ...]` on one line, at most REASON_MAX characters: cut after a whole word, never inside
    one (only a word longer than all the room is), with "…" where the rest was left out."""
    reason = " ".join(f"{head} {'; '.join(findings)}".split())
    if len(reason) <= REASON_MAX:
        return reason
    kept = reason[:REASON_MAX - 1]
    if reason[REASON_MAX - 1] != " " and " " in kept[len(head) + 1:]:
        kept = kept.rsplit(" ", 1)[0]
    return kept.rstrip(" ;,:") + "…"


def findings(results: list[Any]) -> list[str]:
    """The failed checks as a drain reason names them: "<check> <reason>". An observed check's failure is no
    reason to drain (the profile's `observe`), so it is not named among the reasons a node is drained for."""
    return [f"{r.check} {r.reason}".strip() for r in results
            if r.status.value == "fail" and not getattr(r, "observed", False)]


def verdict_of(exit_code: int) -> str:
    """fail (a check failed), error (could not judge, nothing failed) or pass (warnings are no reason to drain)."""
    return "fail" if exit_code == EXIT_FAIL else "error" if exit_code == EXIT_UNKNOWN else "pass"


@dataclass(frozen=True)
class Action:
    verb: str  # drain | resume | keep | held (a drain the breaker held: breaker.py)
    node: str
    reason: str  # the drain reason, the resumed drain's reason, or why nothing is done
    holder: str = "nobody"  # who held the node before

    def describe(self) -> str:
        if self.verb == "drain":
            return f"drained {self.node}: {self.reason}"
        if self.verb == "held":
            return f"did NOT drain {self.node}, {self.reason}"
        if self.verb == "resume":
            return f"resumed {self.node} (its drain was gpucheck's: {self.reason})"
        return f"left {self.node} as it is: {self.reason}"

    def record(self, path: str) -> dict[str, str]:
        """What a report keeps of it (facts.slurm): the history makes the node's transitions of it."""
        return {"path": path, "action": self.verb, "holder": self.holder, "reason": self.reason,
                "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def decide(current: NodeState, path: str, verdict: str, findings: list[str], scheduled: str | None = None,
           head: str | None = None) -> Action:
    """What `path` (a key of PATHS) may do with a node it judged: `verdict` is fail, pass or error (could not
    judge); `findings` make the drain reason; `scheduled` is the kind of a scheduled check; `head` the reason's
    start where the path writes more than one kind (the repair's NEEDS_HANDS_HEAD)."""
    holder = holder_of(current)
    verb = RULES[holder][PATHS[path][0]][VERDICTS.index(verdict)]
    name = current.name
    if verb == "drain":
        reason = drain_reason(findings, head or head_of(path, scheduled))
        if current.drained and current.reason == reason:
            return Action("keep", name, f"already drained for the same reason ({reason})", holder)
        return Action("drain", name, reason, holder)
    if verb == "resume":
        return Action("resume", name, current.reason, holder)
    return Action("keep", name, _why_kept(current, holder, verdict), holder)


def _why_kept(current: NodeState, holder: str, verdict: str) -> str:
    said = current.reason or "no reason"
    if verdict == "error":
        return ("gpucheck could not judge it (a harness error): a node is never drained or resumed on a run that "
                "proved nothing")
    if holder == "nobody":
        return f"in service ({current.state})"
    if holder == "upgrade":
        return f"drained by gpucheck's rolling upgrade ({said}): only the upgrade (playbooks/upgrade.yml) resumes it"
    if holder == "active":
        return (f"drained by an active check ({said}): a passive check cannot see what it saw; the next scheduled "
                f"check or `gpucheck cluster --drain` that passes resumes it, or an admin once it is repaired "
                f"(scontrol update nodename={current.name} state=resume)")
    if holder == "watch":
        return (f"drained by gpucheck watch ({said}): it returns after its active checks pass (a scheduled check, "
                f"`gpucheck cluster --drain`), or an admin's resume once it is repaired")
    if holder == "admin-drain":
        return f"drained by someone else ({said}): only its owner resumes it"
    return f"{current.state} by someone else ({said}): gpucheck leaves an admin's state alone"


def apply(action: Action) -> None:
    if action.verb == "drain":
        scontrol(["update", f"nodename={one_node(action.node)}", "state=drain", f"reason={action.reason}"], action.node,
                 "drain")
    elif action.verb == "resume":
        scontrol(["update", f"nodename={one_node(action.node)}", "state=resume"], action.node,
                 "resume (a node whose slurmd does not respond cannot be resumed)")


def tell(path: str, exit_code: int, findings: list[str], node: str | None = None, scheduled: str | None = None,
         held_by: BreakerSettings | None = None, head: str | None = None) -> Action:
    """What `path` did with this node (or `node`) in Slurm for a run that exited `exit_code` with `findings` (the
    failed checks' "<id> <reason>"): decided by the table, applied. An automatic path's drain is first put to the
    breaker (`held_by`, node.yaml's), and asked again once made: a drain past its limits is held, or taken back.
    Raises SlurmError."""
    current = show_node(this_node(node))
    action = decide(current, path, verdict_of(exit_code), findings, scheduled, head)
    if action.verb != "drain" or held_by is None or path not in breaker.AUTOMATIC_PATHS:
        apply(action)
        return action
    if why := _held(held_by, current.name):
        return Action("held", current.name, f"{why}; it failed: {action.reason}", action.holder)
    apply(action)
    if action.holder == "nobody" and (why := breaker.second_look(
            breaker.stamped(show_node(current.name)), lambda: _held(held_by, current.name),
            lambda: apply(Action("resume", current.name, action.reason)))):
        return Action("held", current.name, f"{why} (its drain taken back); it failed: {action.reason}", action.holder)
    return action


def _held(settings: BreakerSettings, name: str) -> str | None:
    stamps = {n: breaker.stamped(state) if holder_of(state) in breaker.GPUCHECK_HOLDERS else None
              for n, state in all_nodes().items()}
    return breaker.held(settings, stamps, name)


def render_table() -> str:
    """RULES as docs/slurm.md shows it: a row per holder, a column per path, each cell fail / pass / error."""
    def cell(holder: str, kind: str) -> str:
        words = ["re-drain" if verb == "drain" and holder != "nobody" else verb for verb in RULES[holder][kind]]
        return " / ".join(words)

    lines = ["| held by | " + " | ".join(f"`{path}`" for path in PATHS) + " |",
             "|---|" + "---|" * len(PATHS)]
    for holder, what in HOLDERS.items():
        lines.append(f"| **{holder}**: {what} | " + " | ".join(cell(holder, kind) for kind, _ in PATHS.values())
                     + " |")
    return "\n".join(lines) + "\n"
