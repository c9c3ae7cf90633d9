"""The training benchmark's part of the cluster report (doc["training"], filled by cluster/training_verdict):
the runs (images/s, per GPU, the spread over iterations, the efficiency from 1 GPU) and per node its images/s
per GPU beside its SKU's fleet median and published figure, in Markdown, HTML and the terminal's summary.
CPU ranks are said as such and carry no published figure. Any value may be odd: nothing here raises on it."""

from __future__ import annotations

from typing import Any

from ..values import figure, plural
from .html_parts import badge, esc
from .wording import dicts, finite, number


def section(doc: dict[str, Any]) -> dict[str, Any] | None:
    training = doc.get("training")
    return training if isinstance(training, dict) and dicts(training.get("runs")) else None


def title(training: dict[str, Any]) -> str:
    model = training.get("model") if isinstance(training.get("model"), dict) else {}
    return (f"{model.get('name', 'ResNet-50')}, {training.get('framework', '?')}, {training.get('precision', '?')}, "
            f"{number(model.get('image_size_px'))} px, batch {number(model.get('batch_size_per_gpu'))} per "
            f"{training.get('device', 'GPU')}")


def _figure(value: Any) -> str:
    """A figure as every part of the report writes it (values.figure), its unit in the column's heading."""
    return figure(value) if finite(value) else "—"


def _fraction(value: Any) -> str:
    return f"{value:.2f} x" if finite(value) else "—"


def run_cells(row: dict[str, Any]) -> list[str]:
    eff = row.get("efficiency")
    return [str(row.get("run", "")), str(row.get("gpus", "")), _figure(row.get("images_per_s")),
            _figure(row.get("images_per_s_per_gpu")),
            f"{_figure(row.get('iteration_min'))}–{_figure(row.get('iteration_max'))}",
            f"{eff:.0%}" if finite(eff) else "—"]


def node_cells(row: dict[str, Any]) -> list[str]:
    return [str(row.get("node", "")), str(row.get("sku", "")), _figure(row.get("images_per_s_per_gpu")),
            _figure(row.get("fleet_median")), _fraction(row.get("of_median")),
            _figure(row.get("reference")) if finite(row.get("reference")) else "none published",
            _fraction(row.get("of_reference")), str(row.get("status", "")).upper()]


RUN_HEADINGS = ["run", "GPUs", "images/s", "per GPU", "spread (iterations)", "efficiency"]
NODE_HEADINGS = ["node", "GPU", "images/s per GPU", "fleet median", "of median", "published", "of published",
                 "status"]


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def training_lines(doc: dict[str, Any]) -> list[str]:
    training = section(doc)
    if training is None:
        return []
    cpu = training.get("device") == "CPU"
    runs = dicts(training.get("runs"))
    nodes = dicts(training.get("nodes"))
    headings = [h.replace("GPU", "rank") if cpu else h for h in RUN_HEADINGS]
    lines = ["", "## Training benchmark", "", f"{_cell(title(training))}.", ""]
    if cpu:
        lines += [f"**CPU ranks, not GPUs.** {_cell(str(training.get('note', '')))}.", ""]
    lines += ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(_cell(c) for c in run_cells(r)) + " |" for r in runs]
    if nodes:
        heads = [h.replace("GPU", "rank") if cpu else h for h in NODE_HEADINGS]
        lines += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        lines += ["| " + " | ".join(_cell(c) for c in node_cells(r)) + " |" for r in nodes]
    lines += [f"- {_cell(str(r['why']))}" for r in nodes if r.get("why")]
    return lines


def training_html(doc: dict[str, Any]) -> str:
    training = section(doc)
    if training is None:
        return ""
    cpu = training.get("device") == "CPU"
    note = f'<p class="note"><b>CPU ranks, not GPUs.</b> {esc(training.get("note", ""))}.</p>' if cpu else ""

    def table(headings: list[str], rows: list[list[str]], statuses: list[str] | None = None) -> str:
        head = "".join(f"<th>{esc(h.replace('GPU', 'rank') if cpu else h)}</th>" for h in headings)
        body = ""
        for i, cells in enumerate(rows):
            tds = [f"<td>{esc(c)}</td>" for c in cells]
            if statuses is not None:
                tds[-1] = f"<td>{badge(statuses[i])}</td>"
            body += "<tr>" + "".join(tds) + "</tr>"
        return f"<table><tr>{head}</tr>{body}</table>"

    nodes = dicts(training.get("nodes"))
    parts = [f"<h2>Training benchmark</h2><p>{esc(title(training))}</p>", note,
             table(RUN_HEADINGS, [run_cells(r) for r in dicts(training.get("runs"))])]
    if nodes:
        parts.append(table(NODE_HEADINGS, [node_cells(r) for r in nodes], [str(r.get("status", "")) for r in nodes]))
        parts += [f'<p class="note">{esc(r["why"])}</p>' for r in nodes if r.get("why")]
    return "".join(parts)


def training_summary(doc: dict[str, Any]) -> str:
    """`training: ResNet-50 ... : 1 GPU 2,400 images/s, 4 nodes 57,600 images/s (90%); slow: node03 (0.79 x median)`."""
    training = section(doc)
    if training is None:
        return ""
    runs = dicts(training.get("runs"))
    text = f"training: {title(training)}: " + ", ".join(
        f"{r.get('run')} {_figure(r.get('images_per_s'))} images/s"
        + (f" ({r['efficiency']:.0%})" if finite(r.get("efficiency")) and r.get("gpus") != 1 else "") for r in runs)
    odd = [r for r in dicts(training.get("nodes")) if r.get("status") in ("warn", "fail")]
    if odd:
        text += f"; {plural(len(odd), 'node')} named: " + ", ".join(str(r.get("node")) for r in odd)
    if training.get("device") == "CPU":
        text += "; CPU ranks, not a GPU measurement"
    return text
