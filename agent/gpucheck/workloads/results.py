"""Read and judge what the workloads print (gpucheck side; standard library only).

Every workload prints one line per rank (or per task), ``GPUCHECK_RESULT {json}``. The launchers add
their own decoration: ``mpirun --tag-output`` prefixes ``[1,0]<stdout>:``, ``horovodrun`` prefixes
``[0]<stdout>:``, torchrun with ``--tee`` prefixes ``[default0]:``, and the outputs of many ranks arrive
interleaved (a rank's line is one ``write`` of less than PIPE_BUF, so it is never split by another
rank's, but a launcher can still glue a line to a partial one). ``parse_results`` therefore looks for the
marker anywhere and decodes the JSON object right after it.

- ``judge_smoke(results, expected_ranks)``: a smoke training run (Horovod or DDP) passes when every rank
  reported, none failed, the loss fell on every rank and every rank ends with the same weights.
- ``judge_ps(results, expected_tasks)``: the same for TensorFlow parameter-server mode (chief + tasks).
- ``judge_allreduce(results, expected_ranks, busbw_min_GBps=None)``: the all-reduce benchmark.
- ``scaling(single, multi)``: throughput at 1 rank vs N ranks and the efficiency, beside published
  reference points (``REFERENCES``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

from ..references import REFERENCES

MARK = "GPUCHECK_RESULT "
# "[1,0]<stdout>:" (mpirun --tag-output), "[0]<stdout>:" (horovodrun), "[default0]:" (torchrun --tee)
_PREFIX = re.compile(r"\[(?:(?P<job>\d+),)?(?P<rank>\d+)\]<std(?:out|err)>:|\[default(?P<trank>\d+)\]:")
_DECODER = json.JSONDecoder()

def parse_results(stdout: str) -> list[dict[str, Any]]:
    """Every ``GPUCHECK_RESULT`` object in a launcher's output, in order of appearance.

    Tolerates launcher prefixes and interleaving; a marker whose JSON cannot be decoded is skipped (the
    rank it belonged to will show up as missing, which is what it is). When the JSON carries no rank, the
    launcher's prefix supplies one as ``launcher_rank``.
    """
    found: list[dict[str, Any]] = []
    text = stdout.replace("\r\n", "\n")
    pos = 0
    while True:
        at = text.find(MARK, pos)
        if at < 0:
            return found
        start = at + len(MARK)
        pos = start
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        pos = end
        line_start = text.rfind("\n", 0, at) + 1
        prefix = None
        for m in _PREFIX.finditer(text, line_start, at):
            prefix = m
        if prefix is not None:
            obj.setdefault("launcher_rank", int(prefix.group("rank") or prefix.group("trank")))
        found.append(obj)


def _where(r: Mapping[str, Any]) -> str:
    return f"rank {r.get('rank')} on {r.get('hostname', '?')}"


# What a rank's loss must do, by the result field that says whether it did: the smoke jobs learn a target, so
# their loss falls; the training benchmark learns random labels, so its loss need only stay finite.
LOSS_RULES = {"loss_fell": "loss did not fall", "loss_finite": "loss was not finite"}


def judge_smoke(results: Sequence[Mapping[str, Any]], expected_ranks: int,
                workload: str | None = None, loss_rule: str = "loss_fell") -> dict[str, Any]:
    """Judge one data-parallel training run: every rank present and ok, the loss fell (or, with
    loss_rule "loss_finite", stayed finite), identical weights.

    Returns {"passed", "reasons", "expected_ranks", "reported_ranks", "missing_ranks", "failed_ranks",
    "loss_not_fallen", "weights_majority", "weights_odd", "samples_per_s_total", "samples_per_s_min",
    "samples_per_s_max", "hosts"}. A rank that printed nothing is suspected of a crash or a hang (the
    launcher's exit status and timeout say which).
    """
    rows = [dict(r) for r in results if workload is None or r.get("workload") == workload]
    reasons: list[str] = []
    by_rank: dict[int, dict[str, Any]] = {}
    for r in rows:
        rank = r.get("rank")
        if not isinstance(rank, int):
            reasons.append(f"a result without a rank from {r.get('hostname', '?')}: {r.get('error', 'no error')}")
            continue
        if rank in by_rank:
            reasons.append(f"rank {rank} reported twice ({by_rank[rank].get('hostname')} and {r.get('hostname')})")
            continue
        by_rank[rank] = r
    missing = [i for i in range(expected_ranks) if i not in by_rank]
    extra = sorted(i for i in by_rank if not 0 <= i < expected_ranks)
    if missing:
        reasons.append(f"{len(missing)} of {expected_ranks} rank(s) reported nothing: {_ranks(missing)} "
                       "(crashed or hung: see the launcher's exit status and log)")
    if extra:
        reasons.append(f"unexpected rank(s) {_ranks(extra)} (expected 0..{expected_ranks - 1})")
    sizes = {r.get("size") for r in by_rank.values() if r.get("size") is not None}
    if sizes and sizes != {expected_ranks}:
        reasons.append(f"ranks report a world size of {sorted(sizes)}, expected {expected_ranks}")

    failed = [r for _, r in sorted(by_rank.items()) if not r.get("ok", False)]
    for r in failed:
        reasons.append(f"{_where(r)} failed: {r.get('error') or 'no error given'}")
    ok_rows = [r for _, r in sorted(by_rank.items()) if r.get("ok", False)]

    not_fallen = [r for r in ok_rows if r.get(loss_rule) is not True]
    for r in not_fallen:
        reasons.append(f"{LOSS_RULES[loss_rule]} on {_where(r)}: {r.get('loss_first')} -> {r.get('loss_last')}")

    no_hash = [r for r in ok_rows if not r.get("weights_sha256")]
    for r in no_hash:
        reasons.append(f"{_where(r)} reported no weights checksum")
    hashed = [r for r in ok_rows if r.get("weights_sha256")]
    hashes = Counter(r["weights_sha256"] for r in hashed)
    majority, odd = None, []
    if len(hashes) > 1:
        (top, top_n), (_, second_n) = hashes.most_common(2)
        if top_n > second_n:
            majority = top
            odd = [r for r in hashed if r["weights_sha256"] != top]
            for r in odd:
                reasons.append(f"weights differ on {_where(r)}: sha256 {r['weights_sha256'][:12]} vs {top[:12]} "
                               f"on the other {top_n} rank(s)")
        else:  # no majority (e.g. 2 ranks, 2 values): name every group
            odd = hashed
            groups = "; ".join(f"{h[:12]} on {', '.join(_where(r) for r in hashed if r['weights_sha256'] == h)}"
                               for h, _ in hashes.most_common())
            reasons.append(f"weights differ between ranks and no value has a majority: {groups}")
    elif hashes:
        majority = next(iter(hashes))

    speeds = [float(r["samples_per_s"]) for r in ok_rows if isinstance(r.get("samples_per_s"), (int, float))]
    return {
        "passed": not reasons,
        "reasons": reasons,
        "expected_ranks": expected_ranks,
        "reported_ranks": len(by_rank),
        "missing_ranks": missing,
        "failed_ranks": [{"rank": r.get("rank"), "host": r.get("hostname"), "error": r.get("error")} for r in failed],
        "loss_rule": LOSS_RULES[loss_rule],
        "loss_not_fallen": [{"rank": r.get("rank"), "host": r.get("hostname"), "loss_first": r.get("loss_first"),
                             "loss_last": r.get("loss_last")} for r in not_fallen],
        "weights_majority": majority,
        "weights_odd": [{"rank": r.get("rank"), "host": r.get("hostname"), "weights_sha256": r.get("weights_sha256")}
                        for r in odd],
        "samples_per_s_total": round(sum(speeds), 3) if speeds else None,
        "samples_per_s_min": min(speeds) if speeds else None,
        "samples_per_s_max": max(speeds) if speeds else None,
        "hosts": sorted({str(r.get("hostname")) for r in by_rank.values()}),
    }


def judge_ps(results: Sequence[Mapping[str, Any]], expected_tasks: Mapping[str, int]) -> dict[str, Any]:
    """Judge a parameter-server run: every task reported and ended well, the chief's checks passed.

    ``expected_tasks`` is {"chief": 1, "worker": W, "ps": P} (``launch.plan_ps_cluster`` gives it).
    """
    rows = [r for r in results if r.get("workload") in (None, "smoke_tf_ps")]
    reasons: list[str] = []
    seen: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in rows:
        key = (str(r.get("role")), r.get("task_index"))
        if key in seen:
            reasons.append(f"{key[0]} {key[1]} reported twice")
        seen[key] = r
    for role, count in expected_tasks.items():
        gone = [i for i in range(count) if (role, i) not in seen]
        if gone:
            reasons.append(f"{role} task(s) {_ranks(gone)} reported nothing (crashed or hung)")
    for (role, index), r in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if not r.get("ok"):
            reasons.append(f"{role} {index} on {r.get('hostname', '?')} failed: {r.get('error') or 'no error given'}")
    chief = seen.get(("chief", 0))
    disagree = []
    if chief is not None:
        if chief.get("loss_fell") is not True:
            reasons.append(f"loss did not fall: {chief.get('loss_first')} -> {chief.get('loss_last')}")
        disagree = [w for w in chief.get("workers", []) if not w.get("match")]
        for w in disagree:
            reasons.append(f"worker {w.get('index')} read back different variables or loss: "
                           f"{str(w.get('weights_sha256'))[:12]} vs {str(chief.get('weights_sha256'))[:12]}"
                           + (f" ({w['error']})" if w.get("error") else ""))
        if len(chief.get("workers", [])) != expected_tasks.get("worker", 0):
            reasons.append(f"the chief checked {len(chief.get('workers', []))} worker(s), "
                           f"expected {expected_tasks.get('worker', 0)}")
    return {
        "passed": not reasons,
        "reasons": reasons,
        "reported_tasks": len(seen),
        "expected_tasks": dict(expected_tasks),
        "workers_disagree": [w.get("index") for w in disagree],
        "steps_per_s": chief.get("steps_per_s") if chief else None,
        "samples_per_s_total": chief.get("samples_per_s") if chief else None,
    }


def judge_allreduce(results: Sequence[Mapping[str, Any]], expected_ranks: int,
                    busbw_min_GBps: float | None = None) -> dict[str, Any]:
    """Judge the built-in all-reduce benchmark: all ranks, no wrong element, bus bandwidth vs a minimum."""
    rows = [r for r in results if r.get("workload") in (None, "allreduce_bench")]
    reasons: list[str] = []
    ranks = {r.get("rank"): r for r in rows if isinstance(r.get("rank"), int)}
    missing = [i for i in range(expected_ranks) if i not in ranks]
    if missing:
        reasons.append(f"rank(s) {_ranks(missing)} reported nothing (crashed or hung)")
    for _, r in sorted(ranks.items()):
        if r.get("wrong"):
            reasons.append(f"{_where(r)}: {r['wrong']} wrong element(s) after all-reduce "
                           f"(max error {r.get('max_abs_err')})")
        elif not r.get("ok"):
            reasons.append(f"{_where(r)} failed: {r.get('error') or 'no error given'}")
    busbw = [float(r["busbw_GBps"]) for r in ranks.values() if isinstance(r.get("busbw_GBps"), (int, float))]
    value = round(median(busbw), 6) if busbw else None
    if busbw_min_GBps is not None and value is not None and value < busbw_min_GBps:
        reasons.append(f"bus bandwidth {value:.3f} GB/s below the minimum {busbw_min_GBps:g} GB/s")
    return {"passed": not reasons, "reasons": reasons, "busbw_GBps": value,
            "algbw_GBps": next((r.get("algbw_GBps") for r in ranks.values()), None),
            "bytes": next((r.get("bytes") for r in ranks.values()), None), "missing_ranks": missing}


def _throughput(value: float | Iterable[Mapping[str, Any]] | Mapping[str, Any] | None) -> tuple[float, int]:
    """(total samples/s, ranks) of a number, a judge_smoke verdict or a list of results (None: nothing)."""
    if value is None:
        return 0.0, 0
    if isinstance(value, (int, float)):
        return float(value), 1
    if isinstance(value, Mapping):
        if "samples_per_s_total" in value:
            return float(value["samples_per_s_total"] or 0.0), int(value.get("reported_ranks") or 1)
        return float(value.get("samples_per_s") or 0.0), 1
    rows = [r for r in value if isinstance(r.get("samples_per_s"), (int, float))]
    return float(sum(r["samples_per_s"] for r in rows)), len(rows)


def scaling(single: float | Iterable[Mapping[str, Any]] | Mapping[str, Any] | None,
            multi: Iterable[Mapping[str, Any]] | Mapping[str, Any] | float | None,
            ranks: int | None = None) -> dict[str, Any]:
    """Scaling from 1 rank to N: speed-up = multi / single, efficiency = multi / (N x single).

    ``single`` and ``multi`` are the results of the two runs (lists of rank results, judge_smoke
    verdicts, or throughputs in samples/s; None when a run measured nothing); N is the number of ranks
    that reported in ``multi`` (or ``ranks``). The published reference points come along for the report.
    """
    one, _ = _throughput(single)
    total, n = _throughput(multi)
    n = ranks or n
    if one <= 0 or n <= 0:
        return {"single_samples_per_s": one, "multi_samples_per_s": total, "ranks": n, "speedup": None,
                "efficiency": None, "references": REFERENCES,
                "reason": "no throughput measured at 1 rank" if one <= 0 else "no rank reported"}
    return {
        "single_samples_per_s": round(one, 3),
        "multi_samples_per_s": round(total, 3),
        "ranks": n,
        "speedup": round(total / one, 4),
        "efficiency": round(total / (n * one), 4),
        "references": REFERENCES,
    }


def _ranks(values: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, run = [], []
    for v in sorted(values):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [v]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)
