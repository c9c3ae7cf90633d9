"""report.html's "GPUs over time": each GPU's burn throughput and temperature as two heat maps, rows grouped by node
and rack (burn_map reads the document, html_burn_map draws it). The documents are report.json's shape: the burn
stage's `burn.nodes[NODE].gpus` and each node's `facts.burnin.gpus`, each GPU's `burn_timeline` (docs/burnin.md)."""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest

from gpucheck.report.cluster.burn_map import BURN_STAGE, NO_RACK, NODE_BURNIN, burn_map
from gpucheck.report.cluster.html import render_html
from gpucheck.report.cluster.html_burn_map import burn_map_html, heat, share_level
from gpucheck.report.cluster.html_charts import RAMP_STEPS, ramp

SKU = "H100-SXM5-80GB"
RED, GREEN = ramp(0.0), ramp(1.0)


def gpu(tflops: list[Any] | None = None, temps: list[Any] | None = None, median: Any = None, sku: Any = SKU,
        every: Any = 5.0) -> dict[str, Any]:
    timeline: dict[str, Any] = {}
    if tflops is not None:
        timeline["TFLOPS"] = {"every_s": every, "TFLOPS": tflops}
    if temps is not None:
        timeline["nvml"] = {"every_s": every, "temperature_C": temps, "power_W": [], "sm_clock_MHz": []}
    return {"sku": sku, "burn_TFLOPS_median": median, "burn_timeline": timeline}


def steady(value: float = 700.0, hot: float = 70.0, points: int = 12) -> dict[str, Any]:
    return gpu([value] * points, [hot] * points, median=value)


def doc(nodes: dict[str, dict[str, Any]], racks: dict[str, str | None] | None = None,
        burn: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A report document: `nodes` node -> its own burn-in GPUs; `burn` node -> the burn stage's GPUs."""
    racks = racks if racks is not None else {}
    hosts = [{"name": n, "address": n, "vars": {"rack": r} if r else {}} for n, r in racks.items()]
    found: dict[str, Any] = {"exit_code": 0, "complete": True, "inventory": {"hosts": hosts},
                             "nodes": {n: {"status": "pass", "report": {"facts": {"burnin": {"gpus": g}}}}
                                       for n, g in nodes.items()}}
    if burn is not None:
        found["burn"] = {"seconds": 600, "rounds": 1, "nodes": {n: {"rack": None, "gpus": g} for n, g in burn.items()}}
    return found


def cell_paths(svg: str) -> list[dict[str, set[int]]]:
    """Per panel (the <g> groups: throughput, then temperature): fill -> the row tops its rectangles lie on, from
    the absolute `M x y` and relative `m dx dy` moves of its subpaths."""
    panels = []
    for group in re.findall(r"<g transform[^>]*>(.*?)</g>", svg):
        fills: dict[str, set[int]] = {}
        for d, fill in re.findall(r'<path d="([^"]*)" fill="(#[0-9a-f]{6})"/>', group):
            y, tops = 0.0, set()
            for command, _, dy in re.findall(r"([Mm])(-?[\d.]+) (-?[\d.]+)", d):
                y = float(dy) if command == "M" else y + float(dy)
                tops.add(round(y))
            fills[fill] = tops
        panels.append(fills)
    return panels


def test_rows_are_grouped_by_rack_in_inventory_order_with_no_rack_last():
    racks = {"n1": "B", "n2": "A", "n3": None, "n4": "B", "n5": "A"}
    data = burn_map(doc({n: {"GPU0": steady()} for n in [*racks, "stray"]}, racks))
    assert [(r["rack"], r["node"]) for r in data["rows"]] == [
        ("B", "n1"), ("B", "n4"), ("A", "n2"), ("A", "n5"), (NO_RACK, "n3"), (NO_RACK, "stray")]
    html = burn_map_html(doc({n: {"GPU0": steady()} for n in racks}, racks))
    assert html.index("rack B") < html.index("rack A") < html.index(NO_RACK)


def test_gpus_of_a_node_keep_their_number_order():
    data = burn_map(doc({"n1": {f"GPU{i}": steady() for i in (10, 2, 0, 1)}}, {"n1": "A"}))
    assert [r["gpu"] for r in data["rows"]] == ["GPU0", "GPU1", "GPU2", "GPU10"]


def test_the_burn_stage_wins_over_the_node_burn_in_for_a_node():
    own = {"n1": {"GPU0": steady(700.0, 40.0)}, "n2": {"GPU0": steady(700.0, 41.0)}}
    burn = {"n1": {"GPU0": steady(700.0, 90.0)}, "n2": {}}  # n2: the stage has no figures of its own yet
    data = burn_map(doc(own, {"n1": "A", "n2": "A"}, burn))
    by_node = {r["node"]: r for r in data["rows"]}
    assert by_node["n1"]["source"] == BURN_STAGE and by_node["n1"]["max_C"] == 90.0
    assert by_node["n2"]["source"] == NODE_BURNIN and by_node["n2"]["max_C"] == 41.0


def test_the_burn_stage_alone_draws_the_section():
    data = burn_map({"burn": {"plan": "x", "nodes": {"n1": {"gpus": {"GPU0": steady()}}}}})
    assert [r["node"] for r in data["rows"]] == ["n1"] and data["sources"] == [BURN_STAGE]


def test_half_the_sku_median_is_the_red_end_and_the_median_the_green_end():
    gpus = {"GPU0": steady(700.0), "GPU1": steady(700.0), "GPU2": gpu([350.0] * 12, [70.0] * 12, median=350.0)}
    data = burn_map(doc({"n1": gpus}, {"n1": "A"}))
    assert data["medians"] == {SKU: 700.0}
    assert [r["throughput"]["shares"][0] for r in data["rows"]] == [1.0, 1.0, 0.5]
    assert (share_level(0.5), share_level(1.0), share_level(0.2), share_level(1.3)) == (
        0, RAMP_STEPS - 1, 0, RAMP_STEPS - 1)
    throughput, temperature = cell_paths(burn_map_html(doc({"n1": gpus}, {"n1": "A"})))
    assert set(throughput) == {RED, GREEN}
    assert len(throughput[RED]) == 1 and len(throughput[GREEN]) == 2
    assert min(throughput[RED]) > max(throughput[GREEN])  # GPU2, the third row, is the red one
    assert set(temperature) == {heat(round((70 - 30) / (95 - 30) * (RAMP_STEPS - 1)) / (RAMP_STEPS - 1))}


def test_a_gpu_without_a_sku_is_drawn_against_every_gpus_points():
    gpus = {"GPU0": gpu([100.0] * 4, sku=None), "GPU1": gpu([100.0] * 4, sku=None),
            "GPU2": gpu([50.0] * 4, sku=None)}
    data = burn_map(doc({"n1": gpus}))
    assert [r["reference"] for r in data["rows"]] == [100.0] * 3
    assert [r["gpu"] for r in data["slow"]] == ["GPU2"]


def test_a_sku_without_burn_medians_is_drawn_against_its_points():
    gpus = {f"GPU{i}": gpu([200.0] * 4, median="fast") for i in range(3)}
    assert burn_map(doc({"n1": gpus}))["medians"] == {SKU: 200.0}


def test_odd_points_are_skipped_and_keep_the_others_in_their_time():
    odd = [700.0, None, "700", math.nan, math.inf, True, 10**400, -5.0, 700.0]
    data = burn_map(doc({"n1": {"GPU0": gpu(odd, [60, "hot", None, 61], median=700.0)}}))
    row = data["rows"][0]
    assert row["throughput"]["shares"] == [1.0, None, None, None, None, None, None, None, 1.0]
    assert row["temperature"]["values"] == [60.0, None, None, 61.0]


MALFORMED: list[Any] = [
    None, "report", [], {}, {"nodes": "x"}, {"nodes": {"n1": "x"}}, {"nodes": {"n1": {"report": "x"}}},
    {"nodes": {"n1": {"report": {"facts": {"burnin": {"gpus": "x"}}}}}},
    {"nodes": {"n1": {"report": {"facts": {"burnin": {"gpus": {"GPU0": "x", "GPU1": None}}}}}}},
    {"burn": "x"}, {"burn": {"nodes": "x"}}, {"burn": {"nodes": {"n1": {"gpus": {"GPU0": {"burn_timeline": "x"}}}}}},
    {"inventory": "x", "nodes": {"n1": {"report": {"facts": {"burnin": {"gpus": {"GPU0": {"burn_timeline": {
        "TFLOPS": "x", "nvml": {"every_s": "5", "temperature_C": [70]}}}}}}}}}},
    doc({"n1": {"GPU0": gpu([1.0], [2.0], every=0)}}), doc({"n1": {"GPU0": gpu([1.0], [2.0], every=math.nan)}}),
    doc({"n1": {"GPU0": gpu("fast", {"a": 1})}}), doc({"n1": {"GPU0": gpu([], [])}}),
    doc({"n1": {"GPU0": gpu([None, "x", math.nan], [math.inf])}}),
]


@pytest.mark.parametrize("document", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_document_draws_nothing_and_raises_nothing(document: Any):
    assert burn_map(document) is None
    assert burn_map_html(document) == ""
    if isinstance(document, dict):  # the page around the section takes it too (an inventory that is text)
        assert "GPUs over time" not in render_html(document)


def test_malformed_parts_beside_good_ones_are_skipped():
    document = doc({"n1": {"GPU0": steady(), "GPU1": "x"}, "n2": {"GPU0": gpu("x")}}, {"n1": "A", "n2": "B"})
    document["inventory"]["hosts"] += [None, {"name": None}, {"name": "n3", "vars": "x"}, {"name": "n4",
                                                                                          "vars": {"rack": True}}]
    document["burn"] = {"nodes": {"n1": "x", "n2": {"gpus": {"GPU0": 5}}}, "fabric": "x"}
    data = burn_map(document)
    assert [(r["node"], r["gpu"]) for r in data["rows"]] == [("n1", "GPU0")] and data["without"] == ["n2"]
    assert "GPUs over time" in render_html(document)


def test_no_section_without_a_timeline():
    figures_only = {"GPU0": {"sku": SKU, "burn_TFLOPS_median": 700.0}}
    document = doc({"n1": figures_only, "n2": figures_only})
    assert burn_map(document) is None
    assert "GPUs over time" not in render_html(document) and "GPU burn-in" in render_html(document)


def test_the_section_follows_the_gpu_burn_in():
    page = render_html(doc({"n1": {"GPU0": steady()}}, {"n1": "A"}))
    assert page.index("<h2>GPU burn-in</h2>") < page.index("<h2>GPUs over time</h2>") < page.index("<h2>Nodes</h2>")


def test_the_words_name_the_slow_gpu_and_the_hottest():
    throttled = gpu([700.0] * 4 + [420.0] * 8, [70.0] * 4 + [93.5] * 8, median=420.0)
    nodes = {"n1": {"GPU0": steady(), "GPU1": steady()}, "n2": {"GPU0": steady(), "GPU3": throttled}}
    data = burn_map(doc(nodes, {"n1": "A", "n2": "A"}))
    assert [(s["node"], s["gpu"]) for s in data["slow"]] == [("n2", "GPU3")]
    assert data["slow"][0]["part"] == pytest.approx(8 / 12) and data["slow"][0]["lowest"] == pytest.approx(0.6)
    assert data["hottest"] == {"node": "n2", "gpu": "GPU3", "max_C": 93.5}
    words = burn_map_html(doc(nodes, {"n1": "A", "n2": "A"})).split("</svg>")[1]
    assert "<b>n2</b>: GPU3" in words and "<b>Hottest</b>: n2 GPU3, 93.5 °C" in words
    assert "rack A: 1 on n2" in words  # the GPUs at 85 °C or more, by rack
    assert "67% of the burn" in words and "lowest 60%" in words


def test_a_short_blip_is_not_a_slow_gpu():
    blip = gpu([700.0] * 10 + [300.0] * 2, [70.0] * 12, median=700.0)  # 2 of 12 points: under a quarter
    assert burn_map(doc({"n1": {"GPU0": blip, "GPU1": steady()}}))["slow"] == []


def test_every_node_name_is_escaped():
    name = "<b>x</b>"
    throttled = gpu([700.0] * 2 + [300.0] * 10, [99.0] * 12, median=300.0)
    html = burn_map_html(doc({name: {"GPU0": throttled, "GPU1": steady()}, "n2": {"GPU0": steady()}},
                             {name: "<i>r</i>", "n2": "A"}))
    assert name not in html and "<i>r</i>" not in html
    assert html.count("&lt;b&gt;x&lt;/b&gt;") >= 4  # its label, its title, the slow list and the hottest
    assert "rack &lt;i&gt;r&lt;/i&gt;" in html


def fleet(nodes: int, gpus: int, points: int, seed: int, noise: float = 0.01) -> dict[str, Any]:
    """`nodes` x `gpus` GPUs, racks of 8, each with `points` points of a steady burn and a warming GPU."""
    rng = random.Random(seed)
    names = [f"node{i:03d}" for i in range(nodes)]

    def one() -> dict[str, Any]:
        tflops = [round(690 * (1 + rng.gauss(0, noise)), 2) for _ in range(points)]
        temps = [round(33 + 35 * min(1.0, i / 24) + rng.gauss(0, 0.6), 1) for i in range(points)]
        return gpu(tflops, temps, median=690.0)

    return doc({n: {f"GPU{g}": one() for g in range(gpus)} for n in names},
               {n: f"r{i // 8:02d}" for i, n in enumerate(names)})


def test_256_nodes_of_8_gpus_stay_a_small_page_of_few_paths():
    html = burn_map_html(fleet(256, 8, 120, seed=7))
    assert len(html.encode()) < 1_000_000  # a <rect> per cell would be 491,520 of them, some 30 MB
    cells = sum(len(panel) for panel in cell_paths(html))
    assert cells <= 2 * RAMP_STEPS
    assert html.count("<path ") <= 2 * RAMP_STEPS + 2 * (RAMP_STEPS + 1) + 8  # cells, legends, grid and ticks
    assert html.count("<title>") == 256 and "<rect" not in html
    assert "<script" not in html and "url(" not in html and 'viewBox="0 0 1100 ' in html


def test_flickering_readings_are_averaged_down_not_drawn_past_the_budget():
    html = burn_map_html(fleet(256, 8, 120, seed=3, noise=0.1))
    assert len(html.encode()) < 2_000_000 and "averaged down to" in html


def test_a_longer_series_is_averaged_to_120_columns():
    row = burn_map(doc({"n1": {"GPU0": gpu([700.0] * 600, [60.0] * 600, median=700.0, every=1.0)}}))["rows"][0]
    assert len(row["throughput"]["shares"]) == 120 and row["throughput"]["every_s"] == 5.0
