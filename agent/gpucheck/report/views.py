"""What a person reads in the MEASURED column for the checks whose `measured` is a record kept for tools (the Xid
window's boot id and offsets, the scaling run's points, the smoke runs' weight digests, the all-reduce's byte
count): one sentence made from it. report.json keeps the record whole; the text table and the HTML show
`for_person(check, measured)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .values import figure, plural, size


def xid(measured: dict[str, Any]) -> str:
    """`no Xid since boot (dmesg)`, `Xid 79 x2, Xid 48 in the last 24 h (...) (journalctl); 3 older, not judged`."""
    counts = measured.get("counts") if isinstance(measured.get("counts"), dict) else {}
    said = [f"Xid {code}" + (f" x{n}" if isinstance(n, int) and n > 1 else "") for code, n in counts.items()]
    fallen = measured.get("fallen_off_bus") or []
    if isinstance(fallen, list) and fallen:
        said.append(f"{', '.join(map(str, fallen))} fallen off the bus")
    window = measured.get("window") if isinstance(measured.get("window"), dict) else {}
    text = f"{', '.join(said) or 'no Xid'} {window.get('since') or 'since boot'}"
    if window.get("source"):
        text += f" ({window['source']})"
    older = measured.get("older") if isinstance(measured.get("older"), dict) else {}
    if older.get("events"):
        text += f"; {older['events']} older, not judged"
    return text


def scaling(measured: dict[str, Any]) -> str:
    """`1 rank 2018 samples/s; 3 ranks 2503 samples/s, speed-up 1.24x, efficiency 41% (CPU ranks)`."""
    unit = str(measured.get("unit") or "")
    said = []
    for point in measured.get("points") or []:
        if not isinstance(point, dict):
            continue
        text = f"{plural(point.get('ranks'), 'rank')} {figure(point.get('throughput'), unit)}"
        if isinstance(point.get("speedup"), int | float):
            text += f", speed-up {point['speedup']:.2f}x"
        if isinstance(point.get("efficiency"), int | float):
            text += f", efficiency {point['efficiency']:.0%}"
        said.append(text)
    device = " (CPU ranks)" if measured.get("device") == "CPU" else ""
    return "; ".join(said) + device if said else "-"


def allreduce(measured: dict[str, Any]) -> str:
    """`bus 0.2253 GB/s (algorithm 0.169 GB/s), 64 MiB over 3 ranks on 3 nodes (allreduce_bench, mpi)`."""
    text = f"bus {figure(measured.get('busbw_GBps'), 'GB/s')}"
    if isinstance(measured.get("algbw_GBps"), int | float):
        text += f" (algorithm {figure(measured['algbw_GBps'], 'GB/s')})"
    nbytes = measured.get("bytes", measured.get("size_B"))
    if nbytes is not None:
        text += f", {size(nbytes)}"
    ranks, nodes = measured.get("ranks"), measured.get("nodes")
    if ranks is not None or nodes is not None:
        text += (f" over {ranks} ranks" if ranks is not None else " over") + (f" on {nodes} nodes" if nodes else "")
    how = [str(measured[k]) for k in ("tool", "backend") if measured.get(k)]
    return text + (f" ({', '.join(how)})" if how else "")


def smoke(measured: dict[str, Any]) -> str:
    """`1 rank: 31189 samples/s in 5.3 s on node01; 3 ranks: 4987 samples/s in 12.2 s on node01, node02, node03`
    (each run's weights digest is in report.json; the reason says whether they agree)."""
    said = []
    for label, run in measured.items():
        if not isinstance(run, dict):
            continue
        text = f"{plural(run['ranks'], 'rank')}: " if run.get("ranks") is not None else f"{label}: "
        text += figure(run.get("samples_per_s"), "samples/s") if run.get("passed") else "failed"
        if isinstance(run.get("wall_s"), int | float):
            text += f" in {figure(run['wall_s'], 's')}"
        hosts = run.get("hosts")
        if isinstance(hosts, list) and hosts:
            text += f" on {', '.join(map(str, hosts))}"
        said.append(text)
    return "; ".join(said) or "-"


VIEWS: dict[str, Callable[[dict[str, Any]], str]] = {"gpu.xid": xid, "cluster.scaling": scaling,
                                                      "cluster.allreduce": allreduce}
FAMILIES: dict[str, Callable[[dict[str, Any]], str]] = {"cluster.smoke.": smoke}  # one check per framework


def for_person(check: Any, measured: Any) -> Any:
    """The check's measured value as the reports show it: its sentence where it has one, else as it is."""
    name = str(check)
    view = VIEWS.get(name) or next((v for prefix, v in FAMILIES.items() if name.startswith(prefix)), None)
    return view(measured) if view and isinstance(measured, dict) else measured
