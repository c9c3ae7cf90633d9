"""The burn stage's verdicts from its record (burn_record.py), docs/burn.md:

- cluster.burn.gpus: each node's own gpu.burn verdict over every round (a throughput collapse, a clock slowed for a
  hardware reason, an Xid, a sample over the temperature limit: the node's rules, taken while every node burned);
- cluster.burn.racks: a node whose power or hottest GPU is out of line with the other nodes of its rack (of its
  GPU model), or of the cluster where its rack has fewer than RACK_MIN of them: cooling or power a rack shares
  shows here, and stage `shape` then names the rack;
- cluster.burn.fabric: the all-reduce bus bandwidth under the burn against the profile's floor and against the
  same all-reduce measured cold, just before (a share of it: --burn-fabric-fraction, default 0.7).
Pure: the record in, results out."""

from __future__ import annotations

import statistics
from typing import Any

from ...model import Status
from ...report.cluster.burnin import finite
from ..context import ClusterResult

GPUS, RACKS, FABRIC = "cluster.burn.gpus", "cluster.burn.racks", "cluster.burn.fabric"
WORST = (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS, Status.SKIP)
RACK_MIN = 3  # nodes a median needs to say who is out of line (of two, neither is)
TEMP_OVER_C = 10.0  # hotter than the group's median by more than this: its cooling is not the others'
POWER_BAND = (0.85, 1.15)  # power outside these shares of the group's median: throttled, or not loaded alike
SHOWN = 8
REMEDIATION_GPUS = ("read each node's reason: a hardware slowdown under load is cooling or power (fans, inlet "
                    "temperature, the rack's airflow, the PSUs); an Xid or a collapse under load is the GPU or its "
                    "board: run gpucheck node --full --burn-seconds 600 on it alone, then open an RMA")
REMEDIATION_RACKS = ("compare the node with its rack neighbours: inlet temperature, fan speeds, blanking panels, PSU "
                     "and PDU load (ipmitool sdr), power cap settings (nvidia-smi -q -d POWER)")
REMEDIATION_FABRIC = ("the fabric slows under load: check the switches' and HCAs' temperatures and error counters "
                      "(ibdiagnet, perfquery), cables that fail when hot, and congestion on the leaf uplinks")


def status_of(text: Any) -> Status:
    try:
        return Status(str(text))
    except ValueError:
        return Status.ERROR


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=WORST.index) if statuses else Status.SKIP


def shown(items: list[str]) -> str:
    return "; ".join(items[:SHOWN]) + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def judge(record: dict[str, Any], floor: float | None, floor_source: str,
          loaded_fraction: float) -> list[ClusterResult]:
    """`loaded_fraction`: under the burn, a bus bandwidth below this share of the cold figure warns (--burn-fabric-
    fraction): the fabric suffers under load."""
    results = [gpus_result(record), racks_result(record)]
    if len(record["nodes"]) > 1:
        results.append(fabric_result(record, floor, floor_source, loaded_fraction))
    return results


def plan_text(record: dict[str, Any]) -> str:
    done, rounds = record["rounds_done"], record["rounds"]
    text = f"{len(record['nodes'])} node(s) burning at once for {record['seconds']:g} s"
    if rounds > 1 or record["interrupted"]:
        text += f" ({done} of {rounds} round(s) of {record['round_s']:g} s done)"
    return text + (", interrupted" if record["interrupted"] else "")


def gpus_result(record: dict[str, Any]) -> ClusterResult:
    if not record["rounds_done"]:
        why = "interrupted before the first round ended" if record["interrupted"] else "no round ran"
        return ClusterResult(GPUS, Status.ERROR, reason=f"{plan_text(record)}: {why}, nothing judged")
    verdicts: dict[str, tuple[Status, str]] = {}
    for node, entry in record["nodes"].items():
        rounds = entry["rounds"]
        status = worst([status_of(r["status"]) for r in rounds])
        which = next(i for i, r in enumerate(rounds) if status_of(r["status"]) == status)
        label = f"round {which + 1}: " if len(rounds) > 1 else ""
        verdicts[node] = (status, label + rounds[which]["reason"])
    medians = [g["burn_TFLOPS_median"] for e in record["nodes"].values() for g in e["gpus"].values()
               if finite(g.get("burn_TFLOPS_median"))]
    count = sum(len(e["gpus"]) for e in record["nodes"].values())
    measured = {"nodes": len(verdicts), "gpus": count, "rounds_done": record["rounds_done"],
                "TFLOPS_median": round(statistics.median(medians), 6) if medians else None,
                "node_status": {n: s.value for n, (s, _) in verdicts.items()}}
    status = worst([s for s, _ in verdicts.values()])
    bad = {n: why for n, (s, why) in verdicts.items() if s in (Status.FAIL, Status.WARN)}
    broken = {n: why for n, (s, why) in verdicts.items() if s == Status.ERROR}
    expected = "every node's own gpu.burn passes while every node burns"
    if status == Status.PASS:
        median = f"; median {measured['TFLOPS_median']:g} TFLOP/s per GPU" if medians else ""
        return ClusterResult(GPUS, Status.PASS, measured, expected,
                             f"{plan_text(record)}: {count} GPU(s), every node's own burn verdict passes{median}")
    parts = [f"{n}: {why}" for n, why in {**bad, **broken}.items()]
    return ClusterResult(GPUS, status, measured, expected, f"{plan_text(record)}: " + shown(parts),
                         REMEDIATION_GPUS, nodes=bad)


def node_figures(entry: dict[str, Any]) -> tuple[float | None, float | None]:
    """(the node's power in W: its GPUs' mean over the second half of the burn, the steady state; its hottest GPU
    sample in C). Without a power series, the GPUs' highest sample from the last round's verdict."""
    powers, temps = [], []
    last = (entry["rounds"][-1].get("measured") if entry["rounds"] else None) or {}
    for label, gpu in entry["gpus"].items():
        series = [v for v in (((gpu.get("burn_timeline") or {}).get("nvml") or {}).get("power_W") or [])
                  if finite(v)]
        steady = series[len(series) // 2:]
        if steady:
            powers.append(statistics.fmean(steady))
        elif isinstance(last.get(label), dict) and finite(last[label].get("power_W_max")):
            powers.append(float(last[label]["power_W_max"]))
        if finite(gpu.get("burn_temperature_C_max")):
            temps.append(float(gpu["burn_temperature_C_max"]))
    whole = len(powers) == len(entry["gpus"]) and powers
    return (round(sum(powers), 1) if whole else None), (max(temps) if temps else None)


def groups(record: dict[str, Any]) -> dict[str, list[str]]:
    """Who a node is compared with: the nodes of its rack with its GPU model and count, where there are at least
    RACK_MIN; else every node of the cluster with them."""
    kind = {n: tuple(sorted(str(g.get("sku")) for g in e["gpus"].values())) for n, e in record["nodes"].items()
            if e["gpus"]}
    by_rack: dict[tuple[Any, ...], list[str]] = {}
    by_kind: dict[tuple[Any, ...], list[str]] = {}
    for node, model in kind.items():
        by_rack.setdefault((record["nodes"][node]["rack"], model), []).append(node)
        by_kind.setdefault(model, []).append(node)
    found: dict[str, list[str]] = {}
    for (rack, model), nodes in by_rack.items():
        if rack is not None and len(nodes) >= RACK_MIN:
            found[f"rack {rack}"] = nodes
        elif len(by_kind[model]) >= RACK_MIN:
            found.setdefault("the cluster" + (f" ({model[0]})" if len(by_kind) > 1 else ""), by_kind[model])
    return found


def racks_result(record: dict[str, Any]) -> ClusterResult:
    figures = {n: node_figures(e) for n, e in record["nodes"].items()}
    odd: dict[str, list[str]] = {}
    compared: dict[str, dict[str, Any]] = {}
    for name, nodes in groups(record).items():
        powers = [figures[n][0] for n in nodes if figures[n][0] is not None]
        temps = [figures[n][1] for n in nodes if figures[n][1] is not None]
        power_mid = statistics.median(powers) if len(powers) >= RACK_MIN else None
        temp_mid = statistics.median(temps) if len(temps) >= RACK_MIN else None
        compared[name] = {"nodes": len(nodes), "power_W_median": power_mid, "temperature_C_median": temp_mid}
        for node in nodes:
            power, temp = figures[node]
            if temp is not None and temp_mid is not None and temp > temp_mid + TEMP_OVER_C:
                odd.setdefault(node, []).append(f"hottest GPU {temp:g} °C, {temp - temp_mid:+.0f} °C over {name}'s "
                                                f"median {temp_mid:g} °C")
            if power is not None and power_mid and not POWER_BAND[0] <= power / power_mid <= POWER_BAND[1]:
                odd.setdefault(node, []).append(f"GPU power {power:g} W, {power / power_mid:.2f} x {name}'s "
                                                f"median {power_mid:g} W")
    measured = {"groups": compared, "nodes": {n: {"power_W": p, "temperature_C": t} for n, (p, t) in figures.items()}}
    expected = (f"hottest GPU within {TEMP_OVER_C:g} °C of its rack's median, GPU power within "
                f"{POWER_BAND[0]:g}-{POWER_BAND[1]:g} x the median")
    if not compared:
        return ClusterResult(RACKS, Status.SKIP, measured, expected,
                             f"fewer than {RACK_MIN} nodes of one GPU model gave figures: no median to compare with")
    if not odd:
        return ClusterResult(RACKS, Status.PASS, measured, expected,
                             f"every node's power and temperature in line with {', '.join(compared)}")
    why = {n: "; ".join(items) for n, items in odd.items()}
    return ClusterResult(RACKS, Status.WARN, measured, expected, shown([f"{n}: {w}" for n, w in why.items()]),
                         REMEDIATION_RACKS, nodes=why)


def fabric_result(record: dict[str, Any], floor: float | None, floor_source: str,
                  loaded_fraction: float) -> ClusterResult:
    fabric = record["fabric"]
    cold = fabric["cold"] or {}
    runs = [r for r in fabric["loaded"] if r["status"] == "pass" and finite(r.get("busbw_GBps"))]
    failed = [r for r in fabric["loaded"] if r not in runs]
    cold_bw = cold.get("busbw_GBps") if cold.get("status") == "pass" and finite(cold.get("busbw_GBps")) else None
    loaded = [r["busbw_GBps"] for r in runs]
    measured = {"cold_busbw_GBps": cold_bw, "loaded_busbw_GBps": loaded, "tool": fabric["tool"],
                "loaded_median_GBps": statistics.median(loaded) if loaded else None}
    expected = (f">= {floor:g} GB/s ({floor_source}) and " if floor else "") + \
        f">= {loaded_fraction:g} x the cold figure under the burn"
    if failed:
        first = failed[0]
        return ClusterResult(FABRIC, status_of(first["status"]), measured, expected,
                             f"{len(failed)} of {len(fabric['loaded'])} all-reduce run(s) under the burn did not "
                             f"pass: {first['reason']}", REMEDIATION_FABRIC)
    if not loaded:
        why = cold.get("reason") if cold and cold.get("status") != "pass" else "no all-reduce ran during the burn"
        return ClusterResult(FABRIC, Status.ERROR, measured, expected, f"not measured under load: {why}",
                             REMEDIATION_FABRIC)
    low, mid = min(loaded), statistics.median(loaded)
    against = f"; cold {cold_bw:g} GB/s" if cold_bw else "; no cold figure to compare with"
    if floor and low < floor:
        return ClusterResult(FABRIC, Status.FAIL, measured, expected, f"under the burn the bus bandwidth fell to "
                             f"{low:g} GB/s < {floor:g} GB/s ({floor_source}){against}", REMEDIATION_FABRIC)
    if cold_bw and mid < loaded_fraction * cold_bw:
        return ClusterResult(FABRIC, Status.WARN, measured, expected,
                             f"under the burn the bus bandwidth is {mid:g} GB/s (median of {len(loaded)} run(s)), "
                             f"{mid / cold_bw:.2f} x the cold {cold_bw:g} GB/s", REMEDIATION_FABRIC)
    share = f" ({mid / cold_bw:.2f} x cold)" if cold_bw else ""
    return ClusterResult(FABRIC, Status.PASS, measured, expected,
                         f"under the burn the bus bandwidth is {mid:g} GB/s (median of {len(loaded)} run(s), lowest "
                         f"{low:g}){share}{against}" + (f", >= {floor:g} GB/s ({floor_source})" if floor else ""))
