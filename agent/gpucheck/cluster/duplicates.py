"""Two inventory entries that reach the same machine (an alias, a line copied twice, two addresses of one host):
both would pass and its GPUs would count twice. Each agent reports which machine it ran on (facts.machine:
node/identity.py); two entries are one machine when every word of theirs agrees: the machine id and the boot id
together (a machine id alone is shared by VMs cloned from one image, a boot id alone by containers on one kernel)
with the same GPUs (or one side saw none), or the same GPU UUIDs where either cannot tell its ids.

The first entry in inventory order keeps its verdict; each later one is an error (the inventory is wrong, not
the machine), named with the first, and has its report set aside: the stages, the burn-in table and the
stragglers then count that machine once. An agent older than facts.machine says nothing, and nothing is said.

Words that disagree (a GPU UUID two machines claim, one machine's ids with other GPUs) are no duplicate: a node can
say anything, and one that claimed another's GPU would otherwise have that node's failure set aside. Both keep
their own verdicts (a failure is still drained) and each gets the conflict as a finding (at least warn)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Status
from ..redact import for_terminal
from .context import NodeOutcome

KIND = "duplicate"  # NodeOutcome.kind of the later entry
ID_SHOWN = 8  # characters of an id in the reason (enough to tell two apart, short enough for one line)
UUID_SHOWN = len("GPU-") + ID_SHOWN


@dataclass(frozen=True)
class Identity:
    machine_id: str | None
    boot_id: str | None
    gpu_uuids: frozenset[str]


def text_or_none(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def identity_of(outcome: NodeOutcome) -> Identity | None:
    """What the node's report says of its machine; None when it says nothing (no report, an older agent)."""
    found = (outcome.facts or {}).get("machine")
    if not isinstance(found, dict):
        return None
    uuids = found.get("gpu_uuids")
    gpus = frozenset(u for u in map(text_or_none, uuids) if u) if isinstance(uuids, list) else frozenset()
    return Identity(text_or_none(found.get("machine_id")), text_or_none(found.get("boot_id")), gpus)


def short(value: str, shown: int = ID_SHOWN) -> str:
    return value if len(value) <= shown else value[:shown] + "…"


def same_machine(first: Identity, later: Identity) -> str | None:
    """What shows two entries whose words agree (no `conflict`) are one machine, in words; None when nothing does."""
    evidence = []
    if ids_match(first, later):
        evidence.append(f"machine id {short(first.machine_id or '')}, boot id {short(first.boot_id or '')}")
    shared = sorted(first.gpu_uuids & later.gpu_uuids)
    if shared:
        more = f" and {len(shared) - 1} more" if len(shared) > 1 else ""
        evidence.append(f"GPU UUID{'s' if shared[1:] else ''} {short(shared[0], UUID_SHOWN)}{more}")
    return "; ".join(evidence) or None


def ids_known(identity: Identity) -> bool:
    return bool(identity.machine_id and identity.boot_id)


def ids_match(first: Identity, later: Identity) -> bool:
    return ids_known(first) and (first.machine_id, first.boot_id) == (later.machine_id, later.boot_id)


def conflict(first: Identity, later: Identity) -> str | None:
    """How the two contradict each other, in words; None when they do not."""
    shared = sorted(first.gpu_uuids & later.gpu_uuids)
    both_saw_gpus = bool(first.gpu_uuids and later.gpu_uuids)
    if ids_match(first, later) and both_saw_gpus and first.gpu_uuids != later.gpu_uuids:
        return "the same machine id and boot id with other GPUs"
    if not shared:
        return None
    gpu = f"GPU UUID {short(shared[0], UUID_SHOWN)}" + (f" and {len(shared) - 1} more" if shared[1:] else "")
    if ids_known(first) and ids_known(later) and not ids_match(first, later):
        return f"{gpu}, from another machine by its ids"
    if first.gpu_uuids != later.gpu_uuids:
        return f"{gpu}, among other GPUs"
    return None


def mark(nodes: dict[str, NodeOutcome], order: Sequence[str]) -> list[str]:
    """Make each later entry for a machine already met (in `order`, the inventory's) an error naming the
    first, its report set aside; returns the entries marked, in order. Entries whose words contradict each
    other keep their verdicts and each gets the conflict as a finding."""
    met: list[tuple[str, Identity]] = []
    marked = []
    for name in order:
        outcome = nodes.get(name)
        identity = identity_of(outcome) if outcome else None
        if outcome is None or identity is None:
            continue
        agreeing = []
        for other, known in met:
            if (why := conflict(known, identity)) is None:
                agreeing.append((other, known))
            else:
                contradicted(outcome, other, why)
                contradicted(nodes[other], name, why)
        match = next(((first, why) for first, known in agreeing if (why := same_machine(known, identity))), None)
        met.append((name, identity))
        if match is None:
            continue
        first, why = match
        own = f"its own report: {outcome.status.value}, {outcome.reason}"
        outcome.evidence = "\n".join(x for x in (own, outcome.evidence) if x)
        outcome.status, outcome.kind, outcome.report = Status.ERROR, KIND, None
        # one line whatever the ids hold: they come from the node
        outcome.reason = for_terminal(f"the same machine as {first} ({why}): the inventory lists it twice; "
                                      f"judged once, as {first}")
        marked.append(name)
    return marked


def contradicted(outcome: NodeOutcome, other: str, why: str) -> None:
    """A finding on `outcome`: its machine facts contradict `other`'s. Its own verdict stands, at least warn."""
    outcome.reason = for_terminal(f"{outcome.reason}; its machine facts contradict {other}'s ({why}): one of "
                                  "the two reports is false, or the inventory reaches a host under two names")
    if outcome.status in (Status.PASS, Status.SKIP):
        outcome.status = Status.WARN
