"""`gpucheck node`: pick the checks, gather each collector's facts once, evaluate, report.

The whole run has a deadline (--deadline): each collector runs in a thread the run waits for only until then;
what was not gathered by then is `error` for the checks that need it, and the report is made of the rest.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import socket
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import __version__, profiles, skus
from ..config import NodeConfig
from ..model import Report, Result, Status
from ..process import CallTimeout, call_with_timeout
from . import (
    Check,
    CollectError,
    Context,
    bandwidth,
    busy,
    dcgm,
    derived_profile,
    gpu,
    health,
    host,
    ib_counters,
    identity,
    infiniband,
    kernel_log,
    links,
    nvml,
)
from .burnin import checks as burnin
from .burnin import p2p
from .stack import frameworks, libraries, pins

# The burn-in (burnin, p2p, dcgm) before bw.*: each loads the GPUs in turn, never two at once.
DOMAINS = [gpu, health, links, kernel_log, infiniband, ib_counters, libraries, frameworks, pins, busy, burnin, p2p,
           dcgm, bandwidth, host]


class UsageError(Exception):
    """Bad options (unknown check id, ...). str(e) is a one-line reason."""


def all_checks() -> list[Check]:
    return [check for module in DOMAINS for check in module.CHECKS]


def all_collectors() -> dict[str, Callable[[Context], dict[str, Any]]]:
    found: dict[str, Callable[[Context], dict[str, Any]]] = {"nvml": nvml.collect}
    for module in DOMAINS:
        found.update(getattr(module, "COLLECTORS", {}))
    return found


def check_matches(check_id: str, pattern: str) -> bool:
    return (check_id == pattern or check_id.startswith(pattern.rstrip(".") + ".")
            or fnmatch.fnmatchcase(check_id, pattern))


def select_checks(only: list[str], skip: list[str], full: bool) -> list[Check]:
    """--only/--skip take ids, prefixes (`gpu`) or globs (`gpu.ecc*`); benchmarks need --full
    unless named exactly in --only."""
    checks = all_checks()
    for pattern in [*only, *skip]:
        if not any(check_matches(c.id, pattern) for c in checks):
            raise UsageError(f"no check matches '{pattern}' (see `gpucheck checks`)")
    chosen = [c for c in checks if not only or any(check_matches(c.id, p) for p in only)]
    chosen = [c for c in chosen if not any(check_matches(c.id, p) for p in skip)]
    chosen = [c for c in chosen if not c.active or full or c.id in only]
    if not chosen:
        active = [c.id for c in checks if c.active and c.id.startswith("gpu.")]
        raise UsageError(f"no check left to run (the GPU burn-in {', '.join(active)}, the bw.* benchmarks and "
                         "host.read_throughput need --full, or their exact id in --only)")
    return chosen


@dataclass
class Options:
    profile: str | None = None
    only: list[str] | None = None
    skip: list[str] | None = None
    full: bool = False
    timeout: float = 60.0
    bench_timeout: float = 600.0
    deadline: float | None = None  # seconds for the whole run; None: default_deadline
    xid_lookback_s: float | None = None  # None: kernel_log.XID_LOOKBACK_S
    xid_since_boot: bool = False
    burn_seconds: float = 60.0  # --burn-seconds
    allow_busy: bool = False  # --allow-busy: active checks also on a GPU another program uses
    gpus: list[int] | None = None  # --gpus: the burn-in's workers on these NVML indexes only; None: every GPU


# The default --deadline: room for several probes to use their whole --timeout (a hung NVML call, a framework
# import) and still report, within the 300 s `gpucheck cluster` gives a host by default.
DEADLINE_TIMEOUTS, DEADLINE_MIN_S, DEADLINE_BENCH_TIMEOUTS = 4, 60.0, 4


def default_deadline(timeout: float, bench_timeout: float, full: bool) -> float:
    """4 x --timeout (at least 60 s), plus 4 x --bench-timeout under --full."""
    return max(DEADLINE_TIMEOUTS * timeout, DEADLINE_MIN_S) + (DEADLINE_BENCH_TIMEOUTS * bench_timeout if full else 0)


class DeadlinePassed(CollectError):
    """The run's deadline passed before the collector ran, or while it ran (its thread is abandoned)."""

    def __init__(self, reason: str):
        super().__init__(reason, "raise --deadline, or find what made the run slow (the report's "
                         "facts.collect_seconds)", harness=True)


class Gatherer:
    """Runs each collector at most once, keeping its facts or its failure. With a deadline (seconds after
    `began`, a time.monotonic()) each collector runs in a daemon thread, waited for until then at most."""

    def __init__(self, ctx: Context, deadline: float | None = None, began: float | None = None):
        self.ctx = ctx
        self.collectors = all_collectors()
        self.failures: dict[str, CollectError] = {}
        self.timings: dict[str, float] = {}
        self.deadline = deadline
        self.ends = None if deadline is None else (time.monotonic() if began is None else began) + deadline

    def collect(self, name: str) -> dict[str, Any]:
        if self.ends is None:
            return self.collectors[name](self.ctx)
        left = self.ends - time.monotonic()
        if left <= 0:
            raise DeadlinePassed(f"not run: the run's deadline ({self.deadline:g} s) passed")
        began = time.monotonic()
        try:
            return call_with_timeout(self.collectors[name], left, self.ctx)
        except CallTimeout:
            raise DeadlinePassed(f"not finished: the run's deadline ({self.deadline:g} s) passed while collecting "
                                 f"'{name}' ({time.monotonic() - began:.0f} s in)") from None

    def get(self, name: str) -> dict[str, Any] | None:
        if name in self.ctx.facts:
            return self.ctx.facts[name]
        if name in self.failures:
            return None
        began = time.monotonic()
        try:
            self.ctx.facts[name] = self.collect(name)
        except CollectError as exc:
            self.failures[name] = exc
        except Exception as exc:  # a bug in a collector must cost one check, not the report
            self.failures[name] = CollectError(f"collector '{name}' crashed: {type(exc).__name__}: {exc}",
                                               evidence=traceback.format_exc(), harness=True)
        self.timings[name] = round(time.monotonic() - began, 3)
        return self.ctx.facts.get(name)


def choose_profile(requested: str | None, config: NodeConfig, gather: Gatherer) -> profiles.Profile:
    name = requested or (config.profile if config.profile != "auto" else None)
    if name:
        return profiles.load(name, config.profiles_dir)
    nvml_facts, pci = gather.get("nvml") or {}, gather.get("pci_gpus") or {}
    names = selection_names(nvml_facts, pci)
    hcas = len((gather.get("nic_numa") or {}).get("nics", {}))
    matched = profiles.best_match(names, hcas, config.profiles_dir)
    if matched is not None:
        return matched
    generic = profiles.load(profiles.DEFAULT_PROFILE, config.profiles_dir)
    if not names:
        return generic
    try:
        table = skus.load(extra_dir=config.profiles_dir)
    except skus.SkuError as exc:
        raise profiles.ProfileError(f"no profile matches this node's GPUs and none can be derived: {exc}") from None
    return derived_profile.derive(nvml_facts, pci, table, generic) or generic


def selection_names(nvml_facts: dict[str, Any], pci: dict[str, Any]) -> list[str]:
    """The GPU names a profile is chosen by: one per GPU the node has, NVML's or the PCI bus's count,
    whichever is larger, so that a DGX with a GPU lost or gone from NVML is still judged as a DGX. The
    GPUs without a name (lost, unread, missing) are taken to be the model most of the others are."""
    named = [g["name"] for g in nvml_facts.get("gpus", []) if g.get("name")]
    if not named:
        return []
    total = max(len(nvml_facts.get("gpus", [])), len(pci.get("gpus", [])))
    common = Counter(named).most_common(1)[0][0]
    return named + [common] * (total - len(named))


def evaluate(check: Check, gather: Gatherer, profile: profiles.Profile) -> Result:
    facts: dict[str, Any] = {}
    for need in check.needs:
        name = need.rstrip("?")
        facts[name] = gather.get(name)
        failure = gather.failures.get(name)
        # an optional fact cut off by the deadline is not "unavailable here": the check was not run
        if failure is not None and (not need.endswith("?") or isinstance(failure, DeadlinePassed)):
            status = Status.ERROR if failure.harness else Status.FAIL
            return Result(check.id, status, reason=failure.reason, remediation=failure.remediation,
                          evidence=failure.evidence)
    began = time.monotonic()
    try:
        result = check.evaluate(facts, profile)
    except Exception as exc:
        result = Result(check.id, Status.ERROR, reason=f"internal error evaluating: {type(exc).__name__}: {exc}",
                        evidence=traceback.format_exc())
    result.duration_s = round(time.monotonic() - began + sum(gather.timings.get(n.rstrip("?"), 0)
                                                             for n in check.needs), 3)
    return result


def summary_facts(ctx: Context, profile: profiles.Profile, gather: Gatherer) -> dict[str, Any]:
    """What `gpucheck cluster` compares across nodes."""
    nvml_facts = ctx.facts.get("nvml") or {}
    gpus = [g for g in nvml_facts.get("gpus", []) if not g.get("lost")]
    return {
        "profile": profile.name,
        "driver_version": nvml_facts.get("driver_version"),
        "cuda_driver_version": nvml_facts.get("cuda_driver_version"),
        "gpu_count": len(gpus),
        # the programs another user runs on a GPU (read before any work of ours): the cluster's GPU jobs skip it
        "gpu_processes": {f"GPU{g['index']}": g["processes"] for g in gpus if g.get("processes")},
        "gpu_models": sorted({g.get("name") for g in gpus if g.get("name")}),
        # each GPU's identity, lost ones included: the history follows a GPU by its UUID wherever it moves
        "gpus": [{k: g.get(k) for k in ("index", "uuid", "serial", "pci_bus_id", "name")}
                 for g in nvml_facts.get("gpus", [])],
        # which machine this is: the cluster names two inventory entries that reach the same one
        "machine": identity.machine(nvml_facts),
        "libraries": libraries.summary(ctx.facts.get("libraries")),
        "frameworks": frameworks.summary(ctx.facts.get("frameworks")),
        # where each stack's python is, so `gpucheck cluster` runs the workloads with it
        "stacks": {s["name"]: {"python": s["python"], "frameworks": s["frameworks"]}
                   for s in (ctx.facts.get("frameworks") or {}).get("stacks", [])},
        "collect_seconds": gather.timings,
        "collect_errors": {name: exc.reason for name, exc in gather.failures.items()},
        **({"burnin": burnin.summary(ctx.facts)} if "gpuwork" in ctx.facts else {}),
    }


def observed(results: list[Result], profile: profiles.Profile) -> list[Result]:
    """The results the profile's `observe` names, marked so (never counted in the verdict); one that would have
    failed or warned says so first in its reason."""
    patterns = profile.data.get(profiles.OBSERVE) or []
    checks = all_checks()
    for pattern in patterns:
        if not any(check_matches(c.id, pattern) for c in checks):
            raise profiles.ProfileError(f"profile {profile.name}: '{profiles.OBSERVE}' names no check: '{pattern}' "
                                        "(see `gpucheck checks`)")
    for result in results:
        if any(check_matches(result.check, p) for p in patterns):
            result.observed = True
            if result.status in (Status.FAIL, Status.WARN):
                result.reason = f"observed only (would {'drain' if result.status == Status.FAIL else 'warn'}): " \
                                f"{result.reason}"
    return results


def run_node(options: Options, config: NodeConfig, given: dict[str, Any] | None = None) -> Report:
    """Raises UsageError or profiles.ProfileError for bad input; everything else is a result. `given`: facts a
    caller collected itself, by collector name (gpucheck watch's kernel log lines), used instead of collecting."""
    return judge(options, config, given)[0]


def judge(options: Options, config: NodeConfig, given: dict[str, Any] | None = None) -> tuple[Report, dict[str, Any]]:
    """run_node's report, and the facts every collector gathered for it (gpucheck rma keeps them whole)."""
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    began = time.monotonic()
    checks = select_checks(options.only or [], options.skip or [], options.full)
    if any(c.id == "gpu.burn" for c in checks) and options.burn_seconds >= options.bench_timeout:
        raise UsageError(f"--burn-seconds ({options.burn_seconds:g}) must be shorter than --bench-timeout "
                         f"({options.bench_timeout:g}): each GPU's worker is killed at --bench-timeout, burn included")
    ctx = Context(timeout=options.timeout, bench_timeout=options.bench_timeout, config=config,
                  xid_lookback_s=options.xid_lookback_s, xid_since_boot=options.xid_since_boot,
                  selected=tuple(c.id for c in checks), burn_seconds=options.burn_seconds,
                  allow_busy=options.allow_busy, full=options.full, facts=dict(given or {}),
                  gpus=tuple(options.gpus) if options.gpus else None)
    deadline = options.deadline or default_deadline(options.timeout, options.bench_timeout, options.full)
    gather = Gatherer(ctx, deadline, began)
    profile = choose_profile(options.profile, config, gather)
    ctx.profile = profile
    results = observed([evaluate(check, gather, profile) for check in checks], profile)
    return Report(host=socket.gethostname(), profile=profile.name, results=results,
                  facts=summary_facts(ctx, profile, gather), thresholds=profile.data, started=started,
                  duration_s=time.monotonic() - began, version=__version__,
                  cluster_name=config.cluster_name), ctx.facts
