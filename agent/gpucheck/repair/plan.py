"""Which repair a drained node gets: the profile's `repair:` map (a check id or glob -> a repair) over the checks
its run failed, and the GPUs their failures name. Every failed check must have a repair: a node that failed
something no repair mends is left to a person as it is, since repairing the rest would not return it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..history.gpu_names import names_gpu
from ..history.records import gpus_of
from ..node.pipeline import check_matches
from ..profiles import REPAIR, REPAIR_ACTIONS


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str | None
    bus: str | None

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@dataclass(frozen=True)
class Plan:
    action: str  # one of REPAIR_ACTIONS
    checks: tuple[str, ...]  # the failed checks it repairs
    findings: tuple[str, ...]  # "<check> <reason>", as the drain said them
    gpus: tuple[Gpu, ...]  # the GPUs those findings name

    def describe(self) -> str:
        where = f" {', '.join(g.label for g in self.gpus)}" if self.gpus and self.action == "reset-gpu" else ""
        return f"{self.action}{where}"

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "checks": list(self.checks), "findings": list(self.findings),
                "gpus": [{"index": g.index, "uuid": g.uuid, "bus": g.bus} for g in self.gpus]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(str(data["action"]), tuple(data["checks"]), tuple(data["findings"]),
                   tuple(Gpu(int(g["index"]), g.get("uuid"), g.get("bus")) for g in data["gpus"]))


def failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The failed results that count (an observed check's never does)."""
    return [r for r in report.get("results") or [] if isinstance(r, dict) and r.get("status") == "fail"
            and not r.get("observed")]


def plan_of(report: dict[str, Any]) -> tuple[Plan | None, str]:
    """The repair for a run that drained the node (its report as JSON), and why none where there is none."""
    repairs = (report.get("thresholds") or {}).get(REPAIR) or {}
    failed = failures(report)
    if not failed:
        return None, "nothing failed"
    if not repairs:
        return None, f"the profile ({report.get('profile')}) configures no repair"
    chosen: dict[str, str] = {}
    for result in failed:
        action = next((a for pattern, a in repairs.items() if check_matches(result["check"], pattern)), None)
        if action is None:
            return None, f"the profile configures no repair for {result['check']}: a person looks at it"
        chosen[result["check"]] = action
    action = max(chosen.values(), key=REPAIR_ACTIONS.index)  # the most thorough one mends the others' faults too
    findings = tuple(f"{r['check']} {r.get('reason') or ''}".strip() for r in failed)
    facts = report.get("facts") or {}
    gpus = tuple(Gpu(index, uuid, bus) for index, uuid, bus, _ in gpus_of(facts)
                 if any(names_gpu(text, index, uuid, bus) for text in findings))
    if action == "reset-gpu" and not gpus:
        return None, "a GPU reset is the repair, but the failures name no GPU to reset: a person looks at it"
    return Plan(action, tuple(sorted(chosen)), findings, gpus), ""
