"""The archive's contents: rma.json (every field, structured), SUMMARY.txt (what to copy into the vendor's form),
and the evidence as taken (nvidia-smi -q, the kernel's Xid lines, the report run now, the kept reports the
findings come from, DCGM, NVIDIA's bug report)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from .. import __version__
from . import evidence
from .collect import Collected
from .summary import summary

FORMAT = "gpucheck-rma/1"
# What the archive answers, and where each ask comes from (docs/rma.md says more)
REFERENCES = {
    "nvidia_rma_process": "https://docs.nvidia.com/deploy/rma-process/index.html",
    "nvidia_row_remap_rma_policy":
        "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/rma-policy-thresholds-for-row-remapping.html",
    "nvidia_xid_errors": "https://docs.nvidia.com/deploy/xid-errors/index.html",
    "dcgm_problem_reporting":
        "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/debugging-and-troubleshooting.html",
}
# the burn-in's checks: their figures are compared with the fleet (the SKU's are each result's `expected`)
ACTIVE_FIGURE_CHECKS = ("gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.burn", "gpu.p2p_bandwidth")


def command(done: Any, file: str | None) -> dict[str, Any] | None:
    if done is None:
        return None
    return {"argv": done.argv, "exit_code": done.returncode, "timed_out": done.timed_out, "file": file,
            "error": None if done.ok else done.describe_failure()}


def gpu_section(collected: Collected, gpu: dict[str, Any]) -> dict[str, Any]:
    own = evidence.figures(collected.kept, gpu)
    fleet = [row for row in collected.fleet if row.get("uuid")]
    return {**evidence.identity(gpu), "counters": evidence.counters(gpu),
            "xid_events": evidence.xid_events(collected.facts.get("kernel_log"), gpu),
            "findings_now": evidence.timeline([("report-now.json", collected.report.to_dict())], [gpu]),
            "findings_over_time": evidence.timeline(collected.kept, [gpu]),
            "figures": evidence.against_fleet([r for r in own if r["check"] in ACTIVE_FIGURE_CHECKS], fleet,
                                              gpu.get("uuid")),
            "figures_over_time": own}


def document(collected: Collected, gpus: list[dict[str, Any]], target: str | None, created: str) -> dict[str, Any]:
    facts = collected.report.facts
    nvml = collected.facts.get("nvml") or {}
    return {
        "format": FORMAT, "created": created, "gpucheck_version": __version__, "host": collected.report.host,
        "target": target or "node", "profile": collected.report.profile,
        "verdict_now": {"exit_code": collected.report.exit_code, "counts": collected.report.counts()},
        "versions": {"driver": facts.get("driver_version"), "cuda_driver": facts.get("cuda_driver_version"),
                     "nvml": nvml.get("nvml_version"), "dcgm": first_line(collected.dcgmi),
                     "libraries": facts.get("libraries"), "gpucheck": __version__},
        "gpus": [gpu_section(collected, gpu) for gpu in gpus],
        "node_findings_over_time": evidence.timeline(collected.kept, None) if target is None else [],
        "nvidia_smi_q": command(collected.nvidia_smi, "nvidia-smi-q.txt"),
        "dcgmi_version": command(collected.dcgmi, "dcgm.txt"),
        "nvidia_bug_report": command(collected.bug_report, "nvidia-bug-report.log.gz" if
                                     collected.bug_report_file else None),
        "kept_reports": [name for name, _ in collected.kept],
        "missing": collected.missing, "references": REFERENCES,
    }


def first_line(done: Any) -> str | None:
    lines = done.stdout.strip().splitlines() if done is not None and done.ok else []
    return next((line.strip() for line in lines if "version" in line.lower()), lines[0] if lines else None)


def dcgm_text(collected: Collected) -> str:
    """`dcgmi -v` as it printed it, then every DCGM diagnostic (gpu.dcgm) the kept reports hold, as they hold it."""
    parts = [f"$ dcgmi -v\n{collected.dcgmi.output}"] if collected.dcgmi is not None else []
    for name, report in collected.kept:
        for result in report.get("results") or []:
            if isinstance(result, dict) and result.get("check") == "gpu.dcgm" and result.get("status") != "skip":
                parts.append(f"# {name} ({report.get('started')}): {str(result.get('status')).upper()} - "
                             f"{result.get('reason') or ''}\n{result.get('evidence') or ''}")
    return "\n\n".join(parts) + ("\n" if parts else "")


def referenced(doc: dict[str, Any]) -> set[str]:
    """The kept reports a finding or a burn-in figure of the archive comes from: they travel with it."""
    rows = [*doc["node_findings_over_time"]]
    for gpu in doc["gpus"]:
        rows += gpu["findings_over_time"] + [r for r in gpu["figures_over_time"] if r["check"] in ACTIVE_FIGURE_CHECKS]
    return {row["report"] for row in rows}


def members(collected: Collected, gpus: list[dict[str, Any]], target: str | None,
            now: dt.datetime | None = None) -> list[tuple[str, bytes]]:
    """(path in the archive, content) of every file, rma.json first."""
    created = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = document(collected, gpus, target, created)
    smi = collected.nvidia_smi
    files = [("rma.json", json.dumps(doc, indent=2, default=str) + "\n"), ("SUMMARY.txt", summary(doc)),
             ("nvidia-smi-q.txt", smi.stdout if smi.ok else smi.output),
             ("kernel-xid.txt", evidence.xid_lines(collected.facts.get("kernel_log"), gpus)),
             ("report-now.json", json.dumps(collected.report.to_dict(), indent=2, default=str) + "\n")]
    wanted = referenced(doc)
    files += [(f"reports/{name}", json.dumps(report, indent=2) + "\n") for name, report in collected.kept
              if name in wanted]
    if dcgm := dcgm_text(collected):
        files.append(("dcgm.txt", dcgm))
    encoded = [(name, text.encode("utf-8", errors="replace")) for name, text in files]
    if collected.bug_report_file is not None:
        encoded.append(("nvidia-bug-report.log.gz", collected.bug_report_file))
    return encoded
