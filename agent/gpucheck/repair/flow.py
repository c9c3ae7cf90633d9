"""A drained node's way back: `waiting` (for its jobs to end) -> `repairing` -> `proving` -> `returned`, or
`needs-hands` (with an RMA archive) when the repair fails, its proof fails, or the fault is back within the window
after a repair returned the node. Each step is said, shown where the scheduler says why the node is held while it
lasts (Slurm's drain reason, the Kubernetes Node's condition: tell.Scheduler, the one interface), and kept in the
report that ends the attempt (facts.repair), from which the history store makes the node's transitions.

The proof is never a passive pass: the GPU checks without load first (a fault still there is named at once, no
load needed), then the active checks the repair concerns, on the GPUs it reset (the burn-in, burn included), the
peer copies after Fabric Manager's restart, DCGM's diagnostic after its host engine's. The Xids judged are only
those logged since the repair began: the ones before it are the fault it repaired.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .. import drain_rule
from ..config import NodeConfig
from ..model import EXIT_FAIL, EXIT_OK, Report
from ..node import kept_reports
from ..node.busy import described, process_name
from ..node.kernel_log import read_boot_id, state_dir
from ..node.per_gpu import live_gpus
from ..node.pipeline import Options, judge, run_node
from ..report.node import render
from ..rma.rma_cli import RmaError, write_archive
from ..tell import Held, Scheduler, Unreached
from . import actions, ledger
from .plan import Plan, plan_of

JOBS_POLL_S = 5.0  # how often the scheduler is asked whether the node's jobs (pods) have ended
BURN_IN = ["gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.memtest", "gpu.burn", "gpu.sdc"]
ACTIVE_PROOF = {"reset-gpu": BURN_IN, "reboot": BURN_IN, "restart-fabric-manager": ["gpu.p2p_bandwidth"],
                "restart-dcgm": ["gpu.dcgm"]}
RMA_DIR = "rma"  # under the state directory: the archives a repair that did not work leaves


@dataclass
class Attempt:
    plan: Plan
    steps: list[dict[str, str]] = field(default_factory=list)
    rma: str | None = None

    def facts(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "steps": self.steps, **({"rma": self.rma} if self.rma else {})}


@dataclass
class Repairer:
    site: NodeConfig
    scheduler: Scheduler  # the one the watcher tells: it holds the node, says each step and lets it go
    say: Callable[[str], None]
    release_nvml: Callable[[], None] = lambda: None  # the watcher's own NVML thread, let go before a reset

    def repair(self, report: dict[str, Any]) -> str | None:
        """Repair the node `report` (a run that drained it, as JSON) failed; the state it ended in, or None when
        no repair was started (none configured, the node not drained by gpucheck, its jobs never ended)."""
        plan, why = plan_of(report)
        if plan is None:
            if (report.get("thresholds") or {}).get("repair"):
                self.say(f"repair: none ({why})")
            return None
        attempt = Attempt(plan)
        try:
            current = self.scheduler.holds()
            if not current.ours:
                self.say(f"repair: not started ({plan.describe()}): {current.name} is not held by gpucheck for a "
                         f"repair ({current.described})")
                return None
            if back := ledger.returned_within(plan, self.site.repair.return_window_s):
                return self.needs_hands(attempt, f"{', '.join(plan.checks)} failed again {_ago(back['at'])} after "
                                                 f"{back['action']} returned the node")
            if current.busy and not self.wait_for_jobs(attempt, current):
                return None
            self.step(attempt, "repairing", f"{plan.describe()} after {'; '.join(plan.findings)}")
            began = time.monotonic()
            if plan.action in ("reset-gpu", "reboot"):
                self.release_nvml()
            if plan.action == "reboot":
                self.note(ledger.set_reboot({"plan": plan.to_json(), "steps": attempt.steps, "boot_id": _boot_id()}))
            try:
                did = actions.do(plan, self.site.repair.allow_reboot, self.gpu_users)
            except actions.Failed as exc:
                if plan.action == "reboot":
                    self.note(ledger.set_reboot(None))
                return self.needs_hands(attempt, f"{plan.describe()} did not work: {exc}")
            self.say(f"repair: {did}")
            if plan.action == "reboot":
                return "rebooting"  # the watcher started on the new boot proves it (after_reboot)
            return self.prove(attempt, time.monotonic() - began)
        except Unreached as exc:
            return self.unreached(exc)

    def after_reboot(self) -> str | None:
        """On a watcher's start: the proof of a reboot this node's repair asked for, once it is a new boot."""
        state = ledger.reboot_under_way()
        if state is None or state.get("boot_id") == _boot_id():
            return None
        self.note(ledger.set_reboot(None))
        attempt = Attempt(Plan.from_json(state["plan"]), list(state.get("steps") or []))
        self.say(f"repair: the node rebooted ({attempt.plan.describe()}); proving it")
        try:
            return self.prove(attempt, None)
        except Unreached as exc:
            return self.unreached(exc)

    def unreached(self, exc: Unreached) -> None:
        self.say(f"repair: {self.scheduler.name}: {exc}; the repair stops here, the node stays as "
                 f"{self.scheduler.title} has it")

    def wait_for_jobs(self, attempt: Attempt, current: Held) -> bool:
        limit = self.site.repair.jobs_wait_s
        self.step(attempt, "waiting", f"for the jobs on {current.name} to end (at most {limit / 60:g} min) before "
                                      f"{attempt.plan.describe()}", tell=False)
        deadline = time.monotonic() + limit
        while current.busy:
            if time.monotonic() > deadline:
                self.say(f"repair: not started: jobs still run on {current.name} after {limit / 60:g} min; it stays "
                         "drained, and a person repairs it or it is repaired at its next drain")
                return False
            time.sleep(JOBS_POLL_S)
            current = self.scheduler.holds()
            if not current.ours:
                self.say(f"repair: not started: {current.name} was taken over meanwhile ({current.described})")
                return False
        return True

    def prove(self, attempt: Attempt, since_s: float | None) -> str:
        """The proof, then the node back in service or handed to a person. `since_s`: how long ago the repair
        began (the Xids judged are those logged since; None: a new boot, all of it)."""
        plan = attempt.plan
        self.step(attempt, "proving",
                  f"{plan.describe()} done; the GPU checks, then {', '.join(ACTIVE_PROOF[plan.action])}")
        report = run_node(Options(only=["gpu"], xid_lookback_s=None if since_s is None else since_s + 1.0), self.site)
        if drain_rule.verdict_of(report.exit_code) == "pass":
            self.keep(report, active=False)  # the first half of the proof, kept as every run is
            burn = self.site.repair.burn_s
            report = run_node(Options(only=ACTIVE_PROOF[plan.action], full=True, burn_seconds=burn,
                                      bench_timeout=max(600.0, 2 * burn + 60), gpus=[g.index for g in plan.gpus]
                                      if plan.action == "reset-gpu" else None), self.site)
        said = ", ".join(f"{r.check} {r.status.value}" for r in report.results)
        self.say(f"repair: proof: {said[:300]}")
        if drain_rule.verdict_of(report.exit_code) != "pass":
            why = "; ".join(drain_rule.findings(report.results)) or "the proof could not judge: " + "; ".join(
                f"{r.check} {r.reason}" for r in report.results if r.status.value == "error")
            return self.needs_hands(attempt, f"{plan.describe()} did not mend it: {why}", report)
        action = self.scheduler.tell("repair", EXIT_OK, [])
        self.say(f"{self.scheduler.name}: {action.describe()}")
        self.step(attempt, "returned", f"{plan.describe()} proven: {said[:200]}", tell=False)
        self.note(ledger.record_return(plan))
        report.facts[self.scheduler.name] = action.record("repair")
        self.keep(report, active=True, attempt=attempt)
        return "returned"

    def needs_hands(self, attempt: Attempt, why: str, report: Report | None = None) -> str:
        """Drained for a person, with the evidence an RMA asks for written first."""
        plan = attempt.plan
        target = str(plan.gpus[0].index) if len(plan.gpus) == 1 else None
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        what = f"GPU{target}" if target else "node"
        output = state_dir() / RMA_DIR / f"rma-{socket.gethostname()}-{what}-{stamp}.tar.gz"
        self.say(f"repair: needs hands: {why}; writing the RMA archive")
        try:
            output.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            archive, collected = write_archive(SimpleNamespace(
                target=target, output=str(output), store=None, reports=None, timeout=60.0, no_bug_report=False,
                config=str(self.site.path) if self.site.path else None))
            attempt.rma = str(archive)
            report = report or collected.report
        except (RmaError, OSError) as exc:
            self.say(f"repair: no RMA archive: {exc}")
        if report is None:  # the archive's own passive run is missing too: the GPU checks say what is seen now
            report = run_node(Options(only=["gpu"]), self.site)
        where = f"; evidence: {Path(attempt.rma).name}" if attempt.rma else ""
        room = drain_rule.REASON_MAX - len(drain_rule.NEEDS_HANDS_HEAD) - 1 - len(where)
        short = why if len(why) <= room else why[:room - 1].rstrip(" ;,:") + "…"  # the archive's name never cut
        action = self.scheduler.tell("repair", EXIT_FAIL, [short + where], head=drain_rule.NEEDS_HANDS_HEAD)
        self.say(f"{self.scheduler.name}: {action.describe()}")
        self.step(attempt, "needs-hands", why + (f"; RMA archive {attempt.rma}" if attempt.rma else ""), tell=False)
        report.facts[self.scheduler.name] = action.record("repair")
        self.keep(report, active=True, attempt=attempt)
        return "needs-hands"

    def step(self, attempt: Attempt, state: str, reason: str, tell: bool = True) -> None:
        """A transition: said, kept for the report, and (`tell`) shown in the node's drain reason while it lasts."""
        attempt.steps.append({"state": state, "reason": reason[:500],
                              "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
        self.say(f"repair: {state}: {reason[:300]}")
        if tell:
            self.scheduler.tell("repair", EXIT_FAIL, [f"{state}: {reason}"])

    def keep(self, report: Report, active: bool, attempt: Attempt | None = None) -> None:
        if attempt is not None:
            report.facts["repair"] = attempt.facts()
        self.note(kept_reports.keep(report, render(report, "json"), active=active))

    def note(self, line: str | None) -> None:
        if line:
            self.say(f"repair: {line}")

    def gpu_users(self) -> dict[str, str]:
        """"GPU3" -> the programs NVML lists on it, as a busy GPU is told (node/busy.py)."""
        _, facts = judge(Options(only=["gpu.count"], timeout=30.0), self.site)
        return {f"GPU{g['index']}": described([{**p, "name": process_name(p["pid"])} for p in g["processes"]])
                for g in live_gpus(facts.get("nvml") or {}) if g.get("processes")}


def _ago(at: Any) -> str:
    seconds = max(0.0, time.time() - float(at))
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _boot_id() -> str | None:
    try:
        return read_boot_id()
    except (OSError, UnicodeDecodeError):
        return None
