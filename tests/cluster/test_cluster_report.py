"""The verdict (drain list, exit code, fail-safe) and the report files, on sample data that includes
what the lab stages will add (pair bandwidths, scaling points)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cluster_helpers import node_report

from gpucheck import files
from gpucheck.cluster import handoff
from gpucheck.cluster.context import ClusterContext, ClusterResult, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.stages import order as stages
from gpucheck.model import Status
from gpucheck.report.cluster import writer
from gpucheck.report.cluster.drain import render_drain
from gpucheck.report.cluster.html import render_html
from gpucheck.report.cluster.junit import render_junit
from gpucheck.report.cluster.markdown import render_markdown
from gpucheck.report.cluster.summary import render_summary


def context(n: int = 4) -> ClusterContext:
    hosts = [Host(f"node{i:02d}", "127.0.0.1", 2200 + i, "root", None, (), True) for i in range(1, n + 1)]
    return ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))


def reported(ctx: ClusterContext, name: str, **kwargs) -> None:
    doc = node_report(name, **kwargs)
    status = {0: Status.PASS, 1: Status.WARN, 2: Status.FAIL, 3: Status.ERROR}[doc["exit_code"]]
    ctx.nodes[name] = NodeOutcome(name, status, "x", "report", 1.0, doc["exit_code"], doc)


def sample_context() -> ClusterContext:
    ctx = context(4)
    reported(ctx, "node01", measured={"bw.nccl_allreduce": 480.0})
    reported(ctx, "node02", measured={"bw.nccl_allreduce": 300.0}, fail={"gpu.ecc_errors": "GPU3 12 uncorrected"})
    reported(ctx, "node03", measured={"bw.nccl_allreduce": 470.0}, driver="535.161.08")
    ctx.nodes["node04"] = NodeOutcome("node04", Status.FAIL, "unreachable: 127.0.0.1:2204: connection refused",
                                      "unreachable", 0.1)
    for name, stage in stages.STAGES:
        stages.run_stage(name, stage, ctx)
    ctx.pairs = [{"a": a, "b": b, "value": v, "unit": "Gb/s", "status": "fail" if v < 100 else "pass"}
                 for a, b, v in (("node01", "node02", 42.0), ("node01", "node03", 190.5), ("node02", "node03", 40.0))]
    ctx.scaling = [{"label": "horovod-tf", "gpus": g, "throughput": 100.0 * g * e, "efficiency": e, "unit": "img/s"}
                   for g, e in ((1, 1.0), (2, 0.97), (4, 0.93), (8, 0.9))]
    return ctx


def test_exit_code_fail_wins_then_error_then_warn() -> None:
    ctx = context(2)
    reported(ctx, "node01")
    reported(ctx, "node02")
    assert handoff.overall_exit(ctx) == 0
    ctx.results.append(ClusterResult("cluster.straggler.bw.x", Status.WARN))
    assert handoff.overall_exit(ctx) == 1
    ctx.nodes["node02"] = NodeOutcome("node02", Status.ERROR, "auth", "auth")
    assert handoff.overall_exit(ctx) == 3
    ctx.results.append(ClusterResult("cluster.consistency.driver_version", Status.FAIL))
    assert handoff.overall_exit(ctx) == 2
    assert handoff.overall_exit(context(2)) == 3, "no node checked yet: could not check"


def test_an_interrupted_or_partial_run_is_never_a_pass() -> None:
    ctx = context(2)
    reported(ctx, "node01")
    assert handoff.overall_exit(ctx) == 3  # node02 never answered
    reported(ctx, "node02")
    assert handoff.overall_exit(ctx, interrupted=True) == 3


def test_fail_safe_only_when_every_node_is_unreachable() -> None:
    ctx = context(2)
    for name in ("node01", "node02"):
        ctx.nodes[name] = NodeOutcome(name, Status.FAIL, "unreachable: refused", "unreachable")
    handoff.fail_safe(ctx.nodes)
    assert {o.status for o in ctx.nodes.values()} == {Status.ERROR} and handoff.drain(ctx) == []
    ctx = sample_context()
    assert ctx.nodes["node04"].status == Status.FAIL


def test_drain_combines_node_failures_and_cluster_blame_with_the_prefix() -> None:
    ctx = sample_context()
    lines = dict(handoff.drain(ctx))
    assert list(lines) == ["node02", "node03", "node04"]  # inventory order
    assert lines["node02"] == "gpucheck: gpu.ecc_errors GPU3 12 uncorrected"
    assert lines["node03"] == "gpucheck: cluster.consistency.driver_version driver 535.161.08 (majority 535.183.01)"
    assert lines["node04"] == "gpucheck: unreachable: 127.0.0.1:2204: connection refused"
    # the straggler is a warning: named in the report, not drained
    straggler = next(r for r in ctx.results if r.check == "cluster.straggler.bw.nccl_allreduce")
    assert straggler.status == Status.WARN and list(straggler.nodes) == ["node02"]


def test_a_crashing_stage_is_an_error_result_not_a_crash() -> None:
    ctx = context(1)

    def broken(ctx):
        raise RuntimeError("boom")

    [result] = stages.run_stage("network", broken, ctx)
    assert result.check == "cluster.network" and result.status == Status.ERROR
    assert "RuntimeError: boom" in result.reason and "Traceback" in result.evidence
    assert "network" in ctx.timings


def doc() -> dict:
    return handoff.document(sample_context(), "2026-01-01T00:00:00+00:00", 12.5, ["gpucheck", "cluster"], True)


def test_the_document_holds_everything() -> None:
    d = doc()
    assert d["exit_code"] == 2 and d["complete"] is True
    assert d["counts"]["nodes"] == {"pass": 1, "warn": 0, "fail": 3, "skip": 0, "error": 0}
    assert d["nodes"]["node02"]["report"]["facts"]["driver_version"] == "535.183.01"
    assert d["nodes"]["node04"]["address"] == "127.0.0.1:2204"
    assert [h["name"] for h in d["inventory"]["hosts"]] == ["node01", "node02", "node03", "node04"]
    assert {"consistency", "stragglers"} <= set(d["timings"])
    json.dumps(d)  # serialisable as is


def test_junit_one_case_per_node_check_and_cluster_check() -> None:
    d = doc()
    root = ET.fromstring(render_junit(d))
    node_cases = sum(len(n["report"]["results"]) for n in d["nodes"].values() if n.get("report")) + 1  # + node04
    assert int(root.get("tests")) == node_cases + len(d["cluster"])
    node04 = root.find("testsuite[@name='gpucheck.node.node04']")
    [case] = node04.findall("testcase")
    assert case.find("error").get("message").startswith("unreachable: ")
    ecc = root.find("testsuite[@name='gpucheck.node.node02']/testcase[@name='gpu.ecc_errors']")
    assert ecc.find("failure").get("type") == "fail"
    drift = root.find("testsuite[@name='gpucheck.cluster']/testcase[@name='cluster.consistency.driver_version']")
    assert "node03: driver 535.161.08" in drift.find("failure").get("message")


def test_drain_txt_and_markdown() -> None:
    d = doc()
    assert render_drain(d).splitlines()[0] == "node02 gpucheck: gpu.ecc_errors GPU3 12 uncorrected"
    md = render_markdown(d)
    assert md.startswith("# gpucheck cluster gpucheck — FAIL (exit 2)")  # no cluster_name: Slurm's default
    unnamed = {k: v for k, v in d.items() if k != "cluster_name"}  # a report from before it named its cluster
    assert render_markdown(unnamed).startswith("# gpucheck cluster — FAIL (exit 2)")
    named = {**d, "cluster_name": "west-gpu"}
    assert render_markdown(named).startswith("# gpucheck cluster west-gpu — FAIL (exit 2)")
    assert "<title>gpucheck cluster west-gpu — FAIL</title>" in render_html(named)
    assert "<h1>gpucheck cluster west-gpu — FAIL (exit 2)</h1>" in render_html(named)
    assert "| FAIL | `cluster.consistency.driver_version` | node03: driver 535.161.08, 2 others: 535.183.01 |" in md
    assert "## Pair bandwidth" in md and "| horovod-tf | 8 | 720 img/s | 90% |" in md


def test_html_is_self_contained_with_heat_map_and_scaling_chart() -> None:
    page = render_html(doc())
    assert page.startswith("<!DOCTYPE html>")
    # no external asset of any kind: scripts, styles, images, fonts
    assert not re.search(r"""(src|href)\s*=|<link|<script|@import|url\(""", page)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * 2  # SVG namespace names only
    assert 'aria-label="pair bandwidth matrix"' in page and 'aria-label="scaling efficiency chart"' in page
    assert page.count("<rect ") >= 2 * 3  # every pair twice (symmetric matrix)
    assert "node01 - node02: 42 Gb/s" in page
    assert "<polyline" in page and ">ideal</text>" in page and "90% at 512 GPUs" in page
    assert "node04" in page and "unreachable: 127.0.0.1:2204" in page


def test_html_without_network_or_scaling_data_has_neither_section() -> None:
    ctx = context(1)
    reported(ctx, "node01")
    page = render_html(handoff.document(ctx, "t", 1.0, [], True))
    assert "pair bandwidth matrix" not in page and "scaling efficiency chart" not in page


def test_html_escapes_inventory_names() -> None:
    ctx = context(1)
    ctx.inventory.hosts[0] = Host("<script>alert(1)</script>", "127.0.0.1", 22, "root", None, (), True)
    ctx.nodes["<script>alert(1)</script>"] = NodeOutcome("<script>alert(1)</script>", Status.FAIL, "<b>x</b>",
                                                         "unreachable")
    page = render_html(handoff.document(ctx, "t", 1.0, [], True))
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_writer_writes_atomically_and_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = writer.ReportWriter(tmp_path / "r")
    out.node("node/../01", {"host": "x"})
    assert [p.name for p in (tmp_path / "r" / "nodes").iterdir()] == [writer.node_file("node/../01")[6:]]
    d = doc()
    out.write(d)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted([*writer.FILES, "nodes"])
    assert (tmp_path / "r" / "report.json").stat().st_mode & 0o777 == 0o666 & ~files.UMASK
    # a failure half-way leaves the previous file whole and no temporary file behind
    before = (tmp_path / "r" / "report.md").read_text()

    def explode(doc):
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(writer.RENDERERS, "report.md", explode)
    with pytest.raises(OSError):
        out.write(d)
    assert (tmp_path / "r" / "report.md").read_text() == before
    assert not list((tmp_path / "r").glob(".*"))


def test_terminal_summary_names_odd_nodes_drain_and_report_path() -> None:
    text = render_summary(doc(), Path("out"))
    assert "gpucheck cluster: 4 node(s): 1 pass, 3 fail" in text
    assert "  FAIL    node04: unreachable: 127.0.0.1:2204: connection refused" in text
    assert "cluster.consistency.driver_version: node03: driver 535.161.08, 2 others: 535.183.01" in text
    assert "drain (3): node02, node03, node04  -> out/drain.txt" in text
    assert text.rstrip().endswith("report: out/\nverdict: FAIL — exit 2")


def test_default_report_dir_is_a_utc_timestamp_under_the_users_state_directory(tmp_path: Path) -> None:
    import datetime as dt

    when = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)
    state = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home")}
    assert writer.default_dir(when, state) == tmp_path / "state/gpucheck/reports/gpucheck-report-20260304T050607Z"
    # XDG: a relative XDG_STATE_HOME is ignored, as an unset one
    for env in ({"HOME": str(tmp_path / "home")}, {"XDG_STATE_HOME": "state", "HOME": str(tmp_path / "home")}):
        assert writer.default_dir(when, env) == (tmp_path / "home/.local/state/gpucheck/reports/"
                                                 "gpucheck-report-20260304T050607Z")
    assert writer.default_dir(when, {}).is_absolute()  # no HOME: the password database's home, never "."


def test_a_cluster_run_without_report_writes_nothing_into_the_current_directory(tmp_path: Path) -> None:
    import os

    from cluster_helpers import free_port, run_cluster

    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  children:\n    gpu_nodes:\n      hosts:\n        node01: {{ansible_host: 127.0.0.1, "
                         f"ansible_port: {free_port()}, ansible_user: root}}\n")
    work = tmp_path / "checkout"  # where an admin runs it: often a git checkout
    work.mkdir()
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"))
    done = run_cluster(["-i", str(inventory), "--connect-timeout", "5"], cwd=work, env=env)
    assert done.returncode == 3, done.stdout + done.stderr  # node01 refuses the connection: nothing checked
    assert list(work.iterdir()) == []
    [report] = (tmp_path / "state" / "gpucheck" / "reports").glob("gpucheck-report-*/report.json")
    assert f"report in {report.parent}/" in done.stdout
    help_text = " ".join(run_cluster(["--help"]).stdout.split())
    assert "(default: $XDG_STATE_HOME/gpucheck/reports/gpucheck-report-<UTC time>/, ~/.local/state/" in help_text
    assert "never the current directory" in help_text


def test_node_files_are_unique_per_host_name(tmp_path: Path) -> None:
    names = ["n/1", "n_1", "n:1", "n 1", "..", ".hidden", "x" * 300, "x" * 301, "node01", "Node01"]
    files_ = [writer.node_file(n) for n in names]
    assert len(set(files_)) == len(names)
    assert writer.node_file("node01") == "nodes/node01.json" and writer.node_file("n_1") == "nodes/n_1.json"
    assert writer.node_file("n/1").startswith("nodes/n_1~") and "~" not in writer.safe_name("n~1")
    out = writer.ReportWriter(tmp_path / "r")
    for name in names:
        out.node(name, {"host": name})
    kept = {json.loads(p.read_text())["host"] for p in (tmp_path / "r" / "nodes").iterdir()}
    assert kept == set(names)
    assert all(not p.name.startswith(".") and len(p.name) < 255 for p in (tmp_path / "r" / "nodes").iterdir())


def test_the_document_says_which_file_holds_each_node() -> None:
    ctx = context(1)
    ctx.inventory.hosts.append(Host("n/1", "127.0.0.1", 22, "root", None, (), True))
    doc = handoff.document(ctx, "t", 1.0, [], False)
    assert doc["nodes"]["node01"]["file"] == "nodes/node01.json"
    assert doc["nodes"]["n/1"]["file"] == writer.node_file("n/1")


def test_an_interrupted_run_leaves_no_node_pending() -> None:
    ctx = context(2)
    reported(ctx, "node01")
    doc = handoff.document(ctx, "t", 1.0, [], False, interrupted=True)
    assert doc["nodes"]["node02"]["status"] == "error" and doc["exit_code"] == 3
    assert doc["nodes"]["node02"]["reason"] == "not checked: the run was interrupted"
    for render in (render_junit, render_markdown, render_html, render_drain):
        assert "pending" not in render(doc).lower()


SECRET_CASES = [
    ("-o UserKnownHostsFile=/k -o 'ProxyCommand=sshpass -p hunter2 ssh -W %h:%p jump'", "hunter2",
     "-o UserKnownHostsFile=/k -o 'ProxyCommand=[redacted]"),
    ('-o ProxyCommand="nc -X connect -x u:pw@p:3128 %h %p" -o StrictHostKeyChecking=no', "pw@",
     "-o ProxyCommand=[redacted] -o StrictHostKeyChecking=no"),
    ("-o ProxyCommand ssh -W %h:%p admin@bastion", "bastion", "-o ProxyCommand [redacted]"),
    ('ProxyCommand("sshpass -p x nc h 22") returned nonzero exit status: 1', "sshpass",
     "ProxyCommand([redacted]) returned nonzero exit status: 1"),
    ("-o PasswordAuthentication=yes -o SshPassword=letmein", "letmein", "-o PasswordAuthentication[redacted]"),
    ("sshpass -e -p 'my pw' ssh host", "my pw", "sshpass -e -p [redacted] ssh host"),
    ("sshpass -ps3cr3t ssh host", "s3cr3t", "sshpass -p[redacted] ssh host"),
    ("env HTTPS_PROXY=http://ops:pr0xy@proxy:3128 gpucheck", "pr0xy",
     "env HTTPS_PROXY=http://ops:[redacted]@proxy:3128 gpucheck"),
    ("tool --password=abc --user x", "abc", "tool --password=[redacted] --user x"),
    ("ansible_ssh_pass: hunter2\nnext line", "hunter2", "ansible_ssh_pass: [redacted]\nnext line"),
]


@pytest.mark.parametrize(("text", "secret", "written"), SECRET_CASES)
def test_redact_removes_each_kind_of_secret(text: str, secret: str, written: str) -> None:
    from gpucheck.redact import redact

    assert redact(text) == written and secret not in redact(text)


def test_redact_leaves_ordinary_text_alone() -> None:
    from gpucheck.redact import redact

    for text in ("sudo: a password is required", "https://github.com/x/y.git", "node01 passes 3 checks",
                 "unreachable: 10.0.0.1:22: connection refused", "the proxy command to h:22 failed: exit 1"):
        assert redact(text) == text


def test_the_writer_redacts_every_file_and_writes_no_nan(tmp_path: Path) -> None:
    ctx = context(2)
    ctx.inventory.hosts[1] = Host("node02", "127.0.0.1", 22, "root", None, (), True,
                                  proxy_command="sshpass -p hunter2 ssh -W %h:%p jump")
    ctx.options.remote_command = "env http_proxy=http://u:hunter2@proxy gpucheck"
    reported(ctx, "node01", measured={"bw.x": float("nan")})
    ctx.nodes["node02"] = NodeOutcome("node02", Status.ERROR, "ProxyCommand(\"sshpass -p hunter2 x\") failed", "ssh")
    out = writer.ReportWriter(tmp_path / "r")
    written = out.write(handoff.document(ctx, "t", 1.0, ["gpucheck", "--remote-command",
                                                         ctx.options.remote_command], True))
    out.node("node02", ctx.nodes["node02"].to_dict())
    for path in (tmp_path / "r").rglob("*"):
        assert path.is_dir() or "hunter2" not in path.read_text(), path
    assert written["inventory"]["hosts"][1]["proxy_command"] == "[redacted]"
    assert "hunter2" not in render_summary(written, tmp_path)

    def refuse(name: str) -> None:
        raise ValueError(name)

    doc = json.loads((tmp_path / "r" / "report.json").read_text(), parse_constant=refuse)
    assert doc["nodes"]["node01"]["report"]["results"][-1]["measured"] == "nan"


def test_renderers_take_odd_values() -> None:
    """Whatever a document holds (a hand-edited report.json, a future field), each renderer writes it."""
    doc = handoff.document(sample_context(), "t", 1.0, [], True)
    doc["nodes"]["node01"]["report"]["results"].append("not a result")
    doc["nodes"]["node01"]["report"]["facts"] = ["odd"]
    doc["nodes"]["node02"]["wall_s"] = "slow"
    doc["nodes"]["node03"]["reason"] = "a | b\r\nc \x1b[31mred\x00"
    doc["nodes"]["node04"]["evidence"] = "\x00\x07\x1b"
    doc["cluster"].append({"check": 7, "status": None, "reason": ["x"]})
    doc["pairs"].append({"a": "node01", "b": "node04", "value": "nan", "unit": "Gb/s"})
    doc["scaling"].append({"label": "x", "gpus": "?", "throughput": None, "efficiency": "nan"})
    doc["drain"].append({"node": "bad name\nnode99", "reason": "line\nbreak"})
    doc["counts"] = None
    ET.fromstring(render_junit(doc).split("\n", 1)[1])
    assert "| a \\| b c" in render_markdown(doc)
    assert "nodes" in render_html(doc)
    drained = render_drain(doc).splitlines()
    assert drained[-1] == "bad\\x20name\\x0anode99 line break" and len(drained) == len(doc["drain"])
    assert "gpucheck cluster: 4 node(s): none" in render_summary(doc, "out")
