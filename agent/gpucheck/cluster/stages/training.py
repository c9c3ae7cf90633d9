"""Training stage: synthetic-data ResNet-50 training, images/s per GPU (docs/training.md is the contract).

Three runs, one after the other, of the benchmark the --framework picks (Framework.benchmark_workload: Horovod +
Keras under mpirun, or PyTorch DDP under torchrun): 1 GPU on the first node (the baseline), every node its own
one-node job at the same time (so a slow node shows: a synchronous job across nodes runs at its slowest rank's
pace), then one job across every node. A run that fails stops the bigger ones. training_verdict judges the
figures (fleet median, the SKU's published figure, scaling minimums) and fills the report's training section.

On CPU ranks (the lab) the stage is opt-in: it runs only when `training` is named in --stages, with a small
model (width 8, 32 px) by default."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...model import Result, Status
from ...workloads import launch
from ...workloads.results import judge_smoke, parse_results
from ...workloads.training_results import run_figures
from .. import jobs, launchers
from ..context import ClusterContext, ClusterResult
from ..frameworks import FRAMEWORKS
from ..layout import Layout
from ..nodes import remote_hosts
from ..ssh.client import RemoteHosts
from . import training_verdict
from .training_runs import Model, Run, model_for

STAGE = "training"
TORCH_PORT = 29510  # not the smoke job's: a port in TIME_WAIT from it must not stop this rendezvous


def training_stage(ctx: ClusterContext, run: RemoteHosts | None = None) -> list[Result]:
    began = time.monotonic()
    options = ctx.options
    chosen = FRAMEWORKS.get(options.framework)
    name = chosen.benchmark if chosen else options.framework
    check = f"cluster.training.{name}"
    framework = FRAMEWORKS.get(name)
    if framework is None or not framework.benchmark_workload:
        return [ClusterResult(check, Status.ERROR, reason=f"no training benchmark for --framework {name!r}")]
    run = run or remote_hosts(ctx)
    if why := launchers.of(ctx).job_stacks(ctx, run):
        return [ClusterResult(check, Status.ERROR, reason=f"cannot know the job's stack: {why}")]
    cast = jobs.stack_cast(ctx, check, framework, f"{name} ResNet-50")
    if isinstance(cast, ClusterResult):
        return [cast]
    nodes = cast.nodes
    gpus = jobs.on_gpus(ctx, nodes)
    if not gpus and STAGE not in options.stages_asked:
        return [ClusterResult(check, Status.SKIP, reason="the nodes train on CPU ranks (their profile: frameworks."
                              "gpu_required false): the ResNet-50 benchmark measures GPUs, so on CPU ranks it runs "
                              "only when asked for (--stages ...,training; a small model by default)")]
    python, unusable = jobs.pythons(ctx, nodes, framework.stack)
    if python is None or unusable:
        return [ClusterResult(check, Status.ERROR, reason="cannot find one python for the job: " + "; ".join(
            f"{n}: {w}" for n, w in unusable.items()))]
    script = launch.script_path(framework.benchmark_workload)
    path, failed = launchers.of(ctx).distribute(ctx, run, nodes, script)
    if failed:
        return [ClusterResult(check, Status.ERROR, reason="cannot copy the benchmark to the nodes: " + "; ".join(
            r.describe() for r in failed.values()))]
    model = model_for(options, gpus)
    job = Job(ctx, run, name, python, path, script.stem, gpus, model)
    per_node = jobs.ranks_per_node(ctx, nodes[0], gpus)
    single = Run("1 GPU" if gpus else "1 rank", Layout([(nodes[0], 1)]))
    each = [Run(node, Layout([(node, jobs.ranks_per_node(ctx, node, gpus))])) for node in nodes]
    if len(nodes) == 1 and per_node == 1:
        each = []  # the 1-GPU run is that node's figure
    everything = Run(f"{len(nodes)} nodes", jobs.layout(ctx, nodes, gpus)) if len(nodes) > 1 else None
    job.execute(single)
    if single.passed and each:
        with ThreadPoolExecutor(max_workers=min(len(each), max(1, options.forks)),
                                thread_name_prefix="gpucheck-train") as pool:
            list(pool.map(job.execute, each))
    if everything is not None and single.passed and all(r.passed for r in each):
        job.execute(everything)
    return training_verdict.judge(ctx, check, name, model, gpus, training_verdict.Runs(single, each, everything),
                                  cast.note(), time.monotonic() - began)


@dataclass
class Job:
    """How one run of the benchmark is started and read, the same for every run of the stage."""

    ctx: ClusterContext
    remote: RemoteHosts
    framework: str
    python: str
    path: str
    workload: str
    gpus: bool
    model: Model

    def args(self) -> list[str]:
        watchdog = jobs.rank_watchdog_s(self.ctx.options.stage_timeout)
        return ["--width", str(self.model.width), "--image-size", str(self.model.image_size),
                "--batch-size", str(self.model.batch_size), "--iterations", str(self.ctx.options.train_iterations),
                "--timeout-s", f"{watchdog:g}"]

    def execute(self, r: Run) -> None:
        timeout = self.ctx.options.stage_timeout
        if self.framework == "torch":
            r.done = launchers.of(self.ctx).torch_job(self.ctx, self.remote, r.lay, self.python, self.path,
                                                      self.args(), self.gpus, TORCH_PORT, timeout)
        else:
            r.done = launchers.of(self.ctx).mpi_job(self.ctx, self.remote, r.lay,
                                                    [self.python, self.path, *self.args()], jobs.rank_env(self.gpus),
                                                    timeout)
        rows = [row for row in parse_results(r.done.stdout) if row.get("workload") == self.workload]
        r.verdict = judge_smoke(rows, r.lay.ranks, self.workload, loss_rule="loss_finite")
        r.figures = run_figures(rows)
        r.figures["precision"] = next((row.get("precision") for row in rows if row.get("precision")), None)
        if not r.passed:
            r.blamed = jobs.blame_ranks(r.verdict, r.lay, r.done.timed_out)
