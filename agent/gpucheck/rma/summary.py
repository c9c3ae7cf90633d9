"""SUMMARY.txt: the archive's rma.json as a person copies it into a vendor's RMA form: who the GPU is, what
failed and when, its counters and Xid events, its figures against the fleet, and what is missing."""

from __future__ import annotations

from typing import Any

from ..report.values import figure, figure_unit

IDENTITY_LABELS = (("name", "Model"), ("serial", "Serial number"), ("uuid", "UUID"), ("pci_bus_id", "PCI bus id"),
                   ("vbios_version", "VBIOS"), ("board_part_number", "Board part number"),
                   ("inforom_image_version", "InfoROM image"))
FINDINGS_SHOWN = 20  # of each GPU's findings over time, the newest; rma.json has them all


def shown(value: Any) -> str:
    return "not reported" if value is None or value == "" else str(value)


def counters_lines(counters: dict[str, Any]) -> list[str]:
    lines = [f"  ECC mode: {shown(counters.get('ecc_mode'))}"]
    for key, label in (("ecc_errors", "ECC errors"), ("remapped_rows", "Row remapping"),
                       ("retired_pages", "Retired pages")):
        value = counters.get(key)
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        lines.append(f"  {label}: {shown(value)}")
    return lines


def logged_at(event: dict[str, Any]) -> str:
    """When the kernel logged an Xid: seconds after boot where its stamp says, else its wall-clock stamp as written."""
    uptime = event.get("uptime_s")
    return f"{uptime:g} s after boot" if isinstance(uptime, int | float) else shown(event.get("timestamp"))


def finding_line(row: dict[str, Any]) -> str:
    return f"  {shown(row.get('started'))}  {row.get('check')}: {str(row.get('status')).upper()} - " \
           f"{row.get('reason') or ''}"


def figure_line(row: dict[str, Any]) -> str:
    """One figure as every gpucheck report writes it (report/values.py: one precision, one unit)."""
    unit = figure_unit(row["figure"], row["unit"])
    fleet = "no fleet figure" if row["fleet_median"] is None else (
        f"fleet median {figure(row['fleet_median'], unit)} over {row['fleet_gpus']} GPU(s), "
        f"{row['vs_fleet_pct']:+.1f} %")
    return f"  {row['check']} {row['figure']}: {figure(row['value'], unit)} ({row['started']}); {fleet}"


def gpu_lines(gpu: dict[str, Any]) -> list[str]:
    lines = [f"GPU{gpu.get('index')}"]
    lines += [f"  {label}: {shown(gpu.get(key))}" for key, label in IDENTITY_LABELS]
    lines += counters_lines(gpu["counters"])
    events = gpu["xid_events"]
    lines.append(f"  Xid events this boot: {len(events)}" + "".join(
        f"\n    Xid {e.get('xid')} ({e.get('severity')}) at {logged_at(e)}: {e.get('message')}"
        for e in events[-FINDINGS_SHOWN:]))
    now = gpu["findings_now"]
    lines.append("  Failing now: " + ("nothing" if not now else f"{len(now)} finding(s)"))
    lines += [finding_line(row) for row in now]
    past = gpu["findings_over_time"]
    lines.append(f"  Findings in the node's kept reports: {len(past)}" +
                 (f" (the newest {FINDINGS_SHOWN} below)" if len(past) > FINDINGS_SHOWN else ""))
    lines += [finding_line(row) for row in past[-FINDINGS_SHOWN:]]
    lines.append(f"  Figures (latest of each, against the fleet): {len(gpu['figures']) or 'none kept'}")
    lines += [figure_line(row) for row in gpu["figures"]]
    return lines


def summary(doc: dict[str, Any]) -> str:
    versions = doc["versions"]
    lines = [f"gpucheck RMA evidence: {doc['host']}, {doc['target']} ({doc['created']}, gpucheck "
             f"{doc['gpucheck_version']})", "",
             f"Driver {shown(versions['driver'])}, CUDA (driver) {shown(versions['cuda_driver'])}, NVML "
             f"{shown(versions['nvml'])}, DCGM {shown(versions['dcgm'])}", f"Profile: {doc['profile']}", ""]
    for gpu in doc["gpus"]:
        lines += gpu_lines(gpu) + [""]
    node = doc["node_findings_over_time"]
    if node:
        lines.append(f"Node findings in the kept reports: {len(node)}")
        lines += [finding_line(row) for row in node[-FINDINGS_SHOWN:]] + [""]
    smi = doc["nvidia_smi_q"]
    lines.append(f"nvidia-smi -q: {'nvidia-smi-q.txt' if not smi['error'] else smi['error']}")
    bug = doc["nvidia_bug_report"]
    lines.append("nvidia-bug-report.sh: " + ("not taken (see Missing)" if bug is None else bug["file"] or
                                             bug["error"] or "ran, but wrote no nvidia-bug-report.log.gz"))
    lines += ["", "Missing:" if doc["missing"] else "Missing: nothing"] + [f"  {m}" for m in doc["missing"]]
    return "\n".join(lines) + "\n"
