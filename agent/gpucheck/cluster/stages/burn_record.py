"""What the burn stage keeps as it goes (report.json's `burn`, docs/burn.md): the plan, each node's rounds (its own
`gpu.burn` verdict each time) and its GPUs' burn-in figures over all rounds, and the fabric's all-reduce bus
bandwidth cold and under the burn. The report is rewritten after each round, so an interrupted burn keeps every
round it finished. Pure: node outcomes and all-reduce results in, plain data out."""

from __future__ import annotations

import statistics
from typing import Any

from ...model import Result, Status
from ...report.cluster.burnin import finite
from ..context import NodeOutcome

BURN_CHECK = "gpu.burn"
JUDGED = {Status.PASS.value, Status.WARN.value, Status.FAIL.value, Status.ERROR.value}  # a burn that ran


def new_record(seconds: float, rounds: int, racks: dict[str, str | None], launcher: str) -> dict[str, Any]:
    """The record before the first round: `racks` maps each node that burns to its rack (None: the inventory gives
    none)."""
    return {"seconds": seconds, "rounds": rounds, "round_s": round(seconds / rounds, 3), "rounds_done": 0,
            "interrupted": False, "launcher": launcher,
            "fabric": {"tool": None, "cold": None, "loaded": []},
            "nodes": {node: {"rack": rack, "rounds": [], "gpus": {}} for node, rack in racks.items()}}


def burn_result(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The node's own gpu.burn result in its report (None: the agent gave none)."""
    for result in (report or {}).get("results") or []:
        if isinstance(result, dict) and result.get("check") == BURN_CHECK:
            return result
    return None


def gpu_facts(report: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """facts.burnin.gpus of a node report: GPU label -> its burn-in figures (and burn_timeline)."""
    gpus = (((report or {}).get("facts") or {}).get("burnin") or {}).get("gpus")
    return {str(k): v for k, v in gpus.items() if isinstance(v, dict)} if isinstance(gpus, dict) else {}


def joined(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two rounds' series end to end (one timeline's shape: every_s and lists); the first round's every_s, the rounds
    being of one length."""
    if not isinstance(new, dict):
        return old
    if not isinstance(old, dict):
        return dict(new)
    out = dict(old)
    for key, values in new.items():
        if isinstance(values, list):
            out[key] = [*(old.get(key) if isinstance(old.get(key), list) else []), *values]
    return out


def merge_gpu(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A GPU's figures over the rounds: the median of its rounds' medians, its hottest sample, its series joined."""
    if not old:
        medians = [new["burn_TFLOPS_median"]] if finite(new.get("burn_TFLOPS_median")) else []
        return {**new, "burn_TFLOPS_rounds": medians}
    out = {**old, **{k: v for k, v in new.items() if k not in ("burn_timeline", "burn_TFLOPS_median")}}
    if finite(new.get("burn_TFLOPS_median")):
        out["burn_TFLOPS_rounds"] = [*old.get("burn_TFLOPS_rounds", []), new["burn_TFLOPS_median"]]
        out["burn_TFLOPS_median"] = statistics.median(out["burn_TFLOPS_rounds"])
    hottest = [v for v in (old.get("burn_temperature_C_max"), new.get("burn_temperature_C_max")) if finite(v)]
    if hottest:
        out["burn_temperature_C_max"] = max(hottest)
    lines = {}
    for key in ("TFLOPS", "nvml"):
        line = joined((old.get("burn_timeline") or {}).get(key), (new.get("burn_timeline") or {}).get(key))
        if line is not None:
            lines[key] = line
    if lines:
        out["burn_timeline"] = lines
    return out


def round_verdict(outcome: NodeOutcome, result: dict[str, Any] | None) -> tuple[str, str]:
    """(status, reason) of a node's round: its own gpu.burn verdict. A node that did not burn did not pass the burn:
    an answer without a gpu.burn verdict, or with a skipped one, is an error (a failing node stays failed)."""
    if result is None:
        why = "its answer carries no gpu.burn verdict: it did not burn" if outcome.report else outcome.reason
        return (Status.FAIL if outcome.status == Status.FAIL else Status.ERROR).value, why
    status, reason = str(result.get("status") or ""), str(result.get("reason") or "")
    if status not in JUDGED:
        return Status.ERROR.value, f"its gpu.burn is {status or 'without a verdict'} ({reason}): it did not burn"
    return status, reason


def add_round(record: dict[str, Any], outcomes: dict[str, NodeOutcome]) -> None:
    """One finished round: each node's verdict on its own burn, and its GPUs' figures merged in."""
    for node, outcome in outcomes.items():
        entry = record["nodes"][node]
        result = burn_result(outcome.report)
        status, reason = round_verdict(outcome, result)
        entry["rounds"].append({"status": status, "reason": reason, "measured": (result or {}).get("measured"),
                                "kind": outcome.kind, "wall_s": round(outcome.wall_s, 3)})
        for label, figures in gpu_facts(outcome.report).items():
            entry["gpus"][label] = merge_gpu(entry["gpus"].get(label), figures)
    record["rounds_done"] += 1


def add_allreduce(record: dict[str, Any], result: Result, when: str) -> None:
    """One all-reduce run: `when` is cold (before the burn) or loaded (during it)."""
    measured = result.measured if isinstance(result.measured, dict) else {}
    run = {"status": result.status.value, "busbw_GBps": measured.get("busbw_GBps"), "reason": result.reason,
           "tool": measured.get("tool")}
    record["fabric"]["tool"] = record["fabric"]["tool"] or measured.get("tool")
    if when == "cold":
        record["fabric"]["cold"] = run
    else:
        record["fabric"]["loaded"].append(run)
