"""What the history keeps of a report: a node report (`gpucheck node --format json`) or a cluster report
(report.json) as plain records: the run, each node's part of it (its verdict, its GPUs' identity, each check's
verdict, every figure with its unit and GPU, the versions), and the cluster's own checks as the node CLUSTER."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..model import verdict_of_exit
from .diff import node_reports, versions
from .gpu_names import names_gpu

CLUSTER = ""  # the node name a cluster run's own checks are kept under: no inventory host has an empty name
NODE_GPU = -1  # the GPU index of a figure that is the node's, not one GPU's
GPU_KEY = re.compile(r"GPU(\d{1,4})")  # how a report names one GPU in a check's measured values
GPU_INDEX_MAX = 9999  # the same four digits for facts.gpus: an index past it is no GPU's (and may not fit SQLite)
# name tokens that say a figure's unit (gpu.burn TFLOPS_median: TFLOPS; temperature_C_max: C), last one first
UNITS = ("TFLOPS", "GBps", "Gbps", "MBps", "MHz", "GiB", "MiB", "W", "C", "s", "ms", "pct")
# whose measured values are measurements: a skip may be "measured, not judged" (a GPU the SKU table does not know);
# an error's are what was read before the check could not go on
MEASURED = ("pass", "warn", "fail", "skip")


class NotAReport(ValueError):
    """The document is not a gpucheck report: one line for the user."""


@dataclass
class NodeRun:
    node: str
    status: str
    reason: str | None = None
    profile: str | None = None
    gpus: list[tuple[int, str | None, str | None, str | None]] = field(default_factory=list)  # (index, uuid, bus, name)
    results: list[tuple[str, str, str | None]] = field(default_factory=list)  # (check, status, reason unless pass)
    figures: list[tuple[str, str, str, int, float]] = field(default_factory=list)  # (check, figure, unit, gpu, value)
    versions: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] | None = None  # what the node said, kept whole when it did not pass (evidence)
    # (at, state, path, reason, the UUIDs of the GPUs its failures name, comma-separated)
    transitions: list[tuple[str, str, str, str, str]] = field(default_factory=list)


@dataclass
class Run:
    kind: str  # node | cluster
    started: str  # UTC, 2026-11-27T05:00:00Z
    digest: str  # of the whole document: the same report recorded twice is one run
    exit_code: int | None
    gpucheck_version: str | None
    complete: bool
    nodes: list[NodeRun]
    cluster: str | None = None  # the report's cluster_name (its inventory's), where it says one


def text_of(value: Any) -> str | None:
    """A field a report gives as text (a version, a profile, a reason): any other JSON value as its text, so a node
    that sends a list where a word belongs is recorded as saying that, never stops the records of the others."""
    return None if value is None else value if isinstance(value, str) else json.dumps(value, default=str)


def cluster_of(doc: dict[str, Any]) -> str | None:
    """The cluster a report says it is of (`cluster_name`: a cluster run's inventory, a node's node.yaml)."""
    name = doc.get("cluster_name")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise NotAReport(f"its cluster_name {json.dumps(name, default=str)[:40]} is not a name")
    return name


def exit_code_of(doc: dict[str, Any]) -> int | None:
    code = doc.get("exit_code")
    if code is None:
        return None
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise NotAReport(f"its exit_code {json.dumps(code, default=str)[:40]} is not an exit status (0-255)")
    return code


def utc(text: Any) -> str:
    """An ISO 8601 time as UTC `YYYY-MM-DDTHH:MM:SSZ`, so that times from any report sort as text."""
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise NotAReport(f"its start time {str(text)[:40]!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)  # gpucheck writes UTC; a time without a zone is taken as it
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def unit_of(name: str) -> str:
    if name.endswith("per_s"):
        return "per_s"
    tokens = re.split(r"[_ .]", name)
    return next((t for t in reversed(tokens) if t in UNITS), "")


def finite(value: int | float) -> bool:
    """A number SQLite can keep as REAL: not NaN, not infinite, not an integer past what a float holds."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def figures_of(check: str, measured: Any) -> list[tuple[str, str, str, int, float]]:
    """Every finite number under a check's measured values: (check, figure, unit, GPU index or NODE_GPU, value).
    A `GPUn` key says whose the numbers under it are; the other keys on the way name the figure."""
    found: list[tuple[str, str, str, int, float]] = []

    def walk(value: Any, path: list[str], gpu: int) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                label = GPU_KEY.fullmatch(str(key))
                if label and gpu == NODE_GPU:
                    walk(inner, path, int(label[1]))
                else:
                    walk(inner, [*path, str(key)], gpu)
        elif isinstance(value, int | float) and not isinstance(value, bool) and finite(value):
            name = " ".join(path)
            found.append((check, name, unit_of(name) or unit_of(check.rsplit(".", 1)[-1]), gpu, float(value)))

    walk(measured, [], NODE_GPU)
    return found


def checks_of(results: Any) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str, int, float]]]:
    verdicts, figures = [], []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict) or not result.get("check"):
            continue
        check, status = str(result["check"]), str(result.get("status"))
        verdicts.append((check, status, None if status in ("pass", "skip") else str(result.get("reason") or "")))
        if status in MEASURED:
            figures += figures_of(check, result.get("measured"))
    return verdicts, figures


def gpus_of(facts: dict[str, Any]) -> list[tuple[int, str | None, str | None, str | None]]:
    """Each GPU's identity as the report names it (facts.gpus); an older report names none, and its GPUs are known
    by their index only."""
    found = []
    for gpu in facts.get("gpus") or []:
        if isinstance(gpu, dict) and type(gpu.get("index")) is int and 0 <= gpu["index"] <= GPU_INDEX_MAX:
            found.append((gpu["index"], *(str(gpu[k]) if gpu.get(k) else None for k in ("uuid", "pci_bus_id", "name"))))
    return found


def node_run(node: str, report: dict[str, Any], status: str | None = None, reason: str | None = None) -> NodeRun:
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    verdicts, figures = checks_of(report.get("results"))
    own = status or verdict_of_exit(report.get("exit_code"))
    return NodeRun(node=node, status=own, reason=text_of(reason), profile=text_of(report.get("profile")),
                   gpus=gpus_of(facts), results=verdicts, figures=figures, versions=versions(report),
                   report=None if own == "pass" else report, transitions=transitions_of(report, facts, own))


# What a node's Slurm action makes of it (facts.slurm.action, drain_rule.Action), or its Kubernetes one
# (facts.kubernetes, kubernetes/node_rule.Change, the same shape: a taint is a drain): the states of docs/watch.md.
STATE_OF_ACTION = {"drain": "drained", "held": "held", "resume": "returned"}
# A repair's steps (repair/flow.py), each a transition of its own.
REPAIR_STATES = ("waiting", "repairing", "proving", "returned", "needs-hands")


def transitions_of(report: dict[str, Any], facts: dict[str, Any], status: str) -> list[tuple[str, str, str, str, str]]:
    """The node's state changes a report tells of: a fault the watcher judged (`detected`, at the run's start),
    and what its run did in Slurm or Kubernetes (`drained`, `held` by the breaker, `returned` to service), when it did,
    or a repair's steps (`waiting`, `repairing`, `proving`, then `returned` or `needs-hands`);
    each with the GPUs the run's failures name (by UUID), so that a GPU's time out of service can be told."""
    failures = [f"{r.get('check')} {r.get('reason') or ''}" for r in report.get("results") or []
                if isinstance(r, dict) and r.get("status") == "fail"]
    gpus = ",".join(sorted({uuid for index, uuid, bus, _ in gpus_of(facts)
                            if uuid and any(names_gpu(text, index, uuid, bus) for text in failures)}))
    found = []
    watch = facts.get("watch")
    if isinstance(watch, dict) and status == "fail":
        moved = watch.get("moved") if isinstance(watch.get("moved"), dict) else {}
        found.append((utc(report.get("started")), "detected", "watch",
                      "; ".join(f"{check}: {', '.join(map(str, why))}" for check, why in moved.items()
                                if isinstance(why, list))[:500], gpus))
    repair = facts.get("repair")
    if isinstance(repair, dict) and isinstance(repair.get("steps"), list):  # its steps tell what it did in Slurm
        named = ",".join(sorted(str(g["uuid"]) for g in repair.get("gpus") or [] if isinstance(g, dict)
                                and g.get("uuid")))
        found += [(utc(step.get("at")), step["state"], "repair", str(text_of(step.get("reason")) or "")[:500],
                   "" if step["state"] == "returned" else named)
                  for step in repair["steps"] if isinstance(step, dict) and step.get("state") in REPAIR_STATES]
        return found
    told = facts.get("slurm") or facts.get("kubernetes")  # the workload manager the run told (tell.py): one
    if isinstance(told, dict) and told.get("action") in STATE_OF_ACTION:
        state = STATE_OF_ACTION[told["action"]]
        found.append((utc(told.get("at")), state, str(text_of(told.get("path"))),
                      str(text_of(told.get("reason")) or "")[:500], "" if state == "returned" else gpus))
    return found


def from_node_report(doc: dict[str, Any], node: str | None = None) -> Run:
    """`node`: the name to record it under (the inventory's), when not the report's own host name."""
    node = node or str(doc.get("host") or "")
    if not node:
        raise NotAReport("a node report without its host name")
    return Run(kind="node", started=utc(doc.get("started")), digest=digest(doc), exit_code=exit_code_of(doc),
               gpucheck_version=text_of(doc.get("gpucheck_version")), complete=True, nodes=[node_run(node, doc)],
               cluster=cluster_of(doc))


def from_cluster_report(doc: dict[str, Any]) -> Run:
    reports = node_reports(doc, "report.json")
    nodes = []
    for name, entry in doc["nodes"].items():
        if not isinstance(entry, dict) or entry.get("status") == "pending":
            continue  # never checked: nothing to remember
        status, reason = str(entry.get("status")), text_of(entry.get("reason"))
        if name in reports:
            nodes.append(node_run(name, reports[name], status, reason))
        else:  # unreachable, hung, interrupted: its verdict and why, and the entry as evidence
            nodes.append(NodeRun(node=name, status=status, reason=reason, report=entry))
    verdicts, figures = checks_of(doc.get("cluster"))
    if verdicts:
        worst = next((s for s in ("fail", "error", "warn", "pass") if any(v[1] == s for v in verdicts)), "skip")
        nodes.append(NodeRun(node=CLUSTER, status=worst, results=verdicts, figures=figures))
    return Run(kind="cluster", started=utc(doc.get("started")), digest=digest(doc), exit_code=exit_code_of(doc),
               gpucheck_version=text_of(doc.get("gpucheck_version")), complete=bool(doc.get("complete")), nodes=nodes,
               cluster=cluster_of(doc))


def from_document(doc: Any) -> Run:
    """The run a gpucheck report records; NotAReport for anything else."""
    if isinstance(doc, dict) and doc.get("kind") == "cluster" and isinstance(doc.get("nodes"), dict):
        return from_cluster_report(doc)
    if isinstance(doc, dict) and isinstance(doc.get("results"), list) and "started" in doc:
        return from_node_report(doc)
    raise NotAReport("not a gpucheck report (neither `gpucheck node --format json` nor a cluster's report.json)")
