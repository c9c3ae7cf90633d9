"""The figures of one training-benchmark run from its ranks' result lines (gpucheck side; standard library only).

Every rank of resnet_horovod_keras.py / resnet_torch_ddp.py reports ``iteration_images_per_s`` (one figure per
timed iteration) and ``images_per_s`` (their median); each rank drives one GPU (one CPU rank on a CPU node).
A run's throughput is the sum over its ranks, per GPU the mean; the spread is over the iterations of the
whole run (the ranks' i-th iterations summed), which is what a job's speed did from one iteration to the next.
docs/training.md says how the cluster stage judges them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any


def _figure(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value <= 0:
        return None
    return float(value)


def run_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{"images_per_s": the run's total, "images_per_s_per_gpu": its mean per rank, "ranks": ranks with a
    figure, "iteration_images_per_s": the totals per iteration, "min"/"max": their spread} from the ok ranks'
    result lines; the figures are None where no rank measured any."""
    measured = [r for r in rows if r.get("ok") and _figure(r.get("images_per_s")) is not None]
    total = sum(float(r["images_per_s"]) for r in measured)
    series = [[_figure(v) for v in r.get("iteration_images_per_s") or []] for r in measured]
    count = min((len(s) for s in series), default=0)
    totals = [round(sum(s[i] or 0.0 for s in series), 3) for i in range(count)]
    return {
        "images_per_s": round(total, 3) if measured else None,
        "images_per_s_per_gpu": round(total / len(measured), 3) if measured else None,
        "ranks": len(measured),
        "iteration_images_per_s": totals,
        "min": min(totals) if totals else None,
        "max": max(totals) if totals else None,
    }


def per_gpu_by_rank(rows: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """rank -> its images/s (its one GPU's), for the ok ranks that measured one."""
    return {int(r["rank"]): float(r["images_per_s"]) for r in rows
            if r.get("ok") and isinstance(r.get("rank"), int) and _figure(r.get("images_per_s")) is not None}


def efficiency(images_per_s: float | None, gpus: int, single_gpu: float | None) -> float | None:
    """images/s of a run / (its GPUs x the 1-GPU images/s): 1.0 is perfect scaling; None without figures."""
    if not images_per_s or not single_gpu or gpus < 1:
        return None
    return round(images_per_s / (gpus * single_gpu), 4)


def fleet_median(values: Mapping[str, float]) -> float | None:
    figures = [v for v in values.values() if _figure(v) is not None]
    return round(median(figures), 3) if figures else None
