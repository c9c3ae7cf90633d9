"""What a person reads in the MEASURED column for the checks whose `measured` is a record kept for tools (the Xid
window's boot id and offsets, the scaling run's points): one sentence made from it. report.json keeps the record
whole; the text table and the HTML show `for_person(check, measured)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .values import figure


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
        ranks = point.get("ranks")
        text = f"{ranks} rank{'' if ranks == 1 else 's'} {figure(point.get('throughput'), unit)}"
        if isinstance(point.get("speedup"), int | float):
            text += f", speed-up {point['speedup']:.2f}x"
        if isinstance(point.get("efficiency"), int | float):
            text += f", efficiency {point['efficiency']:.0%}"
        said.append(text)
    device = " (CPU ranks)" if measured.get("device") == "CPU" else ""
    return "; ".join(said) + device if said else "-"


VIEWS: dict[str, Callable[[dict[str, Any]], str]] = {"gpu.xid": xid, "cluster.scaling": scaling}


def for_person(check: Any, measured: Any) -> Any:
    """The check's measured value as the reports show it: its sentence where it has one, else as it is."""
    view = VIEWS.get(str(check))
    return view(measured) if view and isinstance(measured, dict) else measured
