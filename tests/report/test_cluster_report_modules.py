"""The cluster report's pieces on their own: the facade the cluster command imports, the writer's
files, and the SVG charts at the sizes a large cluster gives them."""

from __future__ import annotations

import re

from gpucheck.report import cluster
from gpucheck.report.cluster import writer
from gpucheck.report.cluster.html_charts import pair_heatmap_svg, ramp, scaling_chart_svg


def test_the_facade_names_what_the_owning_modules_define() -> None:
    from gpucheck.report.cluster import html as cluster_html
    from gpucheck.report.cluster import html_charts, summary

    assert all(hasattr(cluster, name) for name in cluster.__all__)
    assert cluster.ReportWriter is writer.ReportWriter and cluster.FILES is writer.FILES
    assert cluster.render_html is cluster_html.render_html and cluster.render_summary is summary.render_summary
    assert cluster.pair_heatmap_svg is html_charts.pair_heatmap_svg


def test_every_report_file_has_one_renderer() -> None:
    assert writer.FILES == ("report.json", "junit.xml", "report.md", "report.html", "drain.txt")
    assert writer.safe_name("../etc/passwd") == ".._etc_passwd" and writer.safe_name("") == "_"


def test_ramp_runs_red_amber_green_and_clamps() -> None:
    assert ramp(0.0) == ramp(-1.0) == "#cf222e"
    assert ramp(0.5) == "#d4a72c"
    assert ramp(1.0) == ramp(2.0) == "#1a7f37"


def test_heat_map_of_a_large_cluster_drops_the_labels_not_the_cells() -> None:
    names = [f"n{i:03d}" for i in range(200)]
    pairs = [{"a": names[i], "b": names[i + 1], "value": 10.0 + i, "unit": "Gb/s"} for i in range(199)]
    svg = pair_heatmap_svg(pairs, names)
    assert svg.count("<rect ") == 2 * len(pairs)
    assert "<text " in svg and not re.search(r">n\d{3}</text>", svg)  # only the legend, no node labels
    assert pair_heatmap_svg([]) == ""


def test_scaling_chart_ignores_points_it_cannot_place() -> None:
    assert scaling_chart_svg([{"label": "x", "gpus": 0, "efficiency": 1.0}, {"label": "y", "gpus": 4}]) == ""
    svg = scaling_chart_svg([{"label": "a&b", "gpus": 1, "efficiency": 1.0}, {"label": "a&b", "gpus": 8,
                                                                                "efficiency": 0.9}])
    assert svg.count("<circle ") == 2 and ">a&amp;b</text>" in svg and "a&b" not in svg
