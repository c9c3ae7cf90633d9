"""Network stage: bandwidth between pairs of nodes, and which node to blame for a slow pair.

Pairs come from the round-robin schedule (schedule.round_robin, or --network-sample K rounds of it);
a round's pairs are disjoint, so they run at once (pair_bandwidth measures them).

A slow pair is below --pair-fraction of the reference figure: the median, over the nodes, of each
node's best pair (a bad node drags down every pair it is in: with 3 nodes and one bad, two pairs of
three are slow and the plain median of the pairs would be the slow figure). Over InfiniBand a pair is
also slow below the thresholds' bandwidth.ib_write_bw_Gbps_min. Slow pairs are re-tested against
known-good partners (schedule.suspects/blame): a node slow with every good partner is the bad one
(fail; drained); a slow pair with neither node to blame is re-measured once, and is a slow path (the
link or switch between them: warn) only if it is slow again. network_verdict turns the findings into
the result, ctx.pairs and ctx.figures."""

from __future__ import annotations

import statistics
import time

from ...model import Result, Status
from ...netbench import DEFAULT_PORT
from ..context import ClusterContext, ClusterResult
from ..nodes import participants, remote_hosts, unknown_thresholds
from ..ssh.client import RemoteHosts
from . import schedule
from .network_verdict import CHECK, Survey, fill_figures, fill_pairs, verdict
from .pair_bandwidth import choose_method, measure_round


def reference(values: dict[schedule.Pair, float]) -> float:
    """The median over nodes of each node's best pair figure."""
    best: dict[str, float] = {}
    for (a, b), value in values.items():
        for node in (a, b):
            best[node] = max(best.get(node, 0.0), value)
    return statistics.median(best.values()) if best else 0.0


def network_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    began = time.monotonic()
    cast = participants(ctx)
    if len(cast.nodes) < 2:
        return [cast.skip(CHECK, f"{len(cast.nodes)} usable node(s): no pair to test")]
    run = run or remote_hosts(ctx)
    seconds = ctx.options.pair_seconds
    survey = Survey(choose_method(ctx, cast.nodes))

    def remeasure(pairs: list[schedule.Pair]) -> dict[schedule.Pair, float]:
        """Re-test pairs (in disjoint rounds); keep every measurement, give the figures."""
        got: dict[schedule.Pair, float] = {}
        for round_pairs in schedule.disjoint_rounds(pairs):
            for m in measure_round(ctx, run, round_pairs, survey.plan, seconds):
                key = schedule.pair(m.a, m.b)
                survey.retest.setdefault(key, []).append(m)
                if m.value is not None:
                    got[key] = m.value
                else:
                    survey.errors.append(m)
        return got

    for pairs in schedule.sample(schedule.round_robin(cast.nodes), ctx.options.network_sample):
        for m in measure_round(ctx, run, pairs, survey.plan, seconds):
            survey.first[schedule.pair(m.a, m.b)] = m
    survey.errors = [m for m in survey.first.values() if m.error]
    first = survey.figures()
    if not first:
        return [nothing_measured(survey, time.monotonic() - began)]
    survey.reference = reference(first)
    survey.threshold = ctx.options.pair_fraction * survey.reference
    if survey.plan.minimum is not None:
        survey.threshold = max(survey.threshold, survey.plan.minimum)

    suspects = schedule.suspects(first, survey.threshold)
    retest = remeasure([p for r in suspects.rounds for p in r]) if suspects.rounds else {}
    survey.blame = schedule.blame(suspects, retest, survey.threshold)
    # A slow pair with neither node to blame: measured once more before it is called a slow path.
    again = remeasure(survey.blame.slow_paths) if survey.blame.slow_paths else {}
    survey.slow_paths = [p for p in survey.blame.slow_paths if again.get(p, 0.0) < survey.threshold]
    survey.transient = [p for p in survey.blame.slow_paths if p not in survey.slow_paths]

    fill_pairs(ctx, survey)
    fill_figures(ctx, survey)
    result = verdict(survey, ctx.options, cast, time.monotonic() - began)
    result.reason += unknown_thresholds(ctx, cast.nodes)  # IB or TCP was chosen without their profile
    return [result]


def nothing_measured(survey: Survey, duration: float) -> ClusterResult:
    """Not one pair gave a figure: the test could not run (never a slow link)."""
    errors = survey.errors
    shown = "; ".join(m.error or "" for m in errors[:4])
    hint = (f"check that the agent runs on the nodes and that nodes reach each other on the test port "
            f"{DEFAULT_PORT}/tcp" if survey.plan.method == "tcp" else
            "check ib_write_bw (perftest) and the HCAs on the nodes")
    return ClusterResult(CHECK, Status.ERROR, {"pairs": len(survey.first), "errors": len(errors)}, None,
                         f"no pair could be measured ({survey.plan.method}): {shown}", hint,
                         evidence="\n\n".join(m.evidence for m in errors[:4]), duration_s=duration)
