"""The cluster report's GPU burn-in section: every node's facts.burnin (docs/burnin.md) per node and GPU,
against the fleet median of the same SKU and the figure the node judged it against, stragglers and memory
errors named, in report.md, report.html, report.json and the terminal summary. The document is the one
`gpucheck cluster` writes (handoff.document through ReportWriter); the figures are the H100 SXM5's measured
ones (tests/fixtures/measured/h100-sxm-80gb-driver580: 777 bf16, 740 fp16, 3026 copy, 54.1/53.9 host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpucheck.cluster import handoff
from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.model import Report, Result, Status
from gpucheck.report.cluster.burnin import burnin_section
from gpucheck.report.cluster.html_parts import TINTS
from gpucheck.report.cluster.summary import render_summary
from gpucheck.report.cluster.writer import ReportWriter

H100 = "h100-sxm5-80gb"
A100 = "a100-sxm4-80gb"
H100_GPU = {"sku": H100, "gemm_TFLOPS": {"bf16": 777.1, "fp16": 740.2}, "copy_GBps": 3026.0,
            "stream_add_GBps": 2901.0, "h2d_GBps": 54.1, "d2h_GBps": 53.9, "memtest_bad_words": 0,
            "memtest_coverage": 0.91, "burn_TFLOPS_median": 680.0, "burn_temperature_C_max": 80,
            "sdc_checksum": "3fa2c0d1e5b6a7f8"}
EXPECTED = {
    H100: {"gpu.gemm": {"bf16_TFLOPS": ">= 593 (0.6 x 989)", "fp16_TFLOPS": ">= 593 (0.6 x 989)"},
           "gpu.memory_bandwidth": {"copy_GBps": ">= 2345 (0.7 x 3350)"},
           "gpu.host_bandwidth": {"h2d_GBps": ">= 37.8 (0.6 x 63)", "d2h_GBps": ">= 37.8 (0.6 x 63)"}},
    A100: {"gpu.gemm": {"bf16_TFLOPS": ">= 187 (0.6 x 312)", "fp16_TFLOPS": ">= 187 (0.6 x 312)"}},
}


def gpu(sku: str = H100, **changes: Any) -> dict[str, Any]:
    entry = json.loads(json.dumps(H100_GPU))
    entry["sku"] = sku
    for key, value in changes.items():
        if key in ("bf16", "fp16"):
            entry["gemm_TFLOPS"][key] = value
        else:
            entry[key] = value
    return entry


def node_report(host: str, gpus: dict[str, dict[str, Any]] | None, sku: str = H100) -> dict[str, Any]:
    """A node report shaped by the agent's own model; `gpus` None: a run without the burn-in."""
    results = [Result("gpu.count", Status.PASS, 2, 2, "2 GPUs")]
    facts: dict[str, Any] = {"profile": "dgx-h100", "driver_version": "580.159.04", "gpu_count": 2,
                             "gpu_models": ["NVIDIA H100 80GB HBM3"]}
    if gpus is not None:
        facts["burnin"] = {"gpus": gpus, "sdc": None}
        for check, expected in EXPECTED.get(sku, {}).items():
            measured = {g: {f: e.get("gemm_TFLOPS", {}).get(f.split("_")[0], e.get(f)) for f in expected}
                        for g, e in gpus.items()}
            results.append(Result(check, Status.PASS, measured, expected, "fast enough"))
    return Report(host, "dgx-h100", results, facts=facts, started="2026-01-01T00:00:00+00:00", duration_s=60.0,
                  version="0.1.0").to_dict()


def fleet_doc(options: Options | None = None, **overrides: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """node01..node03 two H100s each, node03 GPU1 slow at bf16 (612 = 79% of 777.1), node02 GPU0 with 12 bad
    words, node04 without the burn-in, node05 two A100s (its own SKU: slower, and no straggler for it)."""
    nodes: dict[str, dict[str, dict[str, Any]] | None] = {
        "node01": {"GPU0": gpu(), "GPU1": gpu()},
        "node02": {"GPU0": gpu(memtest_bad_words=12), "GPU1": gpu()},
        "node03": {"GPU0": gpu(), "GPU1": gpu(bf16=612.0)},
        "node04": None,
        "node05": {"GPU0": gpu(A100, bf16=250.0, fp16=245.0), "GPU1": gpu(A100, bf16=251.0, fp16=246.0)},
    }
    nodes.update(overrides)
    hosts = [Host(name, "127.0.0.1", 2200 + i, "root", None, (), True) for i, name in enumerate(nodes, 1)]
    ctx = ClusterContext(options or Options(full=True), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))
    for name, gpus in nodes.items():
        sku = next(iter(gpus.values()))["sku"] if gpus else H100
        report = node_report(name, gpus, sku)
        ctx.nodes[name] = NodeOutcome(name, Status.PASS, "all checks pass", "report", 60.0, 0, report)
    return handoff.document(ctx, "2026-01-01T00:00:00+00:00", 70.0, ["gpucheck", "cluster", "--full"], True)


def written(tmp_path: Path, doc: dict[str, Any]) -> dict[str, str]:
    ReportWriter(tmp_path).write(doc)
    return {name: (tmp_path / name).read_text() for name in ("report.md", "report.html", "report.json")}


def test_markdown_names_the_straggler_against_its_sku_s_fleet_median(tmp_path: Path) -> None:
    md = written(tmp_path, fleet_doc())["report.md"]
    assert "## GPU burn-in" in md
    assert "8 GPU(s) on 4 node(s)" in md and "A straggler is below 0.9 x its SKU's fleet median" in md
    stragglers = md.split("### Stragglers", 1)[1].split("###", 1)[0]
    assert stragglers.strip().splitlines() == [
        "- node03 GPU1 (h100-sxm5-80gb): gemm bf16 TFLOP/s 612 = 79% of the fleet median 777.1"]
    assert "- node02 GPU0: 12 bad word(s)" in md.split("### Memory errors (memtest)", 1)[1]


def test_markdown_table_per_node_and_gpu_with_both_shares(tmp_path: Path) -> None:
    md = written(tmp_path, fleet_doc())["report.md"]
    assert ("| node | GPU | SKU | gemm bf16 TFLOP/s | gemm fp16 TFLOP/s | copy GB/s | h2d GB/s | d2h GB/s | "
            "burn median TFLOP/s | memtest bad words |") in md
    # 740.2 / 989 = 75%, 3026 / 3350 = 90%, 54.1 / 63 = 86%; the burn has no SKU figure in its result
    assert ("| node01 | GPU0 | h100-sxm5-80gb | 777.1 (100% / 79%) | 740.2 (100% / 75%) | 3026 (100% / 90%) | "
            "54.1 (100% / 86%) | 53.9 (100% / 86%) | 680 (100% / -) | 0 |") in md
    assert "| node03 | GPU1 | h100-sxm5-80gb | **612 (79% / 62%)** |" in md
    assert "| node02 | GPU0 | h100-sxm5-80gb | 777.1 (100% / 79%) |" in md and "| 12 |" in md
    # the A100s are compared with each other: 250 of their median 250.5, 80% of their data sheet's 312
    assert "| node05 | GPU0 | a100-sxm4-80gb | 250 (100% / 80%) | 245 (100% / 79%) |" in md
    # the fleet per SKU: median, spread, the SKU figure and the median's share of it
    assert "| h100-sxm5-80gb | gemm bf16 TFLOP/s | 6 | 777.1 | 612 | 777.1 | 989 (79%) |" in md
    assert "| a100-sxm4-80gb | gemm bf16 TFLOP/s | 2 | 250.5 | 250 | 251 | 312 (80%) |" in md
    assert "| a100-sxm4-80gb | copy GB/s | 2 | 3026 | 3026 | 3026 | - |" in md  # its node judged no copy
    assert "| h100-sxm5-80gb | memtest bad words | 6 | - | 0 | 12 | - |" in md
    assert "No burn-in figures from node04 (the burn-in runs with gpucheck cluster --full)." in md


def test_the_straggler_fraction_is_the_run_s(tmp_path: Path) -> None:
    md = written(tmp_path, fleet_doc(Options(full=True, straggler_fraction=0.75)))["report.md"]
    assert "None: every GPU is within 0.75 x its SKU's fleet median." in md
    assert "**612" not in md and "612 (79% / 62%)" in md


def test_html_section_names_and_tints_the_straggler(tmp_path: Path) -> None:
    page = written(tmp_path, fleet_doc())["report.html"]
    assert "<h2>GPU burn-in</h2>" in page
    assert ("<li><b>node03</b> GPU1 (h100-sxm5-80gb): gemm bf16 TFLOP/s 612 = 79% of the fleet median 777.1</li>"
            in page)
    assert f'<td style="background:{TINTS["warn"]}">612<div class="muted">79% / 62%</div></td>' in page
    assert '<td>777.1<div class="muted">100% / 79%</div></td>' in page
    assert f'<td style="background:{TINTS["fail"]}">12</td>' in page
    assert "<li><b>node02</b> GPU0: 12 bad word(s)</li>" in page
    assert page.index("<h2>GPU burn-in</h2>") < page.index("<h2>Nodes</h2>")


def test_odd_text_from_a_node_is_escaped(tmp_path: Path) -> None:
    odd = {"GPU0": gpu("<b>x</b>|y"), "GPU1": gpu("<b>x</b>|y")}
    files = written(tmp_path, fleet_doc(node05=odd))
    assert "<b>x</b>" not in files["report.html"] and "&lt;b&gt;x&lt;/b&gt;|y" in files["report.html"]
    assert "| <b>x</b>\\|y |" in files["report.md"]


def test_json_carries_the_section(tmp_path: Path) -> None:
    doc = json.loads(written(tmp_path, fleet_doc())["report.json"])
    section = doc["burnin"]
    assert section["fraction"] == 0.9 and section["without"] == ["node04"]
    assert [(s["node"], s["gpu"], s["figure"]) for s in section["stragglers"]] == [("node03", "GPU1",
                                                                                     "gemm_bf16_TFLOPS")]
    assert section["stragglers"][0]["of_median"] == pytest.approx(612 / 777.1)
    assert section["memory_errors"] == [{"node": "node02", "gpu": "GPU0", "bad_words": 12}]
    cell = next(g for g in section["gpus"] if g["node"] == "node01" and g["gpu"] == "GPU0")["figures"]["copy_GBps"]
    assert cell["reference"] == 3350 and cell["of_reference"] == pytest.approx(3026 / 3350)


def test_summary_line_names_stragglers_and_memory_errors() -> None:
    summary = render_summary(fleet_doc(), "out")
    assert ("burn-in: 8 GPU(s) on 4 node(s); 1 straggler(s): node03 GPU1 gemm bf16 TFLOP/s 79% of median; "
            "1 memory error(s): node02 GPU0 12 bad word(s)\n") in summary
    calm = fleet_doc(node02={"GPU0": gpu(), "GPU1": gpu()}, node03={"GPU0": gpu(), "GPU1": gpu()})
    assert "burn-in: 8 GPU(s) on 4 node(s), no straggler, no memory error\n" in render_summary(calm, "out")


def test_no_section_when_no_node_ran_the_burn_in(tmp_path: Path) -> None:
    doc = fleet_doc(node01=None, node02=None, node03=None, node05=None)
    assert burnin_section(doc) is None
    files = written(tmp_path, doc)
    assert "burn-in" not in files["report.md"].lower() and "burn-in" not in files["report.html"].lower()
    assert "burnin" not in json.loads(files["report.json"]) and "burn-in" not in render_summary(doc, "out")


def test_a_gpu_alone_in_its_sku_and_figures_that_are_not_numbers() -> None:
    lone = {"GPU0": gpu("l4", bf16=float("nan"), copy_GBps="fast", h2d_GBps=True)}
    section = burnin_section(fleet_doc(node05=lone))
    row = next(g for g in section["gpus"] if g["node"] == "node05")
    assert "gemm_bf16_TFLOPS" not in row["figures"] and "copy_GBps" not in row["figures"]
    assert "h2d_GBps" not in row["figures"]
    assert row["figures"]["d2h_GBps"]["of_median"] == 1.0 and not row["figures"]["d2h_GBps"]["straggler"]


@pytest.mark.parametrize("odd", [
    {"burnin": {"gpus": ["GPU0"]}},
    {"burnin": {"gpus": {"GPU0": {"sku": 7, "gemm_TFLOPS": [1, 2], "copy_GBps": "nan"}}}},
    {"burnin": {"gpus": {"GPU0": {"sku": None, "gemm_TFLOPS": {"bf16": 700.0}}}}, "gpu_models": "x"},
    {"burnin": "yes"},
])
def test_odd_facts_never_break_a_rendering(tmp_path: Path, odd: dict[str, Any]) -> None:
    doc = fleet_doc()
    report = doc["nodes"]["node04"]["report"]
    report["facts"].update(odd)
    report["results"] = 5
    files = written(tmp_path, doc)
    assert "## GPU burn-in" in files["report.md"] and "burn-in:" in render_summary(doc, "out")
    assert "<h2>GPU burn-in</h2>" in files["report.html"]


@pytest.mark.parametrize(("text", "reference"), [
    (">= 593 (0.6 x 989)", 989.0), (">= 37.8 (0.6 x 63)", 63.0), (">= 2345 (0.7 \u00d7 3350)", 3350.0),
    (">= 400 GB/s", None), ("(. x .)", None), ("(0.6 x 1e999)", None), (None, None),
])
def test_the_sku_figure_is_read_from_the_expected_text(text: str | None, reference: float | None) -> None:
    from gpucheck.report.cluster.burnin import reference as read

    report = {"results": [{"check": "gpu.gemm", "expected": {"bf16_TFLOPS": text}}]}
    assert read(report, "gpu.gemm", "bf16_TFLOPS", "GPU0") == reference
    per_gpu = {"results": [{"check": "gpu.gemm", "expected": {"GPU0": {"bf16_TFLOPS": text}}}]}
    assert read(per_gpu, "gpu.gemm", "bf16_TFLOPS", "GPU0") == reference
