"""The watcher's loop: wait for a kernel log record or the next NVML poll, judge what changed, tell the workload
manager (tell.py: Slurm or Kubernetes), keep the report, remember where it stood.

What it judges is `gpucheck node`'s own checks through the same pipeline, with one difference for Xids: the lines
are the ones the watcher just read (given to gpu.xid as its kernel_log facts), so a fault is judged from the line
that reported it, not from a second read of the log. A run that could not judge (a harness error) changes nothing
in the scheduler, as everywhere; a pass never resumes (one check proves nothing of the node: drain_rule's `watch` path).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import config, drain_rule, tell
from ..files import write_atomically
from ..model import Report
from ..node import ib_counters, kept_reports
from ..node.kernel_log import read_boot_id, state_dir
from ..node.pipeline import Options, run_node
from ..parsers import ParseError, parse
from ..repair.flow import Repairer
from ..report.node import render
from .fields import CHECK_OF, Hung, Sampler, Unavailable, concerned, flaps, settled
from .kernel_source import KernelLog, SourceError
from .metrics import WatchMetrics

STATE_FILE = "watch.json"  # {"cursor": the kernel log's, "sample": the last NVML sample, "infiniband", "boot_id"}
FILE_POLL_S = 0.5  # a log file (not /dev/kmsg) is read this often: select() cannot wait on a regular file
# Per probe of a judging run (NVML, sysfs, /proc: what the gpu.* checks read answers in milliseconds); its deadline
# is 3 x this, so a judging run while NVML hangs holds the loop 9 s at most, once per hang.
JUDGE_TIMEOUT_S = 3.0
LOG_REOPEN_S = 5.0  # a kernel log that cannot be opened is tried again this often
XID_MARKERS = ("NVRM", "fallen off the bus")  # what the xid parser reads; every other line is not ours


@dataclass
class Settings:
    kernel_log: str = "/dev/kmsg"
    interval_s: float = 5.0  # NVML poll
    scheduler: tell.Scheduler | None = None  # drain (Slurm) or taint (Kubernetes) on a failure
    config_path: str | None = None
    call_limit_s: float = 10.0  # one NVML poll


class Watcher:
    """One node's watcher: where it stands in the kernel log, the last NVML sample, what it has said once."""

    def __init__(self, settings: Settings, out: TextIO = sys.stdout) -> None:
        self.settings, self.out = settings, out
        self.site = config.load(settings.config_path)
        self.boot_id = _boot_id()
        saved = _load_state()
        # a counter that stepped while the watcher was down is still a step (the same boot only)
        self.sample: dict[str, Any] | None = saved.get("sample") if saved.get("boot_id") == self.boot_id else None
        self.ib: dict[str, int] | None = saved.get("infiniband") if saved.get("boot_id") == self.boot_id else None
        self.log = KernelLog(settings.kernel_log, self.boot_id, saved.get("cursor"))
        self.sampler = Sampler(settings.call_limit_s)
        self.stopped = False
        self.said: set[str] = set()  # the one-time notes said and still true (NVML hung, a log not readable)
        self.saved_text = ""
        told = settings.scheduler
        self.metrics = WatchMetrics.beside(self.site.prometheus_textfile, socket.gethostname(),
                                           told.name if told else "slurm")
        self.repairer = Repairer(self.site, told, self.say, self.sampler.release) if told else None
        self.reports_seen = set(_kept())  # a drain another path keeps from now on is looked at for a repair

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        told = self.settings.scheduler
        self.say(f"watching {self.settings.kernel_log} and NVML every {self.settings.interval_s:g} s"
                 + (f" (tells {told.name} on a failure)" if told else ""))
        if self.repairer and self.repairer.after_reboot():
            self.rebaseline()
        next_poll = time.monotonic()
        log_retry = 0.0
        while not self.stopped:
            now = time.monotonic()
            if self.log.fd < 0 and now >= log_retry:
                try:
                    self.log.open()
                    self.said.discard("log")
                except SourceError as exc:
                    self.once("log", str(exc))
                    log_retry = now + LOG_REOPEN_S
            # /dev/kmsg wakes select() with a record; a file is looked at every FILE_POLL_S
            wait = max(0.0, next_poll - now)
            if self.log.waitable is not None:
                select.select([self.log.waitable], [], [], wait)
            else:
                time.sleep(min(wait, FILE_POLL_S))
            self.read_log()
            if time.monotonic() >= next_poll:
                self.poll_ib()
                self.poll_nvml()
                self.look_at_drains()
                next_poll = time.monotonic() + self.settings.interval_s
            self.save()
            if note := self.metrics.write():
                self.once("metrics", note)
        self.save()
        self.say("stopped")
        return 0

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopped = True

    def say(self, line: str) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
        print(f"{stamp} gpucheck watch: {line}", file=self.out, flush=True)

    def once(self, key: str, line: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self.say(line)

    def read_log(self) -> None:
        if self.log.fd < 0:
            return
        try:
            lines = self.log.read_new()
        except SourceError as exc:
            self.once("log", f"{exc}: reopening")
            self.log.close()
            return
        for note in self.log.notes:
            self.say(note)
        self.log.notes.clear()
        ours = [line for line in lines if any(marker in line for marker in XID_MARKERS)]
        if not ours:
            return
        try:
            facts = parse("xid", "\n".join(ours))
        except ParseError as exc:
            self.say(f"kernel log lines not readable as Xid reports ({exc}): {ours[0][:160]}")
            return
        if not facts["events"] and not facts["fallen_off_bus"]:
            return
        window = {"since": f"as gpucheck watch read them from {self.log.path}", "start_s": None,
                  "boot_id": self.boot_id, "source": self.log.path, "uptime_s": None, "default_start_s": None,
                  "notes": []}
        given = {"kernel_log": {"source": self.log.path, **facts, "window": window, "evidence": "\n".join(ours)}}
        seen = [f"Xid {e['xid']} on {e.get('pci') or '?'}" for e in facts["events"]]
        self.judge({"gpu.xid": seen or [f"GPU {pci} fallen off the bus" for pci in facts["fallen_off_bus"]]},
                   "kernel_log", given)

    def poll_ib(self) -> None:
        """Each InfiniBand port's link_downed (sysfs): a step is a flap, judged by ib.counters."""
        now = ib_counters.link_downs()
        moved, self.ib = flaps(self.ib, now), now
        if moved:
            self.judge(moved, "infiniband")

    def poll_nvml(self) -> None:
        try:
            now = self.sampler.sample()
        except Hung as exc:
            if "nvml" not in self.said:  # every polled check once: each says what its hung fields mean
                self.once("nvml", f"{exc}: judging the GPUs once; NVML is asked again when the call returns")
                self.judge({check: [str(exc)] for check in sorted(set(CHECK_OF.values()))}, "nvml")
            return
        except Unavailable as exc:
            self.once("nvml", f"{exc}: not judged (a driver being replaced); asked again in a while")
            return
        if "nvml" in self.said:
            self.said.discard("nvml")
            self.say("NVML answers again")
        moved = concerned(self.sample, now)
        self.sample = settled(self.sample, now)
        if moved:
            self.judge(moved, "nvml")

    def judge(self, moved: dict[str, list[str]], source: str, given: dict[str, Any] | None = None) -> Report | None:
        """Run the checks in `moved` (id -> what moved, seen in `source`), keep the report, tell the scheduler on a
        failure."""
        began = time.monotonic()
        try:
            report = run_node(Options(only=sorted(moved), timeout=JUDGE_TIMEOUT_S, deadline=3 * JUDGE_TIMEOUT_S),
                              self.site, given)
        except Exception as exc:  # a profile gone bad since the start: said, and the watcher goes on
            self.say(f"could not judge {', '.join(sorted(moved))}: {exc}")
            return None
        report.facts["watch"] = {"moved": moved, "source": source}
        if note := ib_counters.remember(report.results):  # a run that judged the counters is the next one's start
            self.once("ib", note)
        self.metrics.judged(source, report)
        verdicts = ", ".join(f"{r.check} {r.status.value}" for r in report.results)
        self.say(f"{'; '.join(why for whys in moved.values() for why in whys)[:300]} -> {verdicts} "
                 f"({time.monotonic() - began:.2f} s)")
        told = self.settings.scheduler
        if told and drain_rule.verdict_of(report.exit_code) == "fail":
            try:
                action = told.tell("watch", report.exit_code, drain_rule.findings(report.results), self.site.breaker)
                self.say(f"{told.name}: {action.describe()}")
                self.metrics.acted(action.verb)
                report.facts[told.name] = action.record("watch")
            except tell.Unreached as exc:
                self.say(f"{told.name}: {exc}")
        text = render(report, "json")
        if note := kept_reports.keep(report, text, active=False):  # the scheduler told first
            self.once("keep", note)
        self.reports_seen = set(_kept())
        if self.repairer and report.facts.get(self.repairer.scheduler.name, {}).get("action") in ("drain", "keep"):
            self.repair(json.loads(text))
        return report

    def look_at_drains(self) -> None:
        """A drain by another path (the health check, a scheduled check), kept since the last look: repaired as
        the watcher's own are."""
        if not self.repairer:
            return
        told = self.repairer.scheduler.name
        kept = _kept()
        for name in sorted(set(kept) - self.reports_seen, key=kept_reports.order):
            try:
                doc = kept_reports.read(kept_reports.folder() / name)
            except (OSError, ValueError, RecursionError):
                continue
            done = ((doc.get("facts") or {}).get(told) or {}) if isinstance(doc, dict) else {}
            if done.get("action") == "drain" and done.get("path") not in ("watch", "repair"):
                self.repair(doc)
        self.reports_seen = set(_kept())

    def repair(self, doc: dict[str, Any]) -> None:
        if self.repairer and self.repairer.repair(doc):
            self.rebaseline()

    def rebaseline(self) -> None:
        """After a repair: what it changed (counters a reset cleared) is no fault, and what changes from now on is
        judged, so the new baseline is taken at once, not at the next poll."""
        self.said.discard("nvml")
        try:
            self.sample = self.sampler.sample()
        except (Hung, Unavailable):
            self.sample = None  # the first poll that answers is the baseline
        self.save()

    def save(self) -> None:
        state = {"boot_id": self.boot_id, "cursor": self.log.state(), "sample": self.sample, "infiniband": self.ib}
        text = json.dumps(state, sort_keys=True)
        if text == self.saved_text:
            return
        try:
            os.makedirs(state_dir(), mode=0o700, exist_ok=True)
            write_atomically(state_dir() / STATE_FILE, text + "\n")
            self.saved_text = text
            self.said.discard("save")
        except OSError as exc:
            self.once("save", f"cannot remember where it stood in {state_dir() / STATE_FILE} "
                              f"({exc.strerror or exc}): a restart resumes from the last place it could save")


def _boot_id() -> str | None:
    try:
        return read_boot_id()
    except (OSError, UnicodeDecodeError):
        return None


def _kept() -> list[str]:
    try:
        return kept_reports.listing(kept_reports.folder())
    except OSError:
        return []


def _load_state() -> dict[str, Any]:
    path = Path(state_dir()) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
