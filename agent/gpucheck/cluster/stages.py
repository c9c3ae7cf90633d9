"""The cluster stages, in the order they run. A stage is a function (ClusterContext) -> list[Result]
run after the fan-out; the report is rewritten after each one, so a later stage that hangs or
crashes loses nothing that came before it.

Extension points for the lab stages (issue 5, second half), inserted between consistency and
stragglers so their figures are compared too:
  ("network", ...)  pairs from schedule.round_robin/sample over ctx.usable(), each round in parallel;
                    slow pairs re-tested with schedule.suspects/blame; appends ctx.pairs
                    ({"a", "b", "value", "unit", "status"}) and per-node figures to ctx.figures
  ("mpi", ...)      MPI hello across ctx.usable(): every rank reports its host
  ("nccl", ...)     multi-node all-reduce bus bandwidth against the profile
  ("smoke", ...)    distributed training; appends ctx.scaling ({"label", "gpus", "throughput", "efficiency"})
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from ..model import Result, Status
from . import consistency, stragglers
from .allreduce import allreduce_stage
from .context import ClusterContext, ClusterResult
from .mpi import mpi_stage
from .network import network_stage
from .smoke import smoke_stage

Stage = Callable[[ClusterContext], list[Result]]


def consistency_stage(ctx: ClusterContext) -> list[Result]:
    return list(consistency.compare({n: ctx.nodes[n].facts or {} for n in ctx.checked()}))


def straggler_stage(ctx: ClusterContext) -> list[Result]:
    figures = stragglers.node_figures({n: ctx.nodes[n].report or {} for n in ctx.checked()})
    for metric, values in ctx.figures.items():
        figures.setdefault(metric, {}).update(values)
    return list(stragglers.find(figures, ctx.options.straggler_fraction))


STAGES: list[tuple[str, Stage]] = [
    ("consistency", consistency_stage),
    ("network", network_stage),
    ("mpi", mpi_stage),
    ("allreduce", allreduce_stage),
    ("smoke", smoke_stage),
    ("stragglers", straggler_stage),
]


def run_stage(name: str, stage: Stage, ctx: ClusterContext) -> list[Result]:
    """Run one stage; a crash in it is an error result of that stage, never the end of the run."""
    began = time.monotonic()
    try:
        results = stage(ctx)
    except Exception as exc:
        results = [ClusterResult(f"cluster.{name}", Status.ERROR,
                                 reason=f"stage crashed: {type(exc).__name__}: {exc}", evidence=traceback.format_exc())]
    ctx.timings[name] = round(time.monotonic() - began, 3)
    ctx.results.extend(results)
    return results
