"""The cluster handoff report: report.json, junit.xml, report.md, report.html, drain.txt and the terminal summary,
each rendered from one document; writer.py owns the report directory. The public names are gathered here."""

from __future__ import annotations

from .drain import render_drain
from .html import render_html
from .html_charts import pair_heatmap_svg, scaling_chart_svg
from .json import render_json
from .junit import render_junit
from .markdown import render_markdown
from .summary import render_summary
from .wording import VERDICT
from .writer import FILES, ReportWriter, default_dir, safe_name

__all__ = ["FILES", "VERDICT", "ReportWriter", "default_dir", "pair_heatmap_svg", "render_drain", "render_html",
           "render_json", "render_junit", "render_markdown", "render_summary", "safe_name", "scaling_chart_svg"]
