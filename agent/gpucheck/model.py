"""Results, reports and exit codes: the check contract shared by node and cluster."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

EVIDENCE_MAX_CHARS = 4000  # raw tool output kept with a result, enough to audit a verdict
# How many reports a node keeps (node/kept_reports.py), so how many `history collect` may ever read from one node
KEPT_REPORTS_MAX = 500  # ~25 MB of 8-GPU full reports; a few days of failing health checks every 5 minutes


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not applicable here (e.g. no InfiniBand in the profile)
    ERROR = "error"  # the check itself could not run: never a pass, never a hardware fault

    def __str__(self) -> str:
        return self.value


# Which status is worse, wherever statuses are combined (a GPU's findings, a node and its blame):
# skip says least, fail most. exit_code() follows the same order.
SEVERITY = {Status.SKIP: 0, Status.PASS: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


def worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=SEVERITY.__getitem__, default=Status.PASS)


# Monitoring convention (Nagios/Icinga plugins, Slurm health checks).
EXIT_OK, EXIT_WARN, EXIT_FAIL, EXIT_UNKNOWN = 0, 1, 2, 3
VERDICT_OF_EXIT = {EXIT_OK: "pass", EXIT_WARN: "warn", EXIT_FAIL: "fail", EXIT_UNKNOWN: "error"}


def verdict_of_exit(code: object) -> str:
    """A run's verdict by its exit code (a kept report's name, a history record); anything else is an error."""
    return VERDICT_OF_EXIT.get(code, "error") if isinstance(code, int) and not isinstance(code, bool) else "error"


def truncate(text: str | None, limit: int = EVIDENCE_MAX_CHARS) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


@dataclass
class Result:
    check: str
    status: Status
    measured: Any = None
    expected: Any = None
    reason: str = ""
    remediation: str = ""
    evidence: str = ""
    duration_s: float = 0.0
    observed: bool = False  # the profile's `observe` names it: recorded and reported, never counted in the verdict

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["evidence"] = truncate(self.evidence)
        if not self.observed:
            del data["observed"]
        return data


def skip(check: str, reason: str) -> Result:
    return Result(check, Status.SKIP, reason=reason)


def error(check: str, reason: str, evidence: str = "", remediation: str = "") -> Result:
    return Result(check, Status.ERROR, reason=reason, evidence=evidence, remediation=remediation)


def exit_code(results: list[Result]) -> int:
    """fail wins over error (a known fault is the stronger news), error over warn, warn over pass. An observed
    check (the profile's `observe`) is left out: it never makes a node fail, so it never drains one."""
    statuses = {r.status for r in results if not r.observed}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if Status.ERROR in statuses:
        return EXIT_UNKNOWN
    if Status.WARN in statuses:
        return EXIT_WARN
    return EXIT_OK


@dataclass
class Report:
    host: str
    profile: str
    results: list[Result]
    facts: dict[str, Any] = field(default_factory=dict)  # versions and inventory: what the cluster compares
    # the profile as judged (inheritance resolved): the cluster reads the node's thresholds from here,
    # never from its own copy of checks/ (a site profile may exist only on the node)
    thresholds: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    duration_s: float = 0.0
    version: str = ""
    # a passive run: the checks of the newest kept run of active checks that passed (node/kept_reports.py), whose
    # figures the Prometheus text carries between two such runs; not in the JSON (facts.last_active_pass says when)
    last_active: list[Result] = field(default_factory=list)
    cluster_name: str | None = None  # node.yaml's: the cluster whose history this report belongs to

    @property
    def exit_code(self) -> int:
        return exit_code(self.results)

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for r in self.results:
            counts[r.status.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpucheck_version": self.version,
            "host": self.host,
            **({"cluster_name": self.cluster_name} if self.cluster_name else {}),
            "profile": self.profile,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "facts": self.facts,
            "thresholds": self.thresholds,
            "results": [r.to_dict() for r in self.results],
        }
