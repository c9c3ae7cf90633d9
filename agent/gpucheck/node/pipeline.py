"""`gpucheck node`: pick the checks, gather each collector's facts once, evaluate, report."""

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

from .. import __version__, profiles
from ..config import NodeConfig
from ..model import Report, Result, Status
from . import (
    Check,
    CollectError,
    Context,
    bandwidth,
    frameworks,
    gpu,
    health,
    host,
    infiniband,
    kernel_log,
    libraries,
    links,
    nvml,
)

DOMAINS = [gpu, health, links, kernel_log, infiniband, libraries, frameworks, bandwidth, host]


class UsageError(Exception):
    """Bad options (unknown check id, ...). str(e) is a one-line reason."""


def all_checks() -> list[Check]:
    return [check for module in DOMAINS for check in module.CHECKS]


def all_collectors() -> dict[str, Callable[[Context], dict[str, Any]]]:
    found: dict[str, Callable[[Context], dict[str, Any]]] = {"nvml": nvml.collect}
    for module in DOMAINS:
        found.update(getattr(module, "COLLECTORS", {}))
    return found


def _matches(check: Check, pattern: str) -> bool:
    return (check.id == pattern or check.id.startswith(pattern.rstrip(".") + ".")
            or fnmatch.fnmatchcase(check.id, pattern))


def select_checks(only: list[str], skip: list[str], full: bool) -> list[Check]:
    """--only/--skip take ids, prefixes (`gpu`) or globs (`gpu.ecc*`); benchmarks need --full
    unless named exactly in --only."""
    checks = all_checks()
    for pattern in [*only, *skip]:
        if not any(_matches(c, pattern) for c in checks):
            raise UsageError(f"no check matches '{pattern}' (see `gpucheck checks`)")
    chosen = [c for c in checks if not only or any(_matches(c, p) for p in only)]
    chosen = [c for c in chosen if not any(_matches(c, p) for p in skip)]
    chosen = [c for c in chosen if not c.active or full or c.id in only]
    if not chosen:
        raise UsageError("no check left to run (the bw.* benchmarks and host.read_throughput need --full)")
    return chosen


@dataclass
class Options:
    profile: str | None = None
    only: list[str] | None = None
    skip: list[str] | None = None
    full: bool = False
    timeout: float = 60.0
    bench_timeout: float = 600.0


class Gatherer:
    """Runs each collector at most once, keeping its facts or its failure."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.collectors = all_collectors()
        self.failures: dict[str, CollectError] = {}
        self.timings: dict[str, float] = {}

    def get(self, name: str) -> dict[str, Any] | None:
        if name in self.ctx.facts:
            return self.ctx.facts[name]
        if name in self.failures:
            return None
        began = time.monotonic()
        try:
            self.ctx.facts[name] = self.collectors[name](self.ctx)
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
    names = selection_names(gather.get("nvml") or {}, gather.get("pci_gpus") or {})
    hcas = len((gather.get("nic_numa") or {}).get("nics", {}))
    return profiles.select(names, hcas, config.profiles_dir)


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
        if facts[name] is None and not need.endswith("?"):
            failure = gather.failures[name]
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
        "gpu_models": sorted({g.get("name") for g in gpus if g.get("name")}),
        "libraries": libraries.summary(ctx.facts.get("libraries")),
        "frameworks": frameworks.summary(ctx.facts.get("frameworks")),
        # where each stack's python is, so `gpucheck cluster` runs the workloads with it
        "stacks": {s["name"]: {"python": s["python"], "frameworks": s["frameworks"]}
                   for s in (ctx.facts.get("frameworks") or {}).get("stacks", [])},
        "collect_seconds": gather.timings,
        "collect_errors": {name: exc.reason for name, exc in gather.failures.items()},
    }


def run_node(options: Options, config: NodeConfig) -> Report:
    """Raises UsageError or profiles.ProfileError for bad input; everything else is a result."""
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    began = time.monotonic()
    checks = select_checks(options.only or [], options.skip or [], options.full)
    ctx = Context(timeout=options.timeout, bench_timeout=options.bench_timeout, config=config)
    gather = Gatherer(ctx)
    profile = choose_profile(options.profile, config, gather)
    ctx.profile = profile
    results = [evaluate(check, gather, profile) for check in checks]
    return Report(host=socket.gethostname(), profile=profile.name, results=results,
                  facts=summary_facts(ctx, profile, gather), thresholds=profile.data, started=started,
                  duration_s=time.monotonic() - began, version=__version__)
