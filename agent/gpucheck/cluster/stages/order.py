"""The cluster stages, in the order they run: the one list of them (the command line's --stages names
come from it). A stage is a function (ClusterContext) -> list[Result] run after the fan-out; the
report is rewritten after each one, so a later stage that hangs or crashes loses nothing before it.

The network, mpi, allreduce, smoke, training and burn stages sit between consistency and stragglers so the figures
they add to ctx.figures are compared too. Each stage's module is imported when the stage runs:
`gpucheck --help` reads the names only."""

from __future__ import annotations

import time
from collections.abc import Callable

from ...model import Result, Status
from ..context import ClusterContext, ClusterResult

Stage = Callable[[ClusterContext], list[Result]]


def across_nodes(stage: Stage) -> Stage:
    """Marks a stage that starts work on the nodes through the launcher (jobs, copies, burns), beyond reading
    their reports: a launcher that cannot start such work leaves it out (launchers/base.py)."""
    stage.across_nodes = True  # type: ignore[attr-defined]
    return stage


def consistency(ctx: ClusterContext) -> list[Result]:
    """Do the nodes agree (versions, GPU models, the profile they chose), and have they the libraries their
    profiles require?"""
    from .consistency import consistency_stage

    return list(consistency_stage(ctx))


@across_nodes
def network(ctx: ClusterContext) -> list[Result]:
    from .network import network_stage

    return network_stage(ctx)


@across_nodes
def mpi(ctx: ClusterContext) -> list[Result]:
    from .mpi import mpi_stage

    return mpi_stage(ctx)


@across_nodes
def allreduce(ctx: ClusterContext) -> list[Result]:
    from .allreduce import allreduce_stage

    return allreduce_stage(ctx)


@across_nodes
def smoke(ctx: ClusterContext) -> list[Result]:
    from .smoke import smoke_stage

    return smoke_stage(ctx)


@across_nodes
def training(ctx: ClusterContext) -> list[Result]:
    """ResNet-50 images/s per GPU at 1 GPU, on every node and across all (docs/training.md); opt-in on CPU ranks."""
    from .training import training_stage

    return training_stage(ctx)


@across_nodes
def burn(ctx: ClusterContext) -> list[Result]:
    """Opt-in: every GPU under the sustained GEMM at once while an all-reduce loads the fabric (docs/burn.md)."""
    from .burn import burn_stage

    return burn_stage(ctx)


def stragglers(ctx: ClusterContext) -> list[Result]:
    """Nodes below the fleet median of a figure: their own benchmarks and what the stages measured."""
    from .stragglers import find, node_figures

    figures = node_figures({n: ctx.nodes[n].report or {} for n in ctx.checked()})
    for metric, values in ctx.figures.items():
        figures.setdefault(metric, {}).update(values)
    return list(find(figures, ctx.options.straggler_fraction))


def shape(ctx: ClusterContext) -> list[Result]:
    """Failures that gather behind one rack, leaf switch or PDU (the inventory's rack, leaf_switch, pdu)."""
    from .shape import shape_stage

    return shape_stage(ctx)


def history(ctx: ClusterContext) -> list[Result]:
    """Each node against its own past in the history store: a GPU slower than its baseline, counters rising."""
    from .history import history_stage

    return history_stage(ctx)


STAGES: list[tuple[str, Stage]] = [
    ("consistency", consistency),
    ("network", network),
    ("mpi", mpi),
    ("allreduce", allreduce),
    ("smoke", smoke),
    ("training", training),
    ("burn", burn),
    ("stragglers", stragglers),
    ("shape", shape),
    ("history", history),
]
STAGE_NAMES = tuple(name for name, _ in STAGES)
ACROSS_NODES = frozenset(name for name, stage in STAGES if getattr(stage, "across_nodes", False))


def run_stage(name: str, stage: Stage, ctx: ClusterContext) -> list[Result]:
    """Run one stage; a crash in it is an error result of that stage, never the end of the run."""
    began = time.monotonic()
    try:
        results = stage(ctx)
    except Exception as exc:
        import traceback  # only for a crash: `gpucheck --help` loads this module too

        results = [ClusterResult(f"cluster.{name}", Status.ERROR,
                                 reason=f"stage crashed: {type(exc).__name__}: {exc}", evidence=traceback.format_exc())]
    ctx.timings[name] = round(time.monotonic() - began, 3)
    ctx.results.extend(results)
    return results
