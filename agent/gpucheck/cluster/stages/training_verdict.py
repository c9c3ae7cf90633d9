"""Judging the training stage's runs (docs/training.md): every rank well, then each node's images/s per GPU
against the fleet median of its SKU (warn below --straggler-fraction of it) and against the SKU's published
figure (checks/gpus.yaml resnet50_train_img_s x the profile's training.reference_fraction_min: fail, the node
blamed), and the scaling from 1 GPU within a node and across nodes against the profile's minimums (warn).
CPU ranks are measured and reported, never set beside a published figure or a GPU scaling minimum.
Fills ctx.training (the report's training section) and ctx.scaling (the scaling chart)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import skus
from ...model import Result, Status
from ...report.values import figure
from ...workloads.training_results import efficiency, fleet_median
from ..context import ClusterContext, ClusterResult
from ..nodes import threshold
from .training_runs import Model, Run

SCALING = "cluster.training.scaling"
UNIT = "images/s"
# docs/training.md's defaults, for a profile without the key (checks/generic.yaml states the same)
DEFAULTS = {"reference_fraction_min": 0.5, "scaling_efficiency_node_min": 0.75, "scaling_efficiency_cluster_min": 0.7}
CPU_NOTE = ("CPU ranks, not a GPU measurement: a small model on CPU cores (shared between lab hosts) measures the "
            "plumbing, so no published GPU figure or GPU scaling minimum is set beside it")
REMEDIATION = ("re-run the benchmark by hand from the node (the command is in the evidence); a slow node: compare its "
               "gpu.* burn-in figures (gpucheck node --full), clocks and PCIe link; a rank that failed or hung points "
               "at its node")


@dataclass
class Runs:
    single: Run
    each: list[Run]
    everything: Run | None

    def all(self) -> list[Run]:
        return [self.single, *self.each, *([self.everything] if self.everything else [])]


def setting(ctx: ClusterContext, nodes: list[str], key: str) -> float:
    value = threshold(ctx, nodes, "training", key)
    return float(value) if isinstance(value, int | float) else DEFAULTS[key]


def judge(ctx: ClusterContext, check: str, name: str, model: Model, gpus: bool, runs: Runs, tail: str,
          duration: float) -> list[Result]:
    ran = [r for r in runs.all() if r.done is not None]
    evidence = "\n\n".join(f"--- {r.label}\n{r.done.evidence()}" for r in ran if r.done)
    device = "GPU" if gpus else "CPU"
    precision = runs.single.figures.get("precision") or "?"
    what = f"{model.to_dict()['name']} ({name}, {precision}, batch {model.batch_size} per {device})"
    bad = [r for r in ran if not r.passed]
    if bad:
        return [failure(check, what, runs, bad, tail, evidence, duration)]
    nodes = [r.label for r in runs.each] or [runs.single.lay.slots[0][0]]
    per_gpu = ({r.label: r.figures["images_per_s_per_gpu"] for r in runs.each} if runs.each
               else {nodes[0]: runs.single.figures["images_per_s_per_gpu"]})
    rows = node_rows(ctx, name, model, gpus, per_gpu, precision)
    table = run_table(runs)
    ctx.training = {"check": check, "framework": name, "device": device, "model": model.to_dict(),
                    "precision": precision, "runs": table, "nodes": rows, "unit": UNIT,
                    "note": "" if gpus else CPU_NOTE}
    failed = {r["node"]: r["why"] for r in rows if r["status"] == "fail"}
    if len(failed) == len(rows) > 1:
        failed = {}  # every node alike: the stack or its settings, not a node to drain
        text_every = "every node trains below the published figure: the stack or its settings, not one node; "
    else:
        text_every = ""
    slow = [r for r in rows if r["status"] == "warn"]
    status = Status.FAIL if failed or text_every else Status.WARN if slow else Status.PASS
    text = f"{what}: " + "; ".join(f"{t['run']} {figure(t['images_per_s'])} {UNIT}" for t in table
                                   if t["images_per_s"] is not None)
    medians = sorted({(r["sku"], r["fleet_median"]) for r in rows if r["fleet_median"]})
    if medians and len(rows) > 1:
        text += "; fleet median per GPU " + ", ".join(f"{figure(m)} ({sku})" for sku, m in medians)
    problems = [r["why"] for r in rows if r["status"] in ("fail", "warn")]
    if problems:
        text = text_every + "; ".join(problems[:8]) + " — " + text
    text += "" if gpus else f"; {CPU_NOTE}"
    expected = None
    if gpus:
        expected = (f"every node >= {ctx.options.straggler_fraction:g} x the fleet median per GPU of its SKU, and >= "
                    f"{setting(ctx, nodes, 'reference_fraction_min'):g} x the SKU's published ResNet-50 figure")
    result = ClusterResult(check, status, {"runs": table, "nodes": rows, "model": model.to_dict(), "device": device},
                           expected, text + tail, REMEDIATION if status != Status.PASS else "", evidence, duration,
                           nodes=failed)
    return [result, scaling(ctx, name, gpus, runs, nodes)]


def failure(check: str, what: str, runs: Runs, bad: list[Run], tail: str, evidence: str,
            duration: float) -> ClusterResult:
    reasons: list[str] = []
    blamed: dict[str, str] = {}
    for r in bad:
        why = list(r.verdict.get("reasons") or [])
        if r.done is not None and not r.done.ok:
            why.append(f"launcher: {r.done.describe()}")
        reasons.append(f"{r.label} ({r.gpus} rank(s)): " + "; ".join(why[:4]))
        blamed.update(r.blamed)
    status = Status.FAIL if any(r.verdict.get("reasons") for r in bad) else Status.ERROR
    skipped = [r.label for r in runs.all() if r.done is None]
    text = f"{what}: " + " | ".join(reasons[:4]) + (f"; not run: {', '.join(skipped)}" if skipped else "")
    measured = {"runs": run_table(runs)}
    return ClusterResult(check, status, measured, "every rank reports images/s with a finite loss and the same "
                         "weights", text + tail, REMEDIATION, evidence, duration,
                         nodes=blamed if status == Status.FAIL else {})


def run_table(runs: Runs) -> list[dict[str, Any]]:
    """One row per run that ran: its GPUs, images/s (total and per GPU) and the spread over its iterations."""
    single = runs.single.figures.get("images_per_s")
    out = []
    for r in runs.all():
        if r.done is None:
            continue
        f = r.figures
        out.append({"run": r.label, "gpus": r.gpus, "images_per_s": f.get("images_per_s"),
                    "images_per_s_per_gpu": f.get("images_per_s_per_gpu"), "iteration_min": f.get("min"),
                    "iteration_max": f.get("max"), "efficiency": efficiency(f.get("images_per_s"), r.gpus, single)})
    return out


def sku_of(ctx: ClusterContext, node: str, table: skus.SkuTable | None) -> skus.Sku | None:
    models = (ctx.nodes[node].facts or {}).get("gpu_models") or []
    return table.match(str(models[0])) if table is not None and models else None


def node_rows(ctx: ClusterContext, name: str, model: Model, gpus: bool, per_gpu: dict[str, float | None],
              precision: str) -> list[dict[str, Any]]:
    """Per node: its images/s per GPU, its SKU's fleet median and published figure, and the verdict."""
    try:
        table: skus.SkuTable | None = skus.load()
    except skus.SkuError:
        table = None  # judged against the fleet median only; the rows say there is no published figure
    fraction = ctx.options.straggler_fraction
    floor = setting(ctx, list(per_gpu), "reference_fraction_min")
    found = {node: sku_of(ctx, node, table) for node in per_gpu}
    groups: dict[str, dict[str, float]] = {}
    for node, value in per_gpu.items():
        sku = found[node]
        if value:
            groups.setdefault(sku.id if sku else "unknown GPU", {})[node] = value
    medians = {key: fleet_median(values) for key, values in groups.items()}
    comparable = gpus and model.published and precision == "amp"
    rows = []
    for node, value in per_gpu.items():
        sku = found[node]
        key = sku.id if sku else "unknown GPU"
        median = medians.get(key)
        reference = sku.resnet50_train_img_s.get(name) if (sku and comparable) else None
        row = {"node": node, "sku": key, "images_per_s_per_gpu": value, "fleet_median": median,
               "of_median": round(value / median, 3) if value and median and len(groups.get(key, {})) > 1 else None,
               "reference": reference, "of_reference": round(value / reference, 3) if value and reference else None,
               "status": "pass", "why": ""}
        if row["of_reference"] is not None and row["of_reference"] < floor:
            row.update(status="fail", why=f"{node} trains at {figure(value)} {UNIT} per GPU, {row['of_reference']:.2f}"
                                          f" x the published {figure(reference)} for the {sku.name if sku else key} "
                                          f"(minimum {floor:g} x)")
        elif row["of_median"] is not None and row["of_median"] < fraction:
            row.update(status="warn", why=f"{node} trains at {figure(value)} {UNIT} per GPU, {row['of_median']:.2f} x "
                                          f"the fleet median {figure(median)} of its SKU (below {fraction:g} x)")
        rows.append(row)
    return rows


def scaling(ctx: ClusterContext, name: str, gpus: bool, runs: Runs, nodes: list[str]) -> ClusterResult:
    """Efficiency from 1 GPU within the first node and across every node; the scaling chart's points."""
    single = runs.single.figures.get("images_per_s")
    label = f"ResNet-50 {name}" + ("" if gpus else " (CPU ranks)")
    device = "GPU" if gpus else "CPU"
    points = [(runs.single, "1 GPU" if gpus else "1 rank")]
    first = runs.each[0] if runs.each and runs.each[0].gpus > 1 else None
    if first is not None:
        points.append((first, "node"))
    if runs.everything is not None:
        points.append((runs.everything, "cluster"))
    measured: dict[str, Any] = {"unit": UNIT, "device": device, "points": []}
    for r, scope in points:
        eff = efficiency(r.figures.get("images_per_s"), r.gpus, single)
        ctx.scaling.append({"label": label, "gpus": r.gpus, "throughput": r.figures.get("images_per_s"),
                            "efficiency": eff, "speedup": round(eff * r.gpus, 4) if eff is not None else None,
                            "unit": UNIT, "run": r.label, "device": device})
        measured["points"].append({"run": r.label, "scope": scope, "gpus": r.gpus,
                                   "images_per_s": r.figures.get("images_per_s"), "efficiency": eff})
    scaled = measured["points"][1:]
    if not scaled:
        return ClusterResult(SCALING, Status.SKIP, measured, None, f"one {'GPU' if gpus else 'rank'} is all there "
                             "is: nothing to scale to")
    text = "; ".join(f"{p['scope']} ({p['gpus']} {'GPUs' if gpus else 'ranks'}): efficiency {p['efficiency']:.0%}"
                     for p in scaled if p["efficiency"] is not None)
    if not gpus:
        return ClusterResult(SCALING, Status.SKIP, measured, None, f"measured, not judged: {text}; {CPU_NOTE}")
    minimums = {"node": setting(ctx, nodes, "scaling_efficiency_node_min"),
                "cluster": setting(ctx, nodes, "scaling_efficiency_cluster_min")}
    low = [p for p in scaled if p["efficiency"] is not None and p["efficiency"] < minimums[p["scope"]]]
    expected = ", ".join(f"{scope} >= {m:.0%}" for scope, m in minimums.items())
    if low:
        return ClusterResult(SCALING, Status.WARN, measured, expected, "below the minimum: " + ", ".join(
            f"{p['scope']} {p['efficiency']:.0%} < {minimums[p['scope']]:.0%}" for p in low) + f" ({text})",
            "compare with cluster.allreduce and cluster.network (the all-reduce is what scaling waits on); "
            "check NVLink (gpu.p2p_bandwidth) within a node and the InfiniBand rails across nodes")
    return ClusterResult(SCALING, Status.PASS, measured, expected, text)
