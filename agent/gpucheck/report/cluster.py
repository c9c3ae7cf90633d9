"""The cluster handoff report, rendered from one document (report.json's content): the public names
the cluster command and its tests use, gathered from the module that owns each (one per format)."""

from __future__ import annotations

from .cluster_drain import render_drain
from .cluster_html import render_html
from .cluster_json import render_json
from .cluster_junit import render_junit
from .cluster_markdown import render_markdown
from .cluster_summary import render_summary
from .cluster_wording import VERDICT
from .html_charts import pair_heatmap_svg, scaling_chart_svg
from .writer import FILES, ReportWriter, default_dir, safe_name

__all__ = ["FILES", "VERDICT", "ReportWriter", "default_dir", "pair_heatmap_svg", "render_drain", "render_html",
           "render_json", "render_junit", "render_markdown", "render_summary", "safe_name", "scaling_chart_svg"]
