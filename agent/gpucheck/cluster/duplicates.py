"""Two inventory entries that reach the same machine (an alias, a line copied twice, two addresses of one host):
both would pass and its GPUs would count twice. Each agent reports which machine it ran on (facts.machine:
node/identity.py); two entries are one machine when they share a GPU UUID, or the machine id and the boot id
together (a machine id alone is shared by VMs cloned from one image, a boot id alone by containers on one kernel).

The first entry in inventory order keeps its verdict; each later one is an error (the inventory is wrong, not
the machine), named with the first, and has its report set aside: the stages, the burn-in table and the
stragglers then count that machine once. An agent older than facts.machine says nothing, and nothing is said."""

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
    """What shows the two are one machine, in words; None when nothing does."""
    evidence = []
    if first.machine_id and first.machine_id == later.machine_id and first.boot_id and first.boot_id == later.boot_id:
        evidence.append(f"machine id {short(first.machine_id)}, boot id {short(first.boot_id)}")
    shared = sorted(first.gpu_uuids & later.gpu_uuids)
    if shared:
        more = f" and {len(shared) - 1} more" if len(shared) > 1 else ""
        evidence.append(f"GPU UUID{'s' if shared[1:] else ''} {short(shared[0], UUID_SHOWN)}{more}")
    return "; ".join(evidence) or None


def mark(nodes: dict[str, NodeOutcome], order: Sequence[str]) -> list[str]:
    """Make each later entry for a machine already met (in `order`, the inventory's) an error naming the
    first, its report set aside; returns the entries marked, in order."""
    met: list[tuple[str, Identity]] = []
    marked = []
    for name in order:
        outcome = nodes.get(name)
        identity = identity_of(outcome) if outcome else None
        if outcome is None or identity is None:
            continue
        match = next(((first, why) for first, known in met if (why := same_machine(known, identity))), None)
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
