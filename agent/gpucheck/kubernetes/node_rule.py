"""What a gpucheck run does to its Kubernetes Node: the Slurm contract (drain_rule) said for Kubernetes.

- The Node's status gets a condition `GPUCheckHealthy`: True when the run passed (warnings included), False with the
  failed checks when it failed.
- Labels: `gpucheck/health=pass|warn|fail`, and `gpucheck/last-active-pass` (UTC, `2026-11-30T01-02-03Z`: a label
  value holds no colon) when an active check passed.
- A failure taints the Node `gpucheck/unhealthy=<kind>:NoSchedule`, the value the kind of path that tainted it
  (passive, active, watch, upgrade). Who may replace or remove that taint is drain_rule.RULES, as for a Slurm drain:
  a passive pass never removes an active check's taint, and so on.
- Taints stack, where a Slurm node has one drain: an admin's cordon (spec.unschedulable) and taints are theirs, never
  read as gpucheck's and never touched; gpucheck's taint goes beside them. A taint with gpucheck's key and a value
  gpucheck never writes is an admin's too (held as "admin-drain": kept).
- A run that could not judge the node changes nothing. While gpucheck's taint stays, the condition and the health
  label keep saying what the run that tainted it saw.
- The taint's time is the annotation `gpucheck/tainted-at` (a NoSchedule taint has no timeAdded): the circuit
  breaker orders gpucheck's recent taints by it (breaker.py). A taint the breaker held is not made; the condition
  and the label still say the failure.

`decide` is pure (the Node as the API's JSON, in; the change, out): kubernetes/api.py reads and writes it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from .. import breaker, drain_rule

TAINT_KEY = "gpucheck/unhealthy"
EFFECT = "NoSchedule"
HEALTH_LABEL = "gpucheck/health"
ACTIVE_PASS_LABEL = "gpucheck/last-active-pass"
TAINTED_AT = "gpucheck/tainted-at"  # annotation: when gpucheck's taint was set (UTC, ISO 8601)
CONDITION = "GPUCheckHealthy"
MESSAGE_MAX = 1024  # kubectl describe shows it whole; the API keeps far more
KINDS = ("passive", "active", "watch", "upgrade")  # a gpucheck taint's values: drain_rule.PATHS' kinds
REASONS = {"fail": "ChecksFailed", "warn": "ChecksPassedWithWarnings", "pass": "ChecksPassed"}
# How the condition's message starts when a repair handed the node to a person (Slurm's `gpucheck: needs-hands:`
# reason): the watcher's repairs leave such a node alone; an active check's pass still takes its taint back.
NEEDS_HANDS = "needs-hands:"


@dataclass(frozen=True)
class Change:
    verb: str  # drain (taint) | resume (untaint) | keep | held (a taint the breaker held), as drain_rule's
    node: str
    holder: str  # who held the node before: nobody, one of KINDS, or admin-drain (gpucheck's key, a foreign value)
    why: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] | None = None  # the Node's whole new list of taints; None: unchanged
    condition: dict[str, str] | None = None  # the condition to set; None: unchanged
    annotations: dict[str, str | None] = field(default_factory=dict)  # None: removed

    @property
    def changes_anything(self) -> bool:
        return bool(self.labels) or self.taints is not None or self.condition is not None

    def held(self, why: str) -> Change:
        """This taint held by the breaker: the condition and the label still say the failure, no taint is made."""
        return Change("held", self.node, self.holder, f"{why}; it failed: {self.why}", self.labels, None,
                      self.condition)

    def describe(self) -> str:
        said = {"drain": f"tainted {self.node} {TAINT_KEY}:{EFFECT}: {self.why}",
                "resume": f"removed {TAINT_KEY} from {self.node} ({self.why})",
                "held": f"did NOT taint {self.node}: {self.why}"}
        return said.get(self.verb, f"kept {self.node} as it was: {self.why}")

    def record(self, path: str) -> dict[str, str]:
        """What the kept report says was done (facts.kubernetes), in drain_rule.Action.record's shape: the history
        makes the node's transitions of either (a taint is a drain, its removal a return)."""
        return {"path": path, "action": self.verb, "holder": self.holder, "reason": self.why,
                "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def holder_of(node: dict[str, Any]) -> str:
    """Whose gpucheck taint the Node carries: nobody, a kind of path (KINDS), or admin-drain."""
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("key") == TAINT_KEY:
            return taint.get("value") if taint.get("value") in KINDS else "admin-drain"
    return "nobody"


def message_of(node: dict[str, Any]) -> str:
    """The message of the Node's GPUCheckHealthy condition ("": none)."""
    conditions = node.get("status", {}).get("conditions") or []
    return next((str(c.get("message") or "") for c in conditions if c.get("type") == CONDITION), "")


def tainted_at(node: dict[str, Any]) -> dt.datetime | None:
    """When gpucheck tainted the Node, if its own drain holds it (not the upgrade's: breaker.GPUCHECK_HOLDERS) and
    it said when."""
    if holder_of(node) not in breaker.GPUCHECK_HOLDERS:
        return None
    try:
        return dt.datetime.fromisoformat(node.get("metadata", {}).get("annotations", {}).get(TAINTED_AT, ""))
    except (TypeError, ValueError):
        return None


def health_of(exit_code: int) -> str:
    return {0: "pass", 1: "warn"}.get(exit_code, "fail")


def label_time(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")


def decide(node: dict[str, Any], path: str, exit_code: int, findings: list[str], active_passed: bool = False,
           now: dt.datetime | None = None) -> Change:
    """The change `path`'s run (its exit code, its failed checks' "<id> <reason>") makes to `node`."""
    now = now or dt.datetime.now(dt.timezone.utc)
    name = node.get("metadata", {}).get("name", "")
    holder = holder_of(node)
    verdict = drain_rule.verdict_of(exit_code)
    if verdict == "error":
        return Change("keep", name, holder, "the run could not judge the node: nothing changed")
    kind = drain_rule.PATHS[path][0]
    verb = drain_rule.RULES[holder][kind][drain_rule.VERDICTS.index(verdict)]
    labels = {ACTIVE_PASS_LABEL: label_time(now)} if active_passed else {}
    others = _others(node)
    if verb == "keep" and holder != "nobody":  # the taint stays, and with it what its run said
        return Change("keep", name, holder, _why_kept(holder, verdict), labels)
    health = health_of(exit_code)
    message = "; ".join(findings)[:MESSAGE_MAX] if findings else f"gpucheck {path}: {health}"
    condition = {"type": CONDITION, "status": "False" if health == "fail" else "True", "reason": REASONS[health],
                 "message": message}
    labels[HEALTH_LABEL] = health
    if verb == "drain":
        ours = {"key": TAINT_KEY, "value": kind, "effect": EFFECT}
        return Change("drain", name, holder, message, labels, [*others, ours], condition,
                      {TAINTED_AT: now.astimezone(dt.timezone.utc).isoformat(timespec="seconds")})
    if verb == "resume":
        return Change("resume", name, holder, f"its {path} run passed", labels, others, condition, {TAINTED_AT: None})
    return Change("keep", name, holder, f"{health}: no gpucheck taint to add or remove", labels, None, condition)


def taken_back(node: dict[str, Any]) -> Change:
    """gpucheck's taint taken back, as the breaker asks: the condition and the labels stay as the failure wrote
    them."""
    return Change("resume", node.get("metadata", {}).get("name", ""), holder_of(node), "its taint taken back", {},
                  _others(node), None, {TAINTED_AT: None})


def _others(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The Node's taints but gpucheck's: an admin's, its controllers', kept as they are."""
    return [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY]


def _why_kept(holder: str, verdict: str) -> str:
    if holder == "admin-drain":
        return f"its {TAINT_KEY} taint has a value gpucheck never writes: someone else's, left as it is"
    return (f"its {TAINT_KEY} taint is the {holder} check's; this run ({verdict}) may not replace or remove it "
            "(docs/kubernetes.md)")


def condition_with_times(change: Change, node: dict[str, Any], now: dt.datetime) -> dict[str, str]:
    """The condition to write: its heartbeat now, its transition time kept unless its status changed."""
    assert change.condition is not None
    stamp = now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = next((c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == CONDITION), {})
    kept = before.get("lastTransitionTime") if before.get("status") == change.condition["status"] else None
    return {**change.condition, "lastHeartbeatTime": stamp, "lastTransitionTime": kept or stamp}
