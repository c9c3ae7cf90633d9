"""gpu.p2p_bandwidth: every ordered pair judged against NVLink (through NVSwitch) or the PCIe link, the GPU in most
slow pairs named; the collector runs one stand-in program with every GPU visible in NVML index order."""

from __future__ import annotations

import json
import textwrap

import pytest

from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.burnin import checks as burnin
from gpucheck.node.burnin import p2p
from gpucheck.profiles import load

DGX = load("dgx-h100")  # NVSwitch: every pair gets all 18 links
GENERIC = load("generic")


def gpus(count: int, nvlink: bool = True, name: str = "NVIDIA H100 80GB HBM3") -> list[dict]:
    return [{"index": i, "lost": False, "errors": {}, "name": name, "uuid": f"GPU-{i:08d}-aaaa",
             "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "pcie": {"gen": 5, "gen_max": 5, "width": 16,
                                                                    "width_max": 16},
             "nvlink": {"links": 18, "up": 18, "down": []} if nvlink else None} for i in range(count)]


def facts_of(nvml_gpus: list[dict], rates: dict[tuple[int, int], float] | None = None, default: float = 380.0,
             **p2p_facts) -> dict:
    """Collected facts: NVML's GPUs, their SKU entries, and a p2p result with every ordered pair at `default`
    GB/s unless `rates` says otherwise."""
    ctx = Context(facts={"nvml": {"gpus": nvml_gpus}})
    n = len(nvml_gpus)
    pairs = [{"src": s, "dst": d, "GBps": (rates or {}).get((s, d), default), "peer_access": True}
             for s in range(n) for d in range(n) if s != d]
    facts = {"gpus": [f"GPU{g['index']}" for g in nvml_gpus], "not_placed": [], "unavailable": None,
             "result": {"event": "result", "test": "p2p", "error": None, "fault": None, "pairs": pairs},
             "not_finished": None, "stderr_tail": "", **p2p_facts}
    return {"nvml": ctx.facts["nvml"], "sku": burnin.collect_sku(ctx), "p2p": facts}


def test_nvswitch_pairs_at_the_h100s_rate_pass():
    result = p2p.p2p_bandwidth(facts_of(gpus(8)), DGX)
    assert result.status == Status.PASS, result.reason
    assert result.measured["GPU0"]["to_GPU7_GBps"] == 380.0 and len(result.measured["GPU3"]) == 7
    assert result.expected["to_GPU1_GBps"] == ">= 225 (0.5 x NVLink 18 x 25 GB/s)"
    assert "every one of 56 ordered pairs" in result.reason


def test_the_gpu_in_most_slow_pairs_is_named():
    slow = {(s, d): 95.0 for s in range(8) for d in range(8) if s != d and 3 in (s, d)}
    result = p2p.p2p_bandwidth(facts_of(gpus(8), slow), DGX)
    assert result.status == Status.FAIL
    assert result.reason.startswith("GPU3 is in 14 of the 14 slow pairs: the likely cause; 14 of 56 pairs slow")
    assert "GPU3 -> GPU0 95 GB/s (< 225)" in result.reason and "and 8 more" in result.reason
    assert result.remediation


def test_one_slow_pair_names_both_gpus():
    result = p2p.p2p_bandwidth(facts_of(gpus(4), {(1, 2): 40.0}), DGX)
    assert result.status == Status.FAIL and "GPU1, GPU2 are each in 1 of the 1 slow pairs" in result.reason


def test_without_nvlink_the_pcie_rate_is_the_basis():
    pcie = gpus(2, nvlink=False)
    passing = p2p.p2p_bandwidth(facts_of(pcie, default=40.0), GENERIC)
    assert passing.status == Status.PASS and passing.expected["to_GPU1_GBps"] == ">= 31.5 (0.5 x PCIe 63 GB/s)"
    failing = p2p.p2p_bandwidth(facts_of(pcie, {(0, 1): 12.0}, default=40.0), GENERIC)
    assert failing.status == Status.FAIL and "GPU0 -> GPU1 12 GB/s (< 31.5)" in failing.reason


def test_a_mesh_without_nvswitch_is_judged_against_one_link():
    v100 = gpus(2, name="Tesla V100-SXM2-16GB")
    for gpu in v100:
        gpu["nvlink"] = {"links": 6, "up": 6, "down": []}
    result = p2p.p2p_bandwidth(facts_of(v100, default=22.0), load("dgx1-v100"))
    assert result.status == Status.PASS and "one NVLink link 25 GB/s" in result.expected["to_GPU1_GBps"]


def test_a_pair_not_measured_is_an_error_and_no_pair_passes_unjudged():
    facts = facts_of(gpus(2))
    facts["p2p"]["result"]["pairs"][0].update(GBps=None, error="cudaErrorPeerAccessUnsupported")
    result = p2p.p2p_bandwidth(facts, DGX)
    assert result.status == Status.ERROR
    assert "GPU0 -> GPU1 not measured: cudaErrorPeerAccessUnsupported" in result.reason


@pytest.mark.parametrize("p2p_facts,status,words", [
    ({"skipped": "one GPU: no peer to copy to"}, Status.SKIP, "one GPU: no peer to copy to"),
    ({"unavailable": "CuPy is not installed: install gpucheck's gpu extra", "result": None}, Status.ERROR,
     "CuPy is not installed"),
    ({"result": None, "not_finished": "not finished: killed at --bench-timeout (600 s) during p2p"}, Status.ERROR,
     "killed at --bench-timeout (600 s)"),
])
def test_a_program_that_gave_no_pairs(p2p_facts, status, words):
    result = p2p.p2p_bandwidth(facts_of(gpus(2), **p2p_facts), DGX)
    assert result.status == status and words in result.reason


def test_a_fault_during_the_copies_fails():
    facts = facts_of(gpus(2))
    facts["p2p"]["result"]["fault"] = "cudaErrorECCUncorrectable: uncorrectable ECC error encountered"
    result = p2p.p2p_bandwidth(facts, DGX)
    assert result.status == Status.FAIL and "p2p failed: cudaErrorECCUncorrectable" in result.reason


def test_the_collector_shows_every_gpu_in_nvml_index_order(tmp_path, monkeypatch):
    (tmp_path / "standin_p2p.py").write_text(textwrap.dedent("""
        import json, os, sys
        seen = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        print("GPUCHECK_GPUWORK " + json.dumps({"event": "begin"}))
        pairs = [{"src": s, "dst": d, "GBps": 100.0 + s, "peer_access": True, "uuid": seen[s]}
                 for s in range(len(seen)) for d in range(len(seen)) if s != d]
        print("GPUCHECK_GPUWORK " + json.dumps({"event": "result", "test": "p2p", "error": None, "fault": None,
                                                "pairs": pairs, "order": os.environ["CUDA_DEVICE_ORDER"]}))
        print("GPUCHECK_GPUWORK " + json.dumps({"event": "end"}))
        """))
    monkeypatch.setattr(p2p, "PROGRAM", "standin_p2p")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    nvml = gpus(3)
    nvml[1].update(lost=True)
    ctx = Context(bench_timeout=30.0, facts={"nvml": {"gpus": nvml}})
    facts = p2p.collect(ctx)
    assert facts["gpus"] == ["GPU0", "GPU2"] and facts["result"]["order"] == "PCI_BUS_ID"
    assert [pair["uuid"] for pair in facts["result"]["pairs"]] == [nvml[0]["uuid"], nvml[2]["uuid"]]
    assert json.loads(json.dumps(facts))["not_finished"] is None
    one = p2p.collect(Context(facts={"nvml": {"gpus": gpus(1)}}))
    assert one["skipped"] == "one GPU: no peer to copy to"
