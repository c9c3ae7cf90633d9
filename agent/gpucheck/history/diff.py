"""`gpucheck diff BEFORE AFTER`: what changed between two runs of a node (two `gpucheck node --format json`
reports) or of a cluster (two cluster reports' report.json, node by node, then the cluster's own checks): the
versions, the checks whose verdict moved, and the figures (rates: TFLOP/s, GB/s, Gb/s, MB/s, per second) that moved
by more than the noise. The before/after view of an upgrade; its verdict follows the exit-code convention: 2 when a
check got worse to fail or error or a node was lost (a report before, none after), 1 when a check got worse to warn
or a figure dropped beyond the noise, else 0."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..model import EXIT_FAIL, EXIT_OK, EXIT_WARN
from ..redact import for_terminal

DEFAULT_NOISE_PCT = 5.0  # a fixed noise floor until the history measures each figure's own run-to-run spread
RATE_UNITS = ("TFLOPS", "GBps", "Gbps", "MBps")  # name tokens of a figure where more is better
RANK = {"skip": 0, "pass": 0, "warn": 1, "fail": 2, "error": 2}
CLUSTER = "(cluster)"  # the NodeDiff of a cluster report's own checks: no node name has parentheses


class DiffError(ValueError):
    """A file that is not a gpucheck report: one line for the user."""


@dataclass
class NodeDiff:
    node: str
    versions: list[tuple[str, str, str]] = field(default_factory=list)  # (what, before, after)
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (check, before, after)
    figures: list[tuple[str, float, float, float]] = field(default_factory=list)  # (figure, before, after, %)
    only_in: str = ""  # "before" / "after": the node is in one run only
    why_gone: str = ""  # only_in "before": what the later run says of the node instead of a report

    def exit_code(self) -> int:
        if self.only_in == "before":  # lost: whatever it was, it is not checked any more
            return EXIT_FAIL
        worse = [RANK.get(after, 2) for _, before, after in self.verdicts if RANK.get(after, 2) > RANK.get(before, 2)]
        if max(worse, default=0) >= 2:
            return EXIT_FAIL
        if worse or any(pct < 0 for *_, pct in self.figures):
            return EXIT_WARN
        return EXIT_OK


def node_reports(doc: Any, path: str) -> dict[str, dict]:
    """{node: its report} of a node report (one) or a cluster report.json (every node that has one)."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return {str(doc.get("host") or "node"): doc}
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), dict):
        return {name: entry["report"] for name, entry in sorted(doc["nodes"].items())
                if isinstance(entry, dict) and isinstance(entry.get("report"), dict)
                and isinstance(entry["report"].get("results"), list)}
    raise DiffError(f"{path}: not a gpucheck report (neither `gpucheck node --format json` nor a cluster's "
                    "report.json)")


def versions(report: dict) -> dict[str, str]:
    """Every version a report names: the driver, CUDA's driver API, each library by where it was found, each
    framework by stack, the agent and the profile it was judged against."""
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    found = {"gpucheck": report.get("gpucheck_version"), "profile": report.get("profile"),
             "driver": facts.get("driver_version"), "cuda driver API": facts.get("cuda_driver_version")}
    for group in ("libraries", "frameworks"):
        for name, where in (facts.get(group) or {}).items():
            for place, version in (where.items() if isinstance(where, dict) else []):
                if isinstance(version, str | int | float) and not isinstance(version, bool):
                    found[f"{name} ({place})" if group == "libraries" else f"{place} ({name})"] = version
    return {k: str(v) for k, v in found.items() if v not in (None, "")}


def figures(report: dict) -> dict[str, float]:
    """Every rate a report measured, by `check GPU0 bf16_TFLOPS`: numbers under a name with a rate unit."""
    found: dict[str, float] = {}

    def walk(value: Any, path: list[str], rate: bool) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, [*path, str(key)], rate or is_rate(str(key)))
        elif rate and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            found[" ".join(path)] = float(value)

    for result in report.get("results") or []:
        if isinstance(result, dict) and result.get("status") in ("pass", "warn", "fail"):
            check = str(result.get("check"))
            walk(result.get("measured"), [check], is_rate(check.rsplit(".", 1)[-1]))
    return found


def is_rate(name: str) -> bool:
    """A figure where more is better, by its name: `bf16_TFLOPS`, `gpu.burn TFLOPS_median`, `images_per_s`."""
    tokens = re.split(r"[_ .]", name)
    return any(unit in tokens for unit in RATE_UNITS) or name.endswith("_per_s")


def statuses(report: dict) -> dict[str, str]:
    return {str(r.get("check")): str(r.get("status")) for r in report.get("results") or [] if isinstance(r, dict)}


def moved(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str, str]]:
    """(check, before, after) of every check whose verdict moved (a check absent on one side and skipped on the
    other has not)."""
    return [(k, old.get(k, "-"), new.get(k, "-")) for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k) and {old.get(k), new.get(k)} != {None, "skip"}]


def compare(before: dict, after: dict, node: str, noise_pct: float = DEFAULT_NOISE_PCT) -> NodeDiff:
    diff = NodeDiff(node)
    old, new = versions(before), versions(after)
    diff.versions = [(k, old.get(k, "-"), new.get(k, "-")) for k in sorted(old.keys() | new.keys())
                     if old.get(k) != new.get(k)]
    diff.verdicts = moved(statuses(before), statuses(after))
    old_f, new_f = figures(before), figures(after)
    for name in sorted(old_f.keys() & new_f.keys()):
        a, b = old_f[name], new_f[name]
        pct = (b - a) / abs(a) * 100 if a else (math.inf if b else 0.0)
        if abs(pct) > noise_pct:
            diff.figures.append((name, a, b, pct))
    return diff


def cluster_checks(doc: Any) -> dict[str, str] | None:
    """The cluster's own checks of a cluster report.json (check -> status); None for a node report."""
    if not isinstance(doc, dict) or not isinstance(doc.get("cluster"), list):
        return None
    return {str(r.get("check")): str(r.get("status")) for r in doc["cluster"] if isinstance(r, dict)}


def why_gone(doc: Any, node: str) -> str:
    """What a cluster report says of a node that has no report in it (a node report says nothing)."""
    entry = (doc.get("nodes") or {}).get(node) if isinstance(doc, dict) else None
    if not isinstance(entry, dict):
        return "not in the run"
    status, reason = entry.get("status", "?"), entry.get("reason")
    return f"{status}: {reason}" if reason else str(status)  # a reason that ends in ":" keeps it


def diff_runs(before_doc: Any, after_doc: Any, before_path: str, after_path: str,
              noise_pct: float = DEFAULT_NOISE_PCT) -> list[NodeDiff]:
    old, new = node_reports(before_doc, before_path), node_reports(after_doc, after_path)
    if len(old) == len(new) == 1 and set(old) != set(new):  # one node's runs, its name changed (or unset)
        new = {next(iter(old)): next(iter(new.values()))}
    found = [compare(old[n], new[n], n, noise_pct) for n in sorted(old.keys() & new.keys())]
    found += [NodeDiff(n, only_in="before", why_gone=why_gone(after_doc, n)) for n in sorted(old.keys() - new.keys())]
    found += [NodeDiff(n, only_in="after") for n in sorted(new.keys() - old.keys())]
    old_c, new_c = cluster_checks(before_doc), cluster_checks(after_doc)
    if old_c is not None and new_c is not None:
        found.append(NodeDiff(CLUSTER, verdicts=moved(old_c, new_c)))
    return found


def number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def render_text(diffs: list[NodeDiff], noise_pct: float) -> str:
    """The terminal's text: every name and version in it is a node's word, shown as escapes where a terminal would
    act on it (redact.for_terminal)."""
    return "".join(for_terminal(line) + "\n" for line in text_lines(diffs, noise_pct))


def text_lines(diffs: list[NodeDiff], noise_pct: float) -> list[str]:
    lines = []
    for d in diffs:
        if d.only_in == "before":
            lines.append(f"{d.node}: lost: a report in the before run, none in the after run ({d.why_gone})")
            continue
        if d.only_in:
            lines.append(f"{d.node}: only in the {d.only_in} run")
            continue
        if d.node == CLUSTER and not d.verdicts:
            lines.append("cluster checks: no verdict changed")
            continue
        if not (d.versions or d.verdicts or d.figures):
            lines.append(f"{d.node}: no version, verdict or figure changed (figures within {noise_pct:g} %)")
            continue
        lines.append("cluster checks:" if d.node == CLUSTER else f"{d.node}:")
        lines += [f"  version  {what}: {a} -> {b}" for what, a, b in d.versions]
        lines += [f"  verdict  {check}: {a} -> {b}" for check, a, b in d.verdicts]
        lines += [f"  figure   {name}: {number(a)} -> {number(b)} ({pct:+.1f} %)" for name, a, b, pct in d.figures]
    return lines


def render_json(diffs: list[NodeDiff], noise_pct: float) -> str:
    def entry(d: NodeDiff) -> dict[str, Any]:
        return {"only_in": d.only_in or None, "why_gone": d.why_gone or None,
                "versions": [{"what": w, "before": a, "after": b} for w, a, b in d.versions],
                "verdicts": [{"check": c, "before": a, "after": b} for c, a, b in d.verdicts],
                "figures": [{"figure": f, "before": a, "after": b,
                             "change_pct": round(p, 2) if math.isfinite(p) else None}  # from 0: no percentage
                            for f, a, b, p in d.figures],
                "exit_code": d.exit_code()}

    doc: dict[str, Any] = {"noise_pct": noise_pct,
                           "exit_code": max((d.exit_code() for d in diffs), default=EXIT_OK),
                           "nodes": {d.node: entry(d) for d in diffs if d.node != CLUSTER}}
    for d in diffs:
        if d.node == CLUSTER:  # the cluster's own checks (two cluster reports)
            doc["cluster"] = {"verdicts": entry(d)["verdicts"], "exit_code": d.exit_code()}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"  # strict JSON: any reader takes it
