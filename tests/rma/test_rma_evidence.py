"""gpucheck rma's pieces from known inputs: which GPU a name means, which Xid lines and findings are the GPU's
(followed by UUID when its index changed), and its figures against the fleet."""

from __future__ import annotations

import pytest

from gpucheck.history.gpu_names import bus_key
from gpucheck.rma import evidence
from gpucheck.rma.target import TargetError, choose

GPUS = [{"index": i, "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "pci_bus_id": bus,
         "serial": f"165442303{i:04d}", "name": "NVIDIA H100 80GB HBM3"}
        for i, bus in enumerate(["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"])]
GPU3 = GPUS[3]


@pytest.mark.parametrize("target", ["3", "GPU-00000003-AAAA-BBBB-CCCC-DDDDDDDDDDDD", "00000000:5D:00.0",
                                    "0000:5d:00.0", "5d:00.0", "0000:5d:00", "1654423030003"])
def test_a_gpu_is_named_by_index_uuid_any_bus_spelling_or_serial(target):
    assert choose(GPUS, target) == [GPU3]


def test_no_target_is_every_gpu_and_an_unknown_one_names_those_there_are():
    assert choose(GPUS, None) == GPUS
    with pytest.raises(TargetError, match=r"no GPU of this node is '7'.*GPU3 \(GPU-00000003-.*00000000:5D:00.0\)"):
        choose(GPUS, "7")
    with pytest.raises(TargetError, match="NVML names no GPU on this node, so '3' cannot be identified"):
        choose([], "3")
    assert choose([], None) == []  # the node's evidence without any GPU's identity


def test_bus_keys_ignore_case_domain_width_and_function():
    assert bus_key("00000000:5D:00.0") == bus_key("0000:5d:00") == (0, 0x5D, 0)
    assert bus_key("not a bus") is None and bus_key(None) is None


KERNEL_LOG = {
    "events": [{"xid": 48, "pci": "0000:5d:00", "message": "DBE"}, {"xid": 13, "pci": "0000:18:00", "message": "x"}],
    "evidence": "[ 100.0] NVRM: Xid (PCI:0000:5d:00): 48, DBE\n[ 101.0] NVRM: Xid (PCI:0000:18:00): 13, x\n"
                "[ 102.0] NVRM: GPU at PCI:0000:5d:00: GPU-00000003-aaaa-bbbb-cccc-dddddddddddd\n",
}


def test_only_the_gpus_own_xid_events_and_lines_are_its_evidence():
    assert [e["xid"] for e in evidence.xid_events(KERNEL_LOG, GPU3)] == [48]
    lines = evidence.xid_lines(KERNEL_LOG, [GPU3]).splitlines()
    assert len(lines) == 2 and all("5d:00" in line for line in lines)


def report(started: str, results: list[dict], gpus: list[dict] | None = None) -> dict:
    return {"host": "node04", "started": started, "facts": {"gpus": gpus if gpus is not None else GPUS},
            "results": results}


ECC = {"check": "gpu.ecc_errors", "status": "fail", "reason": "GPU3 (00000000:5D:00.0): 2 volatile uncorrected",
       "measured": {"GPU0": {"volatile_uncorrected": 0}, "GPU3": {"volatile_uncorrected": 2}},
       "expected": {"volatile_uncorrected_max": 0}}
OTHER = {"check": "gpu.temperature", "status": "warn", "reason": "GPU13 at 88 C", "measured": {"GPU13": 88}}


def test_findings_are_the_gpus_own_and_cut_to_its_values():
    rows = evidence.timeline([("a.json", report("2026-11-01T00:00:00Z", [ECC, OTHER]))], [GPU3])
    assert [(r["check"], r["status"], r["measured"], r["report"]) for r in rows] == [
        ("gpu.ecc_errors", "fail", {"volatile_uncorrected": 2}, "a.json")]
    assert evidence.timeline([("a.json", report("2026-11-01T00:00:00Z", [ECC]))], [GPUS[1]]) == []


def test_a_gpu_is_followed_by_its_uuid_when_its_index_changed():
    moved = [dict(g, index=(5 if g is GPU3 else g["index"])) for g in GPUS]  # GPU3 was GPU5 back then
    then = {**ECC, "reason": "GPU5 (00000000:5D:00.0): 2 volatile uncorrected",
            "measured": {"GPU5": {"volatile_uncorrected": 2}}}
    rows = evidence.timeline([("old.json", report("2026-10-01T00:00:00Z", [then], moved))], [GPU3])
    assert [r["measured"] for r in rows] == [{"volatile_uncorrected": 2}]


def gemm(value: float) -> dict:
    return {"check": "gpu.gemm", "status": "pass", "measured": {"GPU3": {"bf16_TFLOPS": value}, "GPU0": {
        "bf16_TFLOPS": 999.0}}, "expected": {"GPU3": {"bf16_TFLOPS_min": 600.0}}}


def test_figures_over_time_then_the_latest_against_the_fleet_median():
    kept = [("b.json", report("2026-11-02T00:00:00Z", [gemm(700.0)])),
            ("a.json", report("2026-11-01T00:00:00Z", [gemm(780.0)]))]
    own = evidence.figures(kept, GPU3)
    assert [(r["report"], r["value"], r["expected"]) for r in own] == [
        ("a.json", 780.0, {"bf16_TFLOPS_min": 600.0}), ("b.json", 700.0, {"bf16_TFLOPS_min": 600.0})]
    fleet = [{"uuid": "GPU-x", "check": "gpu.gemm", "figure": "bf16_TFLOPS", "value": 500.0, "started": "2026-01"},
             {"uuid": "GPU-x", "check": "gpu.gemm", "figure": "bf16_TFLOPS", "value": 790.0, "started": "2026-11"},
             {"uuid": "GPU-y", "check": "gpu.gemm", "figure": "bf16_TFLOPS", "value": 810.0, "started": "2026-11"},
             {"uuid": "GPU-z", "check": "gpu.gemm", "figure": "bf16_TFLOPS", "value": 800.0, "started": "2026-11"},
             {"uuid": GPU3["uuid"], "check": "gpu.gemm", "figure": "bf16_TFLOPS", "value": 1.0, "started": "2026"}]
    [row] = evidence.against_fleet(own, fleet, GPU3["uuid"])
    # each other GPU's latest (GPU-x's 790, not its old 500), never the GPU's own: median 800, 700 is -12.5 %
    assert (row["value"], row["fleet_gpus"], row["fleet_median"], row["vs_fleet_pct"]) == (700.0, 3, 800.0, -12.5)
