"""What a new user found wrong in report.html (the lab demo of 2026-11-27: four nodes, node04 failing
gpu.ecc_errors on GPU3), checked in the rendered page: a failed node's results open and whole, no cell cut,
one precision and one unit per figure, a mapping shown as a key/value list, what Slurm did, and CPU ranks that
outnumber their cores said plainly, never called a collapse.

The inputs are the shapes and figures of that run's report.json (pair 21.258 Gb/s, 30560.4 samples/s, the
cluster.network and cluster.mpi measured, the slurm list of --drain)."""

from __future__ import annotations

import copy
import html
import re
from typing import Any

from gpucheck.report.cluster.html import render_html
from gpucheck.report.cluster.html_parts import CSS
from gpucheck.report.cluster.markdown import render_markdown
from gpucheck.report.cluster.summary import render_summary
from gpucheck.report.values import figure

ECC = "drain the node and reset the GPU (nvidia-smi -r -i 3) or reboot; if errors return, open an RMA for the GPU"
ECC_REASON = "GPU3 (00000000:5D:00.0): 2 volatile uncorrected ECC error(s) since the last reset"
WEIGHTS = "c7fcfa2a3ebdf2204ef8237571ca39870a7d47c7d00c403c93ddb6d9e21ffde5"


def ecc_result() -> dict[str, Any]:
    measured = {f"GPU{i}": {"volatile_uncorrected": 2 if i == 3 else 0, "aggregate_uncorrected": 2 if i == 3 else 0}
                for i in range(8)}
    return {"check": "gpu.ecc_errors", "status": "fail", "measured": measured,
            "expected": {"volatile_uncorrected_max": 0, "aggregate_uncorrected_max": 0}, "reason": ECC_REASON,
            "remediation": ECC, "evidence": ""}


def node(host: str, status: str = "pass", results: list[dict[str, Any]] | None = None, cores: int = 2,
         **extra: Any) -> dict[str, Any]:
    results = [*(results or []), {"check": "host.cpu", "status": "skip", "measured": cores, "reason": "no minimum"}]
    return {"host": host, "status": status, "reason": "1 fail: gpu.ecc_errors" if status == "fail" else "all pass",
            "address": f"{host}:22", "wall_s": 38.99, "via": "srun",
            "report": {"host": host, "counts": {status: 1}, "facts": {"profile": "lab"}, "results": results}, **extra}


def lab_doc() -> dict[str, Any]:
    """The lab demo's run: node04 failed gpu.ecc_errors and was drained; three nodes trained on CPU ranks."""
    nodes = {h: node(h) for h in ("node01", "node02", "node03")}
    nodes["node04"] = node("node04", "fail", [ecc_result()])
    network = {"check": "cluster.network", "status": "pass", "reason": "every pair fast enough", "nodes": {},
               "measured": {"method": "tcp", "pairs": 3, "rounds_seconds_each": 3.0, "median_Gbps": 21.258,
                            "slow_pairs": [], "left_out": {"node04": "failed its node checks"}},
               "expected": ">= 11.8 Gb/s"}
    mpi = {"check": "cluster.mpi", "status": "pass", "reason": "3 ranks on 3 nodes", "nodes": {},
           "measured": {"launcher": "node01", "ranks_expected": 3, "ranks_reported": 3,
                        "hosts": {"node01": "node01", "node02": "node02", "node03": "node03"}},
           "expected": "3 ranks, one on each node"}
    smoke = {"check": "cluster.smoke.tf-horovod", "status": "pass", "reason": "loss fell on every rank", "nodes": {},
             "measured": {"1 rank": {"ranks": 1, "passed": True, "samples_per_s": 30560.4, "hosts": ["node01"],
                                     "weights": WEIGHTS},
                          "3 nodes": {"ranks": 3, "passed": True, "samples_per_s": 3568.065,
                                      "hosts": ["node01", "node02", "node03"], "weights": WEIGHTS}}}
    pairs = [{"a": a, "b": b, "value": v, "unit": "Gb/s", "method": "tcp", "status": "pass"}
             for a, b, v in (("node02", "node03", 22.578), ("node01", "node03", 22.839), ("node01", "node02", 21.258))]
    scaling = [{"label": "tf-horovod (CPU ranks)", "gpus": 1, "throughput": 30560.4, "efficiency": 1.0,
                "unit": "samples/s", "run": "1 rank", "device": "CPU"},
               {"label": "tf-horovod (CPU ranks)", "gpus": 3, "throughput": 3568.065, "efficiency": 0.0389,
                "speedup": 0.1168, "unit": "samples/s", "run": "3 nodes", "device": "CPU"}]
    slurm = [{"node": h, "slurm_node": h, "action": "keep", "text": f"left {h} as it is: in service (IDLE)"}
             for h in ("node01", "node02", "node03")]
    slurm.append({"node": "node04", "slurm_node": "node04", "action": "drain",
                  "text": f"drained node04: gpucheck: gpu.ecc_errors {ECC_REASON}"})
    return {"exit_code": 2, "complete": True, "started": "2026-11-27T06:52:42+00:00", "duration_s": 90.17,
            "options": {"launcher": "slurm", "drain": True},
            "inventory": {"sources": ["hosts.yml"], "pattern": "gpu_nodes"},
            "counts": {"nodes": {"pass": 3, "fail": 1}, "cluster": {"pass": 3}}, "nodes": nodes,
            "cluster": [network, mpi, smoke], "pairs": pairs, "scaling": scaling, "slurm": slurm,
            "drain": [{"node": "node04", "reason": f"gpucheck: gpu.ecc_errors {ECC_REASON}"}]}


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("\xa0", " ")  # a no-break space reads as one


def items(page: str) -> list[str]:
    """Every list item's text."""
    return [text_of(i) for i in re.findall(r"<li>(.*?)</li>", page, re.S)]


def section(page: str, heading: str) -> str:
    start = page.index(f"<h2>{heading}</h2>")
    end = page.find("<h2>", start + 1)
    return page[start:end if end > 0 else len(page)]


def svg(page: str, label: str) -> str:
    start = page.index(f'aria-label="{label}"')
    return page[start:page.index("</svg>", start)]


# ---------------------------------------------------------------- 1. a failed node's evidence, open and whole

def test_a_failed_nodes_results_are_open_and_name_the_faulty_gpu_first() -> None:
    page = render_html(lab_doc())
    nodes = section(page, "Nodes")
    assert "<details open><summary>1 result not passing</summary>" in nodes
    shown = items(nodes)
    assert shown[0] == "GPU3: volatile uncorrected 2, aggregate uncorrected 2"  # the fault first, in bold
    assert "<b>GPU3: volatile uncorrected 2, aggregate uncorrected 2</b>" in nodes
    assert "GPU0, GPU1, GPU2, GPU4, GPU5, GPU6, GPU7: volatile uncorrected 0, aggregate uncorrected 0" in shown
    assert "…" not in page


def test_a_warning_stays_folded_and_a_silent_failed_node_shows_its_evidence_whole() -> None:
    doc = lab_doc()
    warned = dict(ecc_result(), status="warn")
    doc["nodes"]["node02"] = node("node02", "warn", [warned])
    evidence = "ssh: connect to host node05 port 22: Connection timed out\n" * 60 + "the last line names the fault"
    doc["nodes"]["node05"] = {"host": "node05", "status": "error", "reason": "unreachable", "evidence": evidence}
    nodes = section(render_html(doc), "Nodes")
    assert nodes.count("<details open>") == 2  # node04's results and node05's evidence, not node02's
    assert "<details><summary>1 result not passing</summary>" in nodes
    assert html.escape(evidence) in nodes  # whole: the box scrolls
    assert "pre{" in CSS and "overflow:auto" in CSS


def test_a_failing_cluster_checks_evidence_is_open_and_whole() -> None:
    doc = lab_doc()
    evidence = "$ srun hostname\n" + "x" * 3000 + "\nnode03: error: the fault"
    doc["cluster"].append({"check": "cluster.mpi.ranks", "status": "fail", "reason": "rank 2 missing",
                           "evidence": evidence, "nodes": {"node03": "rank 2 missing"}})
    checks = section(render_html(doc), "Cluster checks")
    assert f"<details open><summary>evidence</summary><pre>{html.escape(evidence)}</pre></details>" in checks


# ---------------------------------------------------------------- 2. no cell cut mid-word

def test_no_value_is_cut_and_long_tokens_wrap_instead() -> None:
    doc = lab_doc()
    long_reason = "the reason goes on " * 20 + "and ends with the word that matters"
    doc["nodes"]["node04"]["report"]["results"][0]["reason"] = f"{long_reason}, {WEIGHTS}"
    page = render_html(doc)
    assert "…" not in page and "text-overflow" not in CSS and "ellipsis" not in CSS
    assert html.escape(long_reason) in page
    assert f'<span class="token">{WEIGHTS}</span>' in page  # a hash may wrap anywhere: it is no word
    assert '<code class="id">cluster.smoke.tf-horovod</code>' in page  # a check id is never broken, long or short
    assert '<code class="id">cluster.network</code>' in page and "<wbr>" not in page


# ---------------------------------------------------------------- 3. one precision and one unit per figure

def test_a_pairs_bandwidth_reads_the_same_everywhere_with_its_unit() -> None:
    doc = lab_doc()
    page, md = render_html(doc), render_markdown(doc)
    heat = svg(page, "pair bandwidth matrix")
    assert figure(21.258, "Gb/s") == "21.26 Gb/s"
    assert heat.count(">21.26</text>") == 2 and "node01 - node02: 21.26 Gb/s" in heat
    assert heat.count(">Gb/s</text>") >= 7  # under each of the six cells' figures, and in the matrix's corner
    assert "<td>21.26 Gb/s</td>" in page and "| node01 | · | 21.26 | 22.84 | — |" in md
    for other in ("21.258", "21.3 ", ">21.3<", "23.506"):
        assert other not in page, other


def test_a_throughput_reads_the_same_everywhere_and_the_chart_says_what_its_axes_are() -> None:
    page = render_html(lab_doc())
    chart = svg(page, "scaling efficiency chart")
    assert "1 CPU rank, 100%, 30560 samples/s" in chart
    assert ">scaling efficiency (% of ideal)</text>" in chart and ">CPU ranks</text>" in chart
    cells = section(page, "Cluster checks")
    assert "<td>1 rank: 30560 samples/s on node01; 3 ranks:" in cells  # the same figure in the smoke job's measured
    assert WEIGHTS not in cells  # its weights' digest stays in report.json; the reason says whether they agree
    assert "3.056e+04" not in page and "30560.4" not in page


# ---------------------------------------------------------------- 4. a mapping is a key/value list

def test_raw_data_reads_as_a_key_value_list_not_as_one_figure() -> None:
    page = render_html(lab_doc())
    shown = items(section(page, "Cluster checks"))
    assert {"launcher: node01", "ranks expected: 3", "hosts: node01, node02, node03", "each round: 3 s",
            "median: 21.26 Gb/s", "left out: node04 failed its node checks"} <= set(shown)
    assert '<span class="k">launcher:</span> node01' in page
    for raw in ("launcher node01", "rounds seconds each", "node01 node01"):
        assert raw not in text_of(page), raw


# ---------------------------------------------------------------- 6. what Slurm did

def test_what_slurm_did_is_said_launcher_drained_resumed_and_left() -> None:
    doc = lab_doc()
    doc["slurm"][1] = {"node": "node02", "slurm_node": "gpu-02", "action": "resume",
                       "text": "resumed gpu-02 (its drain was gpucheck's: gpucheck: gpu.clocks GPU1 ...)"}
    doc["slurm"].append({"node": "node05", "slurm_node": "node05", "action": "error", "text": "scontrol: timed out"})
    doc["nodes"]["node03"]["slurm_state"] = "DOWN in Slurm (Not responding)"
    page, md = render_html(doc), render_markdown(doc)
    shown = items(section(page, "Slurm"))
    assert shown[0].startswith("Launcher: Slurm (--launcher slurm): node checks through srun")
    assert "Checked over SSH, not through Slurm: node03 (DOWN in Slurm (Not responding))" in shown
    assert f"Drained: node04: gpucheck: gpu.ecc_errors {ECC_REASON}" in shown
    assert "Resumed: gpu-02 (its drain was gpucheck's: gpucheck: gpu.clocks GPU1 ...)" in shown
    assert "Not updated (Slurm refused): node05: scontrol: timed out" in shown
    assert "Left as they were (2): node01, node03: in service (IDLE)" in shown
    assert "## Slurm" in md and f"- Drained: node04: gpucheck: gpu.ecc_errors {ECC_REASON}" in md


def test_slurm_is_said_only_where_the_run_used_it() -> None:
    doc = lab_doc()
    doc["options"] = {"launcher": "slurm", "drain": False}
    doc["slurm"] = []
    shown = items(section(render_html(doc), "Slurm"))
    assert "Drain: nothing drained or resumed in Slurm (--drain not given); drain.txt lists 1 node to drain" in shown
    doc["options"] = {"launcher": "ssh", "drain": False}
    assert "<h2>Slurm</h2>" not in render_html(doc) and "## Slurm" not in render_markdown(doc)


def test_what_kubernetes_did_is_said_under_its_own_name() -> None:
    doc = lab_doc()
    doc["options"] = {"launcher": "kubernetes", "drain": True}
    del doc["slurm"]
    doc["kubernetes"] = [
        {"node": "node04", "action": "drain", "text": "tainted node04 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors x"},
        {"node": "node02", "action": "resume",
         "text": "removed gpucheck/unhealthy from node02 (its cluster run passed)"},
        {"node": "node05", "action": "error", "text": "cannot read Node node05: 404 nodes \"node05\" not found"}]
    page, md = render_html(doc), render_markdown(doc)
    shown = items(section(page, "Kubernetes"))
    assert shown[0].startswith("Launcher: Kubernetes (--launcher kubernetes): node checks as pods")
    assert "Tainted: node04 gpucheck/unhealthy:NoSchedule: gpu.ecc_errors x" in shown
    assert "Taint removed: removed gpucheck/unhealthy from node02 (its cluster run passed)" in shown
    assert 'Not updated (Kubernetes refused): node05: cannot read Node node05: 404 nodes "node05" not found' in shown
    assert "<h2>Slurm</h2>" not in page and "## Kubernetes" in md and "## Slurm" not in md


# ---------------------------------------------------------------- 7. CPU ranks that share cores: no collapse

def test_cpu_ranks_that_outnumber_their_cores_are_said_so_and_never_called_a_collapse() -> None:
    doc = lab_doc()
    for host in ("node01", "node02", "node03"):
        doc["nodes"][host] = node(host, cores=1)
    doc["nodes"]["node03"]["report"]["results"][-1]["measured"] = 0  # no count from one host: cores unknown, not 2
    assert "ranks on" not in section(render_html(doc), "Scaling efficiency")
    doc["scaling"][1]["cores"] = 2  # the stage's own record of the cores the ranks ran on
    page = render_html(doc)
    scaling = section(page, "Scaling efficiency")
    assert "3 ranks on 2 CPU cores: the ranks outnumber the cores they ran on" in text_of(scaling)
    assert ">4% of ideal</text>" in scaling and ">3 ranks on 2 CPU cores</text>" in scaling
    assert "collapse" not in svg(page, "scaling efficiency chart") and "<b>Collapse</b>" not in page
    line = next(x for x in render_summary(doc, "out").splitlines() if x.startswith("scaling:"))
    assert "a collapse" not in line and "(3 ranks on 2 CPU cores: the ranks outnumber the cores)" in line
    assert "Collapse**" not in render_markdown(doc)


def test_the_cores_come_from_the_hosts_the_run_used_where_the_stage_records_none() -> None:
    doc = lab_doc()
    for host in ("node01", "node02", "node03"):
        doc["nodes"][host] = node(host, cores=1)
    doc["scaling"][1]["gpus"] = 4  # four ranks on three one-core hosts: at most three cores
    assert "4 ranks on 3 CPU cores" in text_of(render_html(doc))


def test_the_lab_run_with_enough_cores_on_paper_is_no_collapse_either() -> None:
    page = render_html(copy.deepcopy(lab_doc()))  # 3 ranks, 3 hosts of 2 cores each, which may be one machine's
    scaling = text_of(section(page, "Scaling efficiency"))
    assert "Not called a collapse: CPU ranks measure the plumbing" in scaling
    assert "collapse:" not in svg(page, "scaling efficiency chart") and "ranks on" not in scaling
