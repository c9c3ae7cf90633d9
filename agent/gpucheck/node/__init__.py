"""The node checks: each domain module declares its checks; collectors gather facts once.

A check is `collect` (touches the machine, once per collector, shared by the checks that need it)
then `evaluate` (a pure function of the collected facts and the profile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import NodeConfig
from ..model import Result
from ..profiles import Profile
from .stack.stacks import Interpreters

CALL_LIMIT_MAX_S = 10.0  # one call that should answer at once (an NVML query, a sysfs read, statvfs, psutil)


class CollectError(Exception):
    """Facts could not be gathered.

    harness=True: the probe itself could not run (timeout, tool missing): every dependent check is
    `error`. harness=False: the failure is a finding about the node (no driver): the checks `fail`.
    """

    def __init__(self, reason: str, remediation: str = "", evidence: str = "", harness: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.remediation = remediation
        self.evidence = evidence
        self.harness = harness


@dataclass
class Context:
    timeout: float = 60.0
    bench_timeout: float = 600.0
    config: NodeConfig = field(default_factory=NodeConfig)
    profile: Profile | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # collector name -> facts
    xid_lookback_s: float | None = None  # --xid-lookback; None: kernel_log.XID_LOOKBACK_S (24 h)
    xid_since_boot: bool = False  # --xid-since boot: every Xid of this boot, no look-back, no last clean run
    interpreters: Interpreters = field(default_factory=Interpreters)  # the stacks' pythons, as this run found them
    selected: tuple[str, ...] | None = None  # the ids of the checks this run evaluates; None: not known (all)
    burn_seconds: float = 60.0  # --burn-seconds: how long gpu.burn loads each GPU
    allow_busy: bool = False  # --allow-busy: active checks also on a GPU another program uses (busy.py)
    full: bool = False  # --full: the deep run, which also gathers slow cross-checks kept only as evidence
    gpus: tuple[int, ...] | None = None  # --gpus: the burn-in's workers on these NVML indexes only; None: every GPU

    @property
    def call_limit(self) -> float:
        """The limit for one call that answers at once when all is well: min(--timeout, 10 s)."""
        return min(self.timeout, CALL_LIMIT_MAX_S)


Evaluate = Callable[[dict[str, Any], Profile], Result]


@dataclass(frozen=True)
class Check:
    id: str
    needs: tuple[str, ...]  # collector names; "name?" = optional (evaluate gets None if it failed)
    evaluate: Evaluate
    summary: str
    active: bool = False  # a benchmark: only with --full
