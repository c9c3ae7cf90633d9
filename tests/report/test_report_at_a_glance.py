"""The cluster report as a person reads it (issue: "a report a person can trust at a glance"), checked in the
rendered HTML, Markdown and terminal text, not in the JSON: the pair-bandwidth heat map (each cell's value, slow
pairs and the blamed node marked, nodes left out named), units on every measured figure, each action said once,
"1 node" not "1 nodes", CPU ranks said as such and never set beside the published GPU figures, the GPU band
and a collapse marked on GPU runs.

The inputs are the shapes and figures of a real `make demo` run (lab, 2026-11-23: TCP pairs 45.063 / 41.737 /
42.312 Gb/s, tf-horovod on CPU ranks 39436.706 -> 3842.185 samples/s, node04 failing gpu.ecc_errors, a node
without the NVIDIA driver failing 17 checks with one remediation); the GPU scaling points are made up."""

from __future__ import annotations

import copy
import html
import re
from typing import Any

import pytest

from gpucheck.model import Report, Result, Status
from gpucheck.report.cluster.html import render_html
from gpucheck.report.cluster.html_charts import pair_heatmap_svg, scaling_chart_svg
from gpucheck.report.cluster.markdown import render_markdown
from gpucheck.report.cluster.summary import render_summary
from gpucheck.report.node import render
from gpucheck.report.values import show
from gpucheck.report.views import for_person

DRIVER = "install the NVIDIA driver (site.yml --tags gpu)"
NVML_CHECKS = ["gpu.count", "gpu.model", "gpu.compute_capability", "gpu.driver", "gpu.memory", "gpu.persistence",
               "gpu.mig", "gpu.ecc_mode", "gpu.ecc_errors", "gpu.retired_pages", "gpu.row_remap", "gpu.clocks",
               "gpu.temperature", "gpu.power", "gpu.pcie", "gpu.nvlink", "gpu.nic_affinity"]
NO_DRIVER = "NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed"
# gpu.xid's measured as the lab's node01 reported it
XID = {"counts": {}, "fallen_off_bus": [], "window": {"since": "since boot", "start_s": None, "source": "dmesg",
                                                      "uptime_s": 25125.54}}
NETWORK_FIX = "check the node's link: cable/transceiver, port speed and errors (ethtool -S, ibstat, perfquery)"


def node_entry(host: str, status: str = "pass", reason: str = "all 33 checks pass or skip",
               results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    report = {"host": host, "profile": "lab", "counts": {}, "facts": {"profile": "lab"},
              "results": results or [{"check": "gpu.xid", "status": "pass", "measured": XID,
                                      "expected": "no fatal Xid", "reason": "no Xid", "remediation": ""}]}
    return {"host": host, "status": status, "reason": reason, "address": f"{host}:22", "wall_s": 30.0,
            "report": report}


def no_driver_results() -> list[dict[str, Any]]:
    return [{"check": c, "status": "fail", "measured": None, "expected": None, "reason": NO_DRIVER,
             "remediation": DRIVER} for c in NVML_CHECKS]


def demo_doc() -> dict[str, Any]:
    """The lab's 4-node CPU run: node04 failed its node checks and was left out of the network stage."""
    nodes = {h: node_entry(h) for h in ("node01", "node02", "node03")}
    nodes["node04"] = node_entry("node04", "fail", "1 fail: gpu.ecc_errors", [
        {"check": "gpu.ecc_errors", "status": "fail", "measured": {"GPU3": {"volatile_uncorrected": 2}},
         "expected": {"volatile_uncorrected_max": 0}, "reason": "GPU3: 2 volatile uncorrected ECC error(s)",
         "remediation": "drain the node and reset the GPU"}])
    network = {"check": "cluster.network", "status": "pass", "reason": "every pair fast enough",
               "measured": {"method": "tcp", "pairs": 3, "median_Gbps": 42.312, "min_Gbps": 41.737, "bad_nodes": [],
                            "slow_pairs": [], "inconclusive": {}},
               "expected": ">= 22.5 Gb/s", "remediation": "", "nodes": {}}
    straggler = {"check": "cluster.straggler.net_Gbps", "status": "pass", "measured": {"node02": 43.688},
                 "expected": ">= 39.06", "reason": "all 3 nodes within 0.9 of the median", "nodes": {}}
    pairs = [{"a": a, "b": b, "value": v, "unit": "Gb/s", "method": "tcp", "status": "pass"}
             for a, b, v in (("node02", "node03", 45.063), ("node01", "node03", 41.737), ("node01", "node02", 42.312))]
    scaling = [{"label": "tf-horovod (CPU ranks)", "gpus": 1, "throughput": 39436.706, "efficiency": 1.0,
                "unit": "samples/s", "run": "1 rank"},
               {"label": "tf-horovod (CPU ranks)", "gpus": 3, "throughput": 3842.185, "efficiency": 0.0325,
                "speedup": 0.0974, "unit": "samples/s", "run": "3 nodes"}]
    return {"exit_code": 2, "complete": True, "started": "2026-11-23T15:21:15+00:00", "duration_s": 76.9,
            "inventory": {"sources": ["hosts.yml"], "pattern": "gpu_nodes"},
            "counts": {"nodes": {"pass": 3, "warn": 0, "fail": 1, "skip": 0, "error": 0}, "cluster": {"pass": 2}},
            "nodes": nodes, "cluster": [network, straggler], "pairs": pairs, "scaling": scaling,
            "drain": [{"node": "node04", "reason": "gpucheck: gpu.ecc_errors"}]}


def gpu_doc() -> dict[str, Any]:
    """Five nodes on GPUs: node03 slow with every partner (blamed), node05 without a driver, node06 unreachable."""
    doc = demo_doc()
    doc["nodes"]["node05"] = node_entry("node05", "fail", "17 fail: gpu.count, gpu.model, ...", no_driver_results())
    doc["nodes"]["node06"] = {"host": "node06", "status": "fail", "reason": "unreachable: connection timed out",
                              "address": "node06:22", "wall_s": 10.0}
    doc["nodes"]["node07"] = node_entry("node07")
    doc["pairs"] = [{"a": a, "b": b, "value": v, "unit": "Gb/s", "status": "fail" if "node03" in (a, b) else "pass"}
                    for a, b, v in (("node01", "node02", 187.5), ("node01", "node03", 41.2), ("node02", "node03", 39.0),
                                    ("node01", "node07", 184.0), ("node02", "node07", 192.0),
                                    ("node03", "node07", 43.0))]
    network = doc["cluster"][0]
    network.update(status="fail", remediation=NETWORK_FIX,
                   nodes={"node03": "slow with every known-good partner: node01 41.2 Gb/s, node02 39 Gb/s"})
    doc["scaling"] = [{"label": "torch", "gpus": g, "throughput": 3000.0 * g * e, "efficiency": e, "speedup": g * e,
                       "unit": "samples/s"} for g, e in ((1, 1.0), (8, 0.93), (32, 0.41))]
    return doc


# ---------------------------------------------------------------- the heat map

def test_heat_map_prints_each_cells_value_and_marks_slow_pairs_and_the_blamed_node() -> None:
    page = render_html(gpu_doc())
    svg = page[page.index('aria-label="pair bandwidth matrix"'):page.index("</svg>", page.index("pair bandwidth"))]
    for value in ("187.5", "41.2", "39", "184", "192", "43"):  # every measured pair, in both of its cells
        assert svg.count(f">{value}</text>") == 2, value
    slow = re.findall(r'<rect [^>]*stroke-width="3"[^>]*><title>([^<]*)</title>', svg)
    assert sorted(slow) == sorted(f"{a} - {b}: {v} Gb/s (fail: slow)" for a, b, v in (
        ("node01", "node03", "41.2"), ("node03", "node01", "41.2"), ("node02", "node03", "39"),
        ("node03", "node02", "39"), ("node03", "node07", "43"), ("node07", "node03", "43")))
    assert re.search(r'<text [^>]*fill="#cf222e" font-weight="700">node03 — blamed</text>', svg)
    assert 'stroke="#cf222e" stroke-width="2.5"' in svg  # the blamed node's row and column framed
    assert "<b>Blamed</b>: node03 — slow with every known-good partner" in page
    assert "<b>Slow pairs</b>: node01-node03 41.2 Gb/s (fail), node02-node03 39 Gb/s (fail)" in page


def test_nodes_left_out_of_the_stage_are_drawn_and_named_not_missing() -> None:
    page = render_html(demo_doc())
    svg = page[page.index('aria-label="pair bandwidth matrix"'):]
    assert re.search(r'<text [^>]*font-style="italic">node04 — left out</text>', svg)
    assert "hatched: left out of the stage" in svg
    assert "<b>Left out of this stage</b>: node04 (its node checks: FAIL (1 fail: gpu.ecc_errors))" in page
    md = render_markdown(demo_doc())
    assert "| Gb/s | node01 | node02 | node03 | node04 (left out) |" in md
    assert "| node01 | · | 42.31 | 41.74 | — |" in md
    assert "| node04 (left out) | — | — | — | · |" in md
    assert "- Left out of this stage: node04 (its node checks: FAIL (1 fail: gpu.ecc_errors))" in md


def test_the_stages_own_word_on_a_node_left_out_wins() -> None:
    doc = demo_doc()
    doc["cluster"][0]["measured"]["left_out"] = {"node04": "failed its node checks"}
    assert "- Left out of this stage: node04 (failed its node checks)" in render_markdown(doc)
    assert "node04 (failed its node checks)" in render_html(doc)


def test_markdown_matrix_marks_slow_pairs_and_the_blamed_node() -> None:
    md = render_markdown(gpu_doc())
    header = next(line for line in md.splitlines() if line.startswith("| Gb/s |"))
    assert "node03 (blamed)" in header and "node05 (left out)" in header and "node06 (left out)" in header
    row = next(line for line in md.splitlines() if line.startswith("| node03 (blamed) |"))
    assert "**41.2 slow**" in row and "**39 slow**" in row and "**43 slow**" in row
    assert "- Blamed: node03 — slow with every known-good partner" in md


def test_a_large_cluster_lists_every_pair_with_its_unit_where_cells_are_too_small() -> None:
    doc = demo_doc()
    names = [f"n{i:03d}" for i in range(40)]
    doc["nodes"] = {n: node_entry(n) for n in names}
    doc["pairs"] = [{"a": names[i], "b": names[i + 1], "value": 100.0 + i, "unit": "Gb/s", "status": "pass"}
                    for i in range(39)]
    page = render_html(doc)
    assert "<summary>39 pairs measured</summary>" in page and "<td>138 Gb/s</td>" in page
    assert "| n000 | n001 | 100 Gb/s | pass |" in render_markdown(doc)  # a list, not a 40-column matrix
    svg = pair_heatmap_svg(doc["pairs"], names)
    assert svg.count("<rect ") == 2 * 39 and ">100</text>" not in svg  # cells under 30 px: no room for figures


# ---------------------------------------------------------------- units

def test_every_measured_figure_carries_the_unit_its_name_gives() -> None:
    assert show({"free_GiB": {"/": 72.5}}) == "free: / 72.5 GiB"
    assert show({"median_Gbps": 42.312, "draw_W": 100.89, "wall_s": 5.8, "samples_per_s": 39436.706}, 200) == (
        "median 42.31 Gb/s, draw 100.9 W, wall 5.8 s, 39437 samples/s")
    assert show({"GPU0": {"limit_W": 700.0}, "GPU1": {"limit_W": 700.0}}) == "all 2 GPUs: limit 700 W"
    assert show({"node02": 43.688}, unit="Gb/s") == "node02 43.69 Gb/s"
    assert "=" not in show({"/": 68.6, "GPU0": 1, "system": {"version": "13.0", "path": "/lib/x.so"}}, 200)


def test_empty_parts_say_nothing() -> None:
    text = show(XID, 200)
    assert "counts" not in text and "fallen off bus" not in text
    assert text == "window: since boot, start -, source dmesg, uptime 25126 s"  # its name said once
    assert show({"counts": {}}) == "-" and show([]) == "none"


def test_units_in_the_rendered_html_tables() -> None:
    page = render_html(demo_doc())
    items = [html.unescape(re.sub(r"<[^>]+>", "", i)).replace("\xa0", " ") for i in re.findall(r"<li>(.*?)</li>", page)]
    assert "42.31&nbsp;Gb/s" in page  # never a line break between a figure and its unit
    assert {"method: tcp", "pairs: 3", "median: 42.31 Gb/s", "min: 41.74 Gb/s"} <= set(items)  # cluster.network
    assert "node02: 43.69 Gb/s" in items  # the unit of cluster.straggler.net_Gbps, from its name
    assert "volatile uncorrected max: 0" in items and "/=" not in page


def test_node_text_has_units_and_no_empty_parts() -> None:
    results = [Result("host.disk", Status.PASS, {"free_GiB": {"/": 72.5}}, {"free_GiB_min": {"/": 5}}, "enough"),
               Result("gpu.xid", Status.PASS, XID, "no fatal Xid", "no Xid errors")]
    text = render(Report("node01", "lab", results), "text")
    assert "free: / 72.5 GiB" in text and "free min: / 5 GiB" in text
    assert "counts" not in text and "=" not in text.split("\n", 1)[1]
    xid_row = next(line for line in text.splitlines() if " gpu.xid " in line)
    assert "no Xid since boot (dmesg)" in xid_row and "uptime" not in xid_row and "start -" not in xid_row


def test_records_kept_for_tools_read_as_one_sentence() -> None:
    """gpu.xid's window and cluster.scaling's points: what they found, not their keys; report.json keeps them."""
    xids = {**XID, "counts": {"79": 2, "48": 1}, "fallen_off_bus": ["0000:18:00.0"],
            "window": {**XID["window"], "since": "in the last 24 h (since 1200 s after boot)"}, "older": {"events": 3}}
    assert for_person("gpu.xid", xids) == ("Xid 79 x2, Xid 48, 0000:18:00.0 fallen off the bus in the last 24 h "
                                           "(since 1200 s after boot) (dmesg); 3 older, not judged")
    points = {"points": [{"run": "1 rank", "ranks": 1, "throughput": 2018.4},
                         {"run": "3 nodes", "ranks": 3, "throughput": 2503.2, "speedup": 1.24, "efficiency": 0.413}],
              "unit": "samples/s", "device": "CPU", "references": []}
    said = for_person("cluster.scaling", points)
    assert said == ("1 rank 2018 samples/s; 3 ranks 2503 samples/s, speed-up 1.24x, efficiency 41% (CPU ranks)"), said
    doc = demo_doc()
    doc["cluster"].append({"check": "cluster.scaling", "status": "pass", "measured": points, "reason": "scaled"})
    page = html.unescape(render_html(doc)).replace("\xa0", " ")
    assert "3 ranks 2503 samples/s, speed-up 1.24x" in page and "throughput 2503" not in page
    smoke = {"1 rank": {"ranks": 1, "passed": True, "samples_per_s": 31189.234, "wall_s": 5.3, "hosts": ["node01"],
                        "weights": "0448d37d964bedc6ee147801d700e1da"},
             "3 nodes": {"ranks": 3, "passed": False, "samples_per_s": None, "wall_s": 12.2,
                         "hosts": ["node01", "node02", "node03"], "weights": None}}
    assert for_person("cluster.smoke.tf-horovod", smoke) == ("1 rank: 31189 samples/s in 5.3 s on node01; 3 ranks: "
                                                             "failed in 12.2 s on node01, node02, node03")
    allreduce = {"busbw_GBps": 0.225281, "algbw_GBps": 0.168961, "tool": "allreduce_bench", "backend": "mpi",
                 "bytes": 67108864, "ranks": 3, "nodes": 3}
    assert for_person("cluster.allreduce", allreduce) == ("bus 0.2253 GB/s (algorithm 0.169 GB/s), 64 MiB over 3 "
                                                          "ranks on 3 nodes (allreduce_bench, mpi)")
    assert for_person("gpu.temperature", {"GPU0": 30}) == {"GPU0": 30}  # any other check: as it is


# ---------------------------------------------------------------- each action once

def test_node_text_says_each_action_once() -> None:
    results = [Result(c, Status.FAIL, reason=NO_DRIVER, remediation=DRIVER) for c in NVML_CHECKS]
    results.append(Result("host.disk", Status.FAIL, reason="/ has 1 GiB free", remediation="free space"))
    text = render(Report("node05", "lab", results), "text")
    assert text.count(DRIVER) == 1
    assert ("What to do:\n  gpu.count, gpu.model, gpu.compute_capability and 14 more: " + DRIVER
            + "\n  host.disk: free space\n") in text


def test_cluster_html_and_markdown_say_each_action_once() -> None:
    doc = gpu_doc()
    doc["nodes"]["node08"] = node_entry("node08", "fail", "17 fail", no_driver_results())
    page, md = render_html(doc), render_markdown(doc)
    what = page[page.index("<h2>What to do</h2>"):page.index("<h2>Cluster checks</h2>")]
    assert what.count(DRIVER) == 1
    assert "node05: gpu.count, gpu.model, gpu.compute_capability and 14 more; node08: gpu.count" in what
    assert "cluster.network (node03)" in what and html.escape(NETWORK_FIX) in what
    assert page.count(DRIVER) == 3  # What to do, then once in each node's folded results
    assert md.count(DRIVER) == 1
    assert f"- **{DRIVER}** — node05: gpu.count, gpu.model, gpu.compute_capability and 14 more; node08:" in md


# ---------------------------------------------------------------- grammar

def test_one_node_is_one_node() -> None:
    doc = demo_doc()
    doc["nodes"] = {"node01": doc["nodes"]["node01"]}
    doc["counts"]["nodes"] = {"pass": 0, "fail": 1}
    page = render_html(doc)
    assert " · 1 node · " in page and "1 nodes" not in page
    assert ">1</b>node failed</div>" in page
    assert ">3</b>nodes passed</div>" in render_html(demo_doc())
    tips = re.findall(r"<title>([^<]*)</title></circle>", scaling_chart_svg(gpu_doc()["scaling"]))
    assert tips[0] == "torch: 1 GPU, 100%, 3000 samples/s" and tips[1].startswith("torch: 8 GPUs, 93%")


# ---------------------------------------------------------------- scaling: CPU ranks and GPUs

@pytest.mark.parametrize("cpu_by", ["label", "device"])
def test_cpu_ranks_are_said_plainly_and_never_set_beside_the_gpu_figures(cpu_by: str) -> None:
    doc = demo_doc()
    if cpu_by == "device":  # the smoke stage's device field, with a label that does not say it
        doc["scaling"] = [dict(p, label="tf-horovod", device="CPU") for p in doc["scaling"]]
    page, md = render_html(doc), render_markdown(doc)
    chart = page[page.index('aria-label="scaling efficiency chart"'):]
    chart = chart[:chart.index("</svg>")]
    assert "CPU ranks: not a GPU scaling measurement" in chart and ">CPU ranks</text>" in chart
    assert "published GPU scaling" not in chart and 'fill="#dafbe1"' not in chart and ">GPUs</text>" not in chart
    assert "It is not a GPU scaling measurement and is not set beside the published GPU figures" in page
    for text in (page, md):
        assert "90% at 512 GPUs" not in text and "Published GPU scaling" not in text and "%–" not in text
    assert "| job | CPU ranks | throughput | efficiency |" in md
    assert "| tf-horovod (CPU ranks) | 3 | 3842 samples/s | 3% |" in md
    assert "**CPU ranks, not GPUs.**" in md
    assert "CPU ranks: plumbing, not a GPU scaling measurement" in render_summary(doc, "out")


def test_a_gpu_run_shows_the_published_band_and_marks_a_collapse() -> None:
    doc = gpu_doc()
    page, md = render_html(doc), render_markdown(doc)
    chart = page[page.index('aria-label="scaling efficiency chart"'):]
    chart = chart[:chart.index("</svg>")]
    assert 'fill="#dafbe1"' in chart and "published GPU scaling 90%–95%" in chart and ">GPUs</text>" in chart
    assert chart.count("collapse: ") == 1 and "collapse: 41% of ideal" in chart
    assert "CPU ranks" not in chart
    assert "90% at 512 GPUs" in page and "- Published GPU scaling: " in md
    assert "- **Collapse**: torch at 32 GPUs: efficiency 41%, speed-up 13.12x" in md
    assert "scaling: torch: 41% at 32 GPUs, a collapse (published GPU scaling 90%–95%)" in render_summary(doc, "o")


def test_no_collapse_mark_where_scaling_holds() -> None:
    doc = gpu_doc()
    doc["scaling"][-1].update(efficiency=0.91, speedup=29.1)
    page, md = render_html(doc), render_markdown(doc)
    assert not re.search(r"collapse: \d", page) and "<b>Collapse</b>" not in page and "Collapse" not in md
    assert "published GPU scaling 90%–95%" in page


def test_renderers_take_odd_values_in_the_new_sections() -> None:
    doc = gpu_doc()
    doc["cluster"][0]["nodes"] = ["node03"]  # not a mapping
    doc["cluster"][0]["measured"] = {"left_out": ["node04"]}
    doc["cluster"].append({"check": 7, "status": "fail", "remediation": ["x"], "nodes": None})
    doc["pairs"].append({"a": 1, "b": "node01", "value": 5.0, "status": None})
    doc["scaling"].append({"label": None, "gpus": 2, "efficiency": 0.1, "device": 3, "speedup": "?"})
    doc["nodes"]["node07"] = "not a node"
    for text in (render_html(doc), render_markdown(doc)):
        assert "node01" in text and "node03" in text
    assert "verdict: FAIL" in render_summary(doc, "out")
    odd = copy.deepcopy(doc)
    odd["nodes"] = ["node01"]
    assert "Pair bandwidth" in render_html(odd) and "## Pair bandwidth" in render_markdown(odd)


def test_nodes_left_out_of_a_large_cluster_are_grey_bands_not_thousands_of_cells() -> None:
    names = [f"n{i:03d}" for i in range(200)]
    pairs = [{"a": names[i], "b": names[i + 1], "value": 10.0 + i, "unit": "Gb/s"} for i in range(179)]
    left_out = {n: "unreachable" for n in names[180:]}
    svg = pair_heatmap_svg(pairs, names, left_out=left_out)
    assert svg.count("<rect ") == 2 * len(pairs) and 'fill="#f6f8fa"' in svg
    assert 'stroke="#afb8c1"' not in svg and len(svg) < 60_000  # 5 px cells: banded, not hatched per cell
    assert 'stroke="#afb8c1"' in pair_heatmap_svg(pairs[:3], names[:4] + ["n199"], left_out={"n199": "unreachable"})
