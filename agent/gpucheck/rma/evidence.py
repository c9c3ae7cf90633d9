"""What the archive says about the GPUs, from what was collected (collect.py): pure functions over the NVML
facts, the kernel log's Xid events, the node's kept reports and the history store's rows, so each field can be
tested from known inputs."""

from __future__ import annotations

import statistics
from typing import Any

from ..history.gpu_names import bus_key, names_gpu, other_names
from ..history.records import GPU_KEY, NODE_GPU, figures_of

IDENTITY = ("index", "name", "uuid", "serial", "pci_bus_id", "vbios_version", "board_part_number",
            "inforom_image_version")
COUNTERS = ("ecc_mode", "ecc_errors", "remapped_rows", "retired_pages")
NOT_JUDGED = ("pass", "skip")


def identity(gpu: dict[str, Any]) -> dict[str, Any]:
    """What a vendor identifies the board by: serial, UUID, PCI bus, VBIOS, board part number, InfoROM."""
    return {key: gpu.get(key) for key in IDENTITY}


def counters(gpu: dict[str, Any]) -> dict[str, Any]:
    """ECC error counts, row remapping and retired pages as NVML reports them now."""
    return {key: gpu.get(key) for key in COUNTERS}


def xid_events(kernel_log: dict[str, Any] | None, gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """The kernel's Xid events of this boot on the GPU's PCI address, oldest first."""
    key = bus_key(gpu.get("pci_bus_id"))
    return [e for e in (kernel_log or {}).get("events") or [] if key is not None and bus_key(e.get("pci")) == key]


def xid_lines(kernel_log: dict[str, Any] | None, gpus: list[dict[str, Any]]) -> str:
    """The kernel log's NVRM lines that name one of the GPUs (its bus id as the kernel writes it, or its UUID)."""
    marks = [mark for gpu in gpus for mark in other_names(gpu.get("uuid"), gpu.get("pci_bus_id"))]
    lines = str((kernel_log or {}).get("evidence") or "").splitlines()
    return "".join(f"{line}\n" for line in lines if any(mark in line.lower() for mark in marks))


def index_then(report: dict[str, Any], gpu: dict[str, Any]) -> int | None:
    """The GPU's index in an older report: by its UUID where the report names its GPUs (an index can change
    between boots), else the index it has now."""
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    named = [g for g in facts.get("gpus") or [] if isinstance(g, dict) and g.get("uuid")]
    if not named:
        return gpu.get("index")
    found = [g.get("index") for g in named if str(g["uuid"]).lower() == str(gpu.get("uuid") or "").lower()]
    return found[0] if found and isinstance(found[0], int) else None


def about_gpu(result: dict[str, Any], index: int, gpu: dict[str, Any]) -> bool:
    """Whether a result names this GPU in its reason or evidence."""
    return names_gpu(f"{result.get('reason') or ''}\n{result.get('evidence') or ''}", index, gpu.get("uuid"),
                     gpu.get("pci_bus_id"))


def own_value(value: Any, index: int) -> Any:
    """A check's measured or expected value, cut to this GPU's entry where it is keyed by GPU."""
    if isinstance(value, dict) and any(GPU_KEY.fullmatch(str(k)) for k in value):
        return value.get(f"GPU{index}")
    return value


def timeline(reports: list[tuple[str, dict[str, Any]]], gpus: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Every judged result (warn, fail, error) of the kept reports that is about the GPU (every one for the whole
    node: gpus None), oldest first: when, the file, the check, the verdict, what was measured and expected."""
    rows = []
    for name, report in reports:
        for result in report.get("results") or []:
            if not isinstance(result, dict) or result.get("status") in NOT_JUDGED:
                continue
            for gpu in gpus or [None]:
                index = None if gpu is None else index_then(report, gpu)
                if gpu is not None and (index is None or not about_gpu(result, index, gpu)):
                    continue
                rows.append({"started": report.get("started"), "report": name, "gpu": None if gpu is None else
                             gpu.get("uuid"), "check": result.get("check"), "status": result.get("status"),
                             "measured": result.get("measured") if index is None else own_value(result.get(
                                 "measured"), index),
                             "expected": result.get("expected"), "reason": result.get("reason")})
    return sorted(rows, key=lambda r: str(r["started"] or ""))


def figures(reports: list[tuple[str, dict[str, Any]]], gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure the kept reports measured on the GPU (burn-in, GEMM, memory and host bandwidth), oldest first,
    with the check's verdict and what the profile expected of it (fractions of the SKU's data-sheet figures)."""
    rows = []
    for name, report in reports:
        index = index_then(report, gpu)
        for result in report.get("results") or []:
            if not isinstance(result, dict) or index is None:
                continue
            for check, figure, unit, owner, value in figures_of(str(result.get("check")), result.get("measured")):
                if owner == index and owner != NODE_GPU:
                    rows.append({"started": report.get("started"), "report": name, "check": check, "figure": figure,
                                 "unit": unit, "value": value, "status": result.get("status"),
                                 "expected": own_value(result.get("expected"), index)})
    return sorted(rows, key=lambda r: str(r["started"] or ""))


def against_fleet(own: list[dict[str, Any]], fleet: list[dict[str, Any]], uuid: str | None) -> list[dict[str, Any]]:
    """The GPU's latest value of each figure against the fleet's: the median of the latest value of every other
    GPU of its model in the history store (fleet rows: uuid, check, figure, unit, value, started)."""
    latest_own: dict[tuple[str, str], dict[str, Any]] = {}
    for row in own:
        latest_own[(row["check"], row["figure"])] = row
    others: dict[tuple[str, str], dict[str, tuple[str, float]]] = {}
    for row in fleet:
        if row.get("uuid") and str(row["uuid"]).lower() != str(uuid or "").lower():
            per_gpu = others.setdefault((row["check"], row["figure"]), {})
            if row["uuid"] not in per_gpu or str(row["started"]) >= per_gpu[row["uuid"]][0]:
                per_gpu[row["uuid"]] = (str(row["started"]), float(row["value"]))
    compared = []
    for key, row in sorted(latest_own.items()):
        values = [v for _, v in others.get(key, {}).values()]
        median = statistics.median(values) if values else None
        compared.append({"check": key[0], "figure": key[1], "unit": row["unit"], "value": row["value"],
                         "started": row["started"], "fleet_gpus": len(values), "fleet_median": median,
                         "vs_fleet_pct": None if not median else round((row["value"] - median) / abs(median) * 100,
                                                                        1)})
    return compared
