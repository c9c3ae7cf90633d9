"""What every rendering of the cluster report says alike: the verdict per exit code, status counts, plurals,
figures that may not be numbers, the published scaling figures our efficiency is read against (GPU runs
only; CPU ranks are never called a collapse, and ranks that outnumber their cores are said to), the
pair-bandwidth view (slow pairs, the blamed node, nodes left out) and the distinct actions."""

from __future__ import annotations

import math
from typing import Any

from ...references import REFERENCES
from ..values import figure, listed, plural

VERDICT = {0: "PASS", 1: "WARN", 2: "FAIL", 3: "COULD NOT CHECK EVERYTHING"}
NETWORK_CHECK = "cluster.network"  # the stage whose blame the heat map marks (cluster/network_verdict.CHECK)
# Below half of ideal the ranks added give less than half their worth: the chart and tables call it a collapse
# (GPU runs: CPU ranks measure the plumbing, and may share their cores).
COLLAPSE_EFFICIENCY = 0.5
SMOKE_CHECK = "cluster.smoke."  # + the job: its measured has, per run, the hosts its ranks ran on
CPU_CHECK = "host.cpu"  # a node's check whose measured is its logical CPU count
CPU_LABEL = "(CPU ranks)"  # what the smoke stage appends to a job's label when its ranks ran on CPUs
CPU_NOTE = ("These ranks ran on CPUs: the figure measures the plumbing (launcher, collectives, network) of a small "
            "model, not GPU training speed. It is not a GPU scaling measurement and is not set beside the published "
            "GPU figures (" + "; ".join(r["name"].split(",")[0] for r in REFERENCES) + ").")


def verdict(code: Any) -> str:
    return VERDICT.get(code, "?") if isinstance(code, int) else "?"


def title(doc: dict[str, Any]) -> str:
    """`gpucheck cluster lab`: the report's name, with its cluster where the report says one."""
    return "gpucheck cluster" + (f" {doc['cluster_name']}" if doc.get("cluster_name") else "")


def number(value: Any, spec: str = "g") -> str:
    """A figure formatted by `spec`, or as it is when it is not a finite number (never an exception)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return format(value, spec)
    return str(value)


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def status_of(item: Any) -> str:
    """The status word of a result or node entry, whatever it holds."""
    return str(item.get("status", "")) if isinstance(item, dict) else ""


def counts_text(counts: Any) -> str:
    """`1 pass, 3 fail`: the non-zero counts in order, or `none`."""
    items = counts.items() if isinstance(counts, dict) else ()
    return ", ".join(f"{n} {s}" for s, n in items if n) or "none"


def dicts(value: Any) -> list[dict[str, Any]]:
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def node_map(doc: dict[str, Any]) -> dict[str, Any]:
    """host -> its entry, whatever `nodes` holds."""
    nodes = doc.get("nodes")
    return nodes if isinstance(nodes, dict) else {}


# ---------------------------------------------------------------- scaling

def reference_band() -> tuple[float, float]:
    """The lowest and highest published GPU scaling efficiency (90% and 95%)."""
    values = [float(r["efficiency"]) for r in REFERENCES]
    return min(values), max(values)


def published_scaling() -> str:
    """The published figures a GPU run's efficiency is read against (sources in references.py)."""
    return "; ".join(f"{r['name']}: {r['efficiency']:.0%} at {r['gpus']} GPUs ({r['speedup']:.0f}x)"
                     for r in REFERENCES)


def on_cpu(point: dict[str, Any]) -> bool:
    """Whether a scaling point's ranks ran on CPUs: its `device`, else the smoke stage's label."""
    device = point.get("device")
    if isinstance(device, str) and device:
        return device.upper() == "CPU"
    return str(point.get("label", "")).endswith(CPU_LABEL)


def scaling_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The points a chart can place: a rank count of at least one and a finite efficiency; a CPU-rank point with
    the most CPU cores its ranks could have run on (`cores`, see cores_of) where the report knows it."""
    points = [s for s in dicts(doc.get("scaling")) if finite(s.get("gpus")) and s["gpus"] >= 1
              and finite(s.get("efficiency")) and (s.get("throughput") is None or finite(s.get("throughput")))]
    return [dict(p, cores=cores_of(doc, p)) if on_cpu(p) else p for p in points]


def run_hosts(doc: dict[str, Any], point: dict[str, Any]) -> list[str]:
    """The hosts a scaling point's ranks ran on: its run's `hosts` in the smoke result of its job."""
    job = str(point.get("label", "")).removesuffix(CPU_LABEL).strip()
    smoke = next((r for r in dicts(doc.get("cluster")) if r.get("check") == SMOKE_CHECK + job), {})
    runs = smoke.get("measured") if isinstance(smoke.get("measured"), dict) else {}
    run = runs.get(point.get("run")) if isinstance(runs.get(point.get("run")), dict) else {}
    hosts = run.get("hosts")
    return [str(h) for h in dict.fromkeys(hosts)] if isinstance(hosts, list) else []


def host_cores(doc: dict[str, Any], host: str) -> int | None:
    """A node's logical CPU count as its report's host.cpu measured it."""
    node = node_map(doc).get(host)
    report = node.get("report") if isinstance(node, dict) else None
    results = dicts(report.get("results")) if isinstance(report, dict) else []
    cores = next((r.get("measured") for r in results if r.get("check") == CPU_CHECK), None)
    return cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else None


def cores_of(doc: dict[str, Any], point: dict[str, Any]) -> int | None:
    """The most CPU cores a CPU-rank point's ranks could have run on: its own `cores` where the stage records
    them, else the sum of its hosts' logical CPUs. Hosts that share one machine's cores (a lab's) are counted
    each, so the sum is an upper bound: ranks above it surely outnumber their cores. None: not known."""
    own = point.get("cores")
    if isinstance(own, int) and not isinstance(own, bool) and own > 0:
        return own
    hosts = run_hosts(doc, point)
    counts = [host_cores(doc, h) for h in hosts]
    return sum(c for c in counts if c) if counts and all(counts) else None


def outnumbered(point: dict[str, Any]) -> bool:
    """Whether a CPU-rank point's ranks outnumber the cores they ran on (they took turns on them)."""
    cores = point.get("cores")
    return on_cpu(point) and isinstance(cores, int) and finite(point.get("gpus")) and point["gpus"] > cores


def cores_text(point: dict[str, Any]) -> str:
    """`3 ranks on 2 CPU cores`: what a point's ranks shared."""
    return f"{plural(point.get('gpus'), 'rank')} on {plural(point.get('cores'), 'CPU core')}"


def ranks_text(point: dict[str, Any]) -> str:
    """`8 GPUs`, `1 GPU`, `3 CPU ranks`."""
    return plural(point.get("gpus"), "CPU rank" if on_cpu(point) else "GPU")


def low(point: dict[str, Any]) -> bool:
    return finite(point.get("efficiency")) and point["efficiency"] < COLLAPSE_EFFICIENCY


def collapses(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPU points below half of ideal. CPU ranks are never called a collapse: see cpu_drops."""
    return [p for p in points if low(p) and not on_cpu(p)]


def cpu_drops(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU-rank points below half of ideal: said plainly (drop_text), not as a collapse."""
    return [p for p in points if low(p) and on_cpu(p)]


def drop_text(point: dict[str, Any]) -> str:
    """Why a CPU-rank point's low efficiency is no collapse: its ranks outnumbered their cores, or the report
    cannot tell whether its hosts shared cores."""
    text = speed_text(point) + ". "
    if outnumbered(point):
        return text + (f"{cores_text(point)}: the ranks outnumber the cores they ran on and took turns on them, "
                       "so this measures that contention, not how the job scales. It is not a collapse.")
    return text + ("Not called a collapse: CPU ranks measure the plumbing, and share their hosts' cores with each "
                   "other and the launcher (a lab's hosts may all share one machine's cores, which the report "
                   "cannot see).")


def scaling_summary(points: list[dict[str, Any]]) -> list[str]:
    """One line per job, at its most ranks: `torch: 41% at 40 GPUs, a collapse (published GPU scaling 90%–95%)`,
    `tf-horovod (CPU ranks): 3% at 3 CPU ranks (3 ranks on 2 CPU cores: the ranks outnumber the cores); CPU ranks:
    plumbing, not a GPU scaling measurement`."""
    jobs: dict[str, dict[str, Any]] = {}
    for p in points:
        label = str(p.get("label", "job"))
        if label not in jobs or p["gpus"] > jobs[label]["gpus"]:
            jobs[label] = p
    bottom, top = reference_band()
    lines = []
    for label, p in jobs.items():
        line = f"{label}: {number(p['efficiency'], '.0%')} at {ranks_text(p)}"
        line += ", a collapse" if low(p) and not on_cpu(p) else ""
        line += f" ({cores_text(p)}: the ranks outnumber the cores)" if outnumbered(p) else ""
        line += ("; CPU ranks: plumbing, not a GPU scaling measurement" if on_cpu(p)
                 else f" (published GPU scaling {bottom:.0%}–{top:.0%})")
        lines.append(line)
    return lines


def speed_text(point: dict[str, Any]) -> str:
    """`tf-horovod at 3 CPU ranks: efficiency 3%, speed-up 0.10x (slower than 1 rank)`."""
    text = f"{point.get('label', 'job')} at {ranks_text(point)}: efficiency {number(point['efficiency'], '.0%')}"
    speedup = point.get("speedup")
    if finite(speedup):
        text += f", speed-up {speedup:.2f}x" + (" (slower than 1 rank)" if speedup < 1 else "")
    return text



# ---------------------------------------------------------------- pair bandwidth

def network_result(doc: dict[str, Any]) -> dict[str, Any]:
    return next((r for r in dicts(doc.get("cluster")) if r.get("check") == NETWORK_CHECK), {})


def blamed_nodes(doc: dict[str, Any]) -> dict[str, str]:
    """node -> why, for the nodes the network stage blames (drained on a fail)."""
    result = network_result(doc)
    if status_of(result) not in ("fail", "warn"):
        return {}
    nodes = result.get("nodes")
    return {str(n): str(why) for n, why in nodes.items()} if isinstance(nodes, dict) else {}


def measured_pairs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dicts(doc.get("pairs")) if finite(p.get("value")) and "a" in p and "b" in p]


def left_out_nodes(doc: dict[str, Any], pairs: list[dict[str, Any]]) -> dict[str, str]:
    """node -> why, for the inventory's nodes in no measured pair: the stage's own word when it gives one
    (`measured.left_out`), else the node's verdict."""
    inside = {str(x) for p in pairs for x in (p["a"], p["b"])}
    measured = network_result(doc).get("measured")
    given = measured.get("left_out") if isinstance(measured, dict) else None
    given = given if isinstance(given, dict) else {}
    out = {}
    for host, node in node_map(doc).items():
        if str(host) in inside:
            continue
        node = node if isinstance(node, dict) else {}
        status = status_of(node)
        own = f"its node checks: {status.upper()} ({node.get('reason', '')})" if status not in ("pass", "") else ""
        out[str(host)] = str(given.get(host) or own or "not measured")
    return out




def slow_pairs(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pairs if p.get("status") in ("fail", "warn")]


def pair_text(p: dict[str, Any]) -> str:
    """`node01-node02 42.31 Gb/s (fail)`."""
    return f"{p['a']}-{p['b']} {figure(p['value'], str(p.get('unit', '')))} ({p.get('status', '?')})"


# ---------------------------------------------------------------- what to do

def actions(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each distinct remediation of what did not pass, once, with where it applies: [(action, ["node03:
    gpu.count, gpu.model", "cluster.network (node02)"])] in the order first met (cluster checks first)."""
    found: dict[str, dict[str, list[str]]] = {}
    for r in dicts(doc.get("cluster")):
        if status_of(r) in ("fail", "error", "warn") and r.get("remediation"):
            blamed = list(r["nodes"]) if isinstance(r.get("nodes"), dict) else []
            where = str(r.get("check", "?")) + (f" ({', '.join(map(str, blamed))})" if blamed else "")
            found.setdefault(str(r["remediation"]), {}).setdefault(where, [])
    for host, node in node_map(doc).items():
        report = node.get("report") if isinstance(node, dict) else None
        for r in dicts(report.get("results")) if isinstance(report, dict) else []:
            if status_of(r) in ("fail", "error", "warn") and r.get("remediation"):
                found.setdefault(str(r["remediation"]), {}).setdefault(str(host), []).append(str(r.get("check")))
    return [(action, [f"{where}: {listed(checks)}" if checks else where for where, checks in places.items()])
            for action, places in found.items()]
