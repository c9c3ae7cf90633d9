"""Smoke stage: a small distributed training job on synthetic data, then scaling efficiency.

--framework picks the job (the scripts are agent/gpucheck/workloads/*, copied with rank_io.py to /var/tmp/gpucheck on
every node and run by the stack's python):
- tf-horovod (default): Keras `fit` with hvd.DistributedOptimizer under mpirun from the launcher;
- torch: DDP, one torchrun per node (static rendezvous on the launcher);
- tf-ps: TensorFlow parameter-server training, one process per task (chief, workers, ps), each
  started over SSH with its own TF_CONFIG.

It runs at 1 rank, then 1 node (all its GPUs; skipped when a node runs one rank: CPU nodes), then
every node. A run passes when every rank reported, the loss fell, every rank ends with identical
weights (checksums from every rank) and no rank hung (each rank has a watchdog; the launcher has the
stage timeout). Results: cluster.smoke.<framework> (fail names the node a bad rank ran on) and
cluster.scaling (throughput at 1 rank vs N: speed-up and efficiency, beside published figures);
ctx.scaling gets one point per run."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...model import Result, Status
from ...references import REFERENCES
from ...report.values import figure
from ...workloads import launch
from ...workloads.results import judge_ps, judge_smoke, parse_results, scaling
from .. import jobs, launchers
from ..context import ClusterContext, ClusterResult, Options
from ..frameworks import FRAMEWORKS
from ..layout import Layout
from ..nodes import address, remote_hosts, unknown_thresholds
from ..ssh.client import RemoteHosts
from ..ssh.result import Remote

SCALING = "cluster.scaling"
UNIT = "samples/s"
TORCH_PORT = 29500
PS_PORT = 2222
REMEDIATION = ("re-run the job by hand from the launcher (the command is in the evidence); a rank that hung "
               "or crashed points at its node (cluster.mpi, cluster.network, its framework checks)")


@dataclass
class Run:
    label: str
    ranks: int
    lay: Layout
    done: Remote | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    throughput: float | None = None
    blamed: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.verdict.get("passed")) and self.done is not None and self.done.ok


def smoke_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    began = time.monotonic()
    options = ctx.options
    name = options.framework
    check = f"cluster.smoke.{name}"
    framework = FRAMEWORKS.get(name)
    if framework is None:
        return [ClusterResult(check, Status.ERROR,
                              reason=f"unknown framework {name!r} (one of {', '.join(FRAMEWORKS)})")]
    run = run or remote_hosts(ctx)
    if why := launchers.of(ctx).job_stacks(ctx, run):
        return [ClusterResult(check, Status.ERROR, reason=f"cannot know the job's stack: {why}")]
    cast = jobs.stack_cast(ctx, check, framework, name)
    if isinstance(cast, ClusterResult):
        return [cast]
    nodes, stack = cast.nodes, framework.stack
    python, unusable = jobs.pythons(ctx, nodes, stack)
    if python is None or unusable:
        return [ClusterResult(check, Status.ERROR, reason="cannot find one python for the job: " + "; ".join(
            f"{n}: {w}" for n, w in unusable.items()))]
    path, failed = launchers.of(ctx).distribute(ctx, run, nodes, launch.script_path(framework.workload))
    if failed:
        return [ClusterResult(check, Status.ERROR, reason="cannot copy the job to the nodes: " + "; ".join(
            r.describe() for r in failed.values()))]
    gpus = jobs.on_gpus(ctx, nodes)
    runs = plan_runs(ctx, nodes, gpus)
    job = {"mpirun": _horovod, "torchrun": _torch, "tasks": _ps}[framework.start]
    for r in runs:
        job(ctx, run, options, python, path, gpus, r)
        if not r.passed:
            break  # a bigger run cannot pass where a smaller one failed
    # GPU or CPU ranks were chosen from the thresholds: say whose were unknown
    tail = cast.note() + unknown_thresholds(ctx, nodes)
    results = [_smoke_result(check, name, runs, gpus, tail, time.monotonic() - began)]
    results.append(_scaling(ctx, name, runs, gpus, options))
    return results


def plan_runs(ctx: ClusterContext, nodes: list[str], gpus: bool) -> list[Run]:
    launcher = nodes[0]
    runs = [Run("1 rank", 1, Layout([(launcher, 1)]))]
    per_node = jobs.ranks_per_node(ctx, launcher, gpus)
    if per_node > 1:
        runs.append(Run("1 node", per_node, Layout([(launcher, per_node)])))
    everything = jobs.layout(ctx, nodes, gpus)
    if everything.ranks > runs[-1].ranks:
        runs.append(Run(f"{len(nodes)} nodes", everything.ranks, everything))
    return runs


def _training_args(options: Options) -> list[str]:
    """What the Horovod and DDP jobs are told: 2 epochs of --smoke-steps steps, and their watchdog."""
    watchdog = jobs.rank_watchdog_s(options.stage_timeout)
    return ["--epochs", "2", "--steps", str(options.smoke_steps), "--timeout-s", f"{watchdog:g}"]


def _horovod(ctx: ClusterContext, run: RemoteHosts, options: Options, python: str, path: str, gpus: bool,
             r: Run) -> None:
    program = [python, path, *_training_args(options)]
    r.done = launchers.of(ctx).mpi_job(ctx, run, r.lay, program, jobs.rank_env(gpus), options.stage_timeout)
    _judge(r, parse_results(r.done.stdout), "smoke_horovod_keras")


def _judge(r: Run, rows: list[dict[str, Any]], workload: str) -> None:
    r.verdict = judge_smoke(rows, r.ranks, workload)
    r.throughput = r.verdict.get("samples_per_s_total")
    if not r.passed:
        r.blamed = jobs.blame_ranks(r.verdict, r.lay, bool(r.done and r.done.timed_out))


def _torch(ctx: ClusterContext, run: RemoteHosts, options: Options, python: str, path: str, gpus: bool, r: Run) -> None:
    r.done = launchers.of(ctx).torch_job(ctx, run, r.lay, python, path, _training_args(options), gpus, TORCH_PORT,
                                         options.stage_timeout)
    _judge(r, parse_results(r.done.stdout), "smoke_torch_ddp")


def _ps(ctx: ClusterContext, run: RemoteHosts, options: Options, python: str, path: str, gpus: bool, r: Run) -> None:
    by_address = {address(ctx, n, data=False): n for n, _ in r.lay.slots}
    hosts = list(by_address)
    workers = r.lay.slots[0][1]  # workers per host: one per GPU (one on CPU nodes); the 1-rank run: 1
    tasks = launch.plan_ps_cluster(hosts, PS_PORT, num_ps=1, workers_per_host=workers)
    steps = max(20, 3 * options.smoke_steps)
    watchdog = f"{jobs.rank_watchdog_s(options.stage_timeout):g}"
    args = ["--steps", str(steps), "--timeout-s", watchdog, "--chief-wait-s", watchdog]
    # each task its own TF_CONFIG
    r.done = launchers.of(ctx).task_job(ctx, run, Layout([(by_address[t.host], 1) for t in tasks]),
                                        [python, path, *args], [t.env(jobs.rank_env(gpus)) for t in tasks],
                                        options.stage_timeout)
    expected = {"chief": 1, "worker": sum(1 for t in tasks if t.role == "worker"),
                "ps": sum(1 for t in tasks if t.role == "ps")}
    rows = parse_results(r.done.stdout)
    verdict = judge_ps(rows, expected)
    chief = next((row for row in rows if row.get("role") == "chief"), {})
    verdict.update(hosts=sorted({str(row.get("hostname")) for row in rows if row.get("hostname")}),
                   weights_majority=chief.get("weights_sha256"), loss_first=chief.get("loss_first"),
                   loss_last=chief.get("loss_last"), ps=True)
    r.verdict = verdict
    r.throughput = verdict.get("samples_per_s_total")
    r.ranks = expected["worker"]
    if not r.passed:
        bad = {by_address.get(t.host, t.host) for t in tasks for row in rows
               if row.get("role") == t.role and row.get("task_index") == t.index and not row.get("ok")}
        if len(bad) < len(r.lay.slots):
            r.blamed = {n: "a parameter-server task there failed" for n in bad}


def _smoke_result(check: str, framework: str, runs: list[Run], gpus: bool, tail: str,
                  duration: float) -> ClusterResult:
    measured = {r.label: {"ranks": r.ranks, "passed": r.passed, "samples_per_s": r.throughput,
                          "wall_s": round(r.done.wall_s, 1) if r.done else None,
                          "hosts": r.verdict.get("hosts"), "weights": r.verdict.get("weights_majority")}
                for r in runs}
    device = "GPU" if gpus else "CPU"
    expected = "the loss falls, every rank ends with identical weights, no rank hangs"
    evidence = "\n\n".join(f"--- {r.label}\n{r.done.evidence()}" for r in runs if r.done)
    bad = next((r for r in runs if not r.passed), None)
    if bad is None:
        last = runs[-1]
        losses = _loss_text(last.verdict, last)
        who = "worker(s)" if last.verdict.get("ps") else "rank(s)"
        return ClusterResult(check, Status.PASS, measured, expected,
                             f"{framework} on {last.ranks} {device} {who} over {len(last.lay.slots)} node(s): "
                             f"{losses}; " + ", ".join(f"{r.label} {_tp(r.throughput)}" for r in runs)
                             + tail, evidence=evidence, duration_s=duration)
    reasons = list(bad.verdict.get("reasons") or [])
    if bad.done is not None and not bad.done.ok:
        reasons.append(f"launcher: {bad.done.describe()}")
    skipped = [r.label for r in runs[runs.index(bad) + 1:]]
    status = Status.FAIL if bad.verdict.get("reasons") else Status.ERROR
    text = f"{framework} at {bad.label} ({bad.ranks} rank(s)): " + "; ".join(reasons[:6])
    if skipped:
        text += f"; not run: {', '.join(skipped)}"
    return ClusterResult(check, status, measured, expected, text + tail, REMEDIATION, evidence,
                         duration, nodes=bad.blamed if status == Status.FAIL else {})


def _loss_text(verdict: Mapping[str, Any], r: Run) -> str:
    """What the run proved, for a person; the weights' digest stays in `measured` (report.json), no text."""
    if verdict.get("ps"):
        tasks = verdict.get("expected_tasks") or {}
        return (f"loss fell {_num(verdict.get('loss_first'))} -> {_num(verdict.get('loss_last'))} on the chief, every "
                f"one of {tasks.get('worker')} worker(s) read back the variables of {tasks.get('ps')} ps task(s) "
                f"identically")
    return f"loss fell on every rank, identical weights on all {verdict.get('reported_ranks', r.ranks)} ranks"


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "?"


def _tp(value: float | None) -> str:
    return figure(value, UNIT) if value is not None else "no throughput"


def _reference_text() -> str:
    return "; ".join(f"{ref['name'].split(',')[0]}: {ref['efficiency']:.0%} at {ref['gpus']} GPUs"
                     for ref in REFERENCES)


def _scaling(ctx: ClusterContext, framework: str, runs: list[Run], gpus: bool, options: Options) -> ClusterResult:
    single = runs[0]
    label = framework + ("" if gpus else " (CPU ranks)")
    device = "GPU" if gpus else "CPU"
    # the published figures are GPU training: CPU ranks are never set beside them
    refs = [{k: ref[k] for k in ("name", "gpus", "speedup", "efficiency", "source")}
            for ref in (REFERENCES if gpus else [])]
    if not single.passed or not single.throughput:
        return ClusterResult(SCALING, Status.ERROR, {"references": refs}, None,
                             f"no scaling figure: the 1-rank {framework} run "
                             f"{'measured no throughput' if single.passed else 'failed'}")
    if len(runs) == 1:
        return ClusterResult(SCALING, Status.SKIP, {"references": refs}, None,
                             f"one rank is all there is: nothing to scale to ({_tp(single.throughput)})")
    ctx.scaling.append({"label": label, "gpus": single.ranks, "throughput": round(single.throughput, 3),
                        "efficiency": 1.0, "unit": UNIT, "run": single.label, "device": device})
    points = []
    for r in runs[1:]:
        if not r.passed or not r.throughput:
            continue
        sc = scaling(single.throughput, r.throughput, r.ranks)
        point = {"label": label, "gpus": r.ranks, "throughput": round(r.throughput, 3),
                 "efficiency": sc["efficiency"], "speedup": sc["speedup"], "unit": UNIT, "run": r.label,
                 "device": device}
        ctx.scaling.append(point)
        points.append(point)
    measured = {"points": [{"run": single.label, "ranks": single.ranks, "throughput": single.throughput}]
                + [{"run": p["run"], "ranks": p["gpus"], "throughput": p["throughput"], "speedup": p["speedup"],
                    "efficiency": p["efficiency"]} for p in points], "unit": UNIT, "device": device,
                "references": refs}
    if not points:
        return ClusterResult(SCALING, Status.ERROR, measured, None,
                             "no scaling figure: the multi-rank run failed (see cluster.smoke." + framework + ")")
    top = points[-1]
    text = (f"{label}: {_tp(single.throughput)} at 1 rank, {_tp(top['throughput'])} at {top['gpus']} ranks: "
            f"speed-up {top['speedup']:.2f}x, efficiency {top['efficiency']:.0%}")
    if gpus:
        text += f"; published: {_reference_text()}"
    else:
        text += ("; not a GPU scaling measurement: CPU ranks sharing CPU nodes measure the plumbing (launcher, "
                 "collectives, network) of a small model, so no published GPU figure is set beside it")
    minimum = options.scaling_efficiency_min
    expected = f">= {minimum:.0%}" if minimum else None
    if minimum and top["efficiency"] is not None and top["efficiency"] < minimum:
        return ClusterResult(SCALING, Status.WARN, measured, expected, f"efficiency below {minimum:.0%}: " + text,
                             "compare with cluster.network and cluster.allreduce; check the GPU-NIC affinity "
                             "and NCCL transports (NCCL_DEBUG=INFO)")
    return ClusterResult(SCALING, Status.PASS, measured, expected, text)
