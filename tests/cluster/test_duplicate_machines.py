"""Two inventory entries that reach the same machine: the agent says which machine it ran on (facts.machine),
and `gpucheck cluster` names both entries, the later one an error left out of the stages (cluster/duplicates.py)."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import LoopbackSshd, load_report, node_report, run_cluster, write_inventory

from gpucheck.cluster import duplicates, handoff, nodes
from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.stages import order as stages
from gpucheck.model import Status
from gpucheck.node import Context, identity, pipeline
from gpucheck.profiles import load
from gpucheck.report.cluster.junit import render_junit
from gpucheck.report.cluster.summary import render_summary

MACHINE_A, MACHINE_B = "4c4c4544004d3510804cb4c04f4d3332", "9f0e2d1c3b4a59687766554433221100"
BOOT_1, BOOT_2 = "2f1e4b8a-6d3c-4e5f-9a0b-1c2d3e4f5a6b", "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d"
GPUS_A = ["GPU-b27db3ff-a991-550d-6c5a-50887329a33f", "GPU-15c4aacf-f76d-fc94-1613-35654ddce444"]
GPUS_B = ["GPU-aa789da6-caee-3d35-c597-a79bfa8aff2f", "GPU-eb1b57b5-2baa-14f9-d653-f3c8926fc103"]


def machine_report(host: str, machine_id: str | None, boot_id: str | None, gpus: list[str],
                   **kwargs: Any) -> dict[str, Any]:
    report = node_report(host, gpus=len(gpus), **kwargs)
    report["facts"]["machine"] = {"machine_id": machine_id, "boot_id": boot_id, "gpu_uuids": gpus}
    return report


def context(reports: dict[str, dict[str, Any] | None]) -> ClusterContext:
    """node -> its report (None: unreachable), every node in the inventory in this order."""
    hosts = [Host(name, "127.0.0.1", 2200 + i, "root", None, (), True) for i, name in enumerate(reports, 1)]
    ctx = ClusterContext(Options(), Inventory(["hosts.yml"], "gpu_nodes", None, hosts))
    for name, report in reports.items():
        if report is None:
            ctx.nodes[name] = NodeOutcome(name, Status.FAIL, "unreachable: connection refused", "unreachable")
        else:
            status = {0: Status.PASS, 1: Status.WARN, 2: Status.FAIL, 3: Status.ERROR}[report["exit_code"]]
            ctx.nodes[name] = NodeOutcome(name, status, "all 2 checks pass or skip", "report", 1.0,
                                          report["exit_code"], report)
    return ctx


def mark(ctx: ClusterContext) -> list[str]:
    return duplicates.mark(ctx.nodes, [h.name for h in ctx.inventory.hosts])


# ---------------------------------------------------------------- the verdict

def test_the_same_gpu_uuids_make_the_second_entry_an_error_naming_the_first() -> None:
    ctx = context({"node01": machine_report("node01", MACHINE_A, BOOT_1, GPUS_A),
                   "node01-alias": machine_report("node01-alias", None, None, GPUS_A)})  # its ids unreadable
    assert mark(ctx) == ["node01-alias"]
    first, second = ctx.nodes["node01"], ctx.nodes["node01-alias"]
    assert first.status == Status.PASS and first.report is not None  # the first keeps its verdict
    assert second.status == Status.ERROR and second.kind == duplicates.KIND and second.report is None
    assert second.reason.startswith("the same machine as node01 (GPU UUIDs GPU-15c4aacf… and 1 more)")
    assert "\n" not in second.reason
    assert "its own report: pass" in second.evidence
    assert handoff.overall_exit(ctx) == 3  # could not check everything (the inventory), not a failure


@pytest.mark.parametrize("liar_first", [True, False], ids=["the-liar-first", "the-liar-second"])
def test_a_node_that_claims_another_nodes_gpu_sets_neither_aside(liar_first: bool) -> None:
    """A node can say anything: one that listed another machine's GPU UUID used to get that machine's real failure
    set aside as a duplicate's (never drained). Both keep their verdicts; each is told of the other."""
    honest = machine_report("node02", MACHINE_B, BOOT_2, GPUS_B, fail={"gpu.ecc_errors": "GPU1: 2 uncorrected"})
    liar = machine_report("node01", MACHINE_A, BOOT_1, [GPUS_A[0], GPUS_B[1]])
    ctx = context({"node01": liar, "node02": honest} if liar_first else {"node02": honest, "node01": liar})
    assert mark(ctx) == []
    assert ctx.nodes["node02"].status == Status.FAIL and ctx.nodes["node02"].report is not None
    assert [node for node, _ in handoff.drain(ctx)] == ["node02"]  # the real failure is drained
    assert ctx.nodes["node01"].status == Status.WARN  # a finding about both
    for name, other in (("node01", "node02"), ("node02", "node01")):
        assert (f"its machine facts contradict {other}'s (GPU UUID GPU-eb1b57b5…, from another machine by its ids)"
                in ctx.nodes[name].reason), ctx.nodes[name].reason


def test_one_machine_id_and_boot_id_with_other_gpus_is_no_duplicate() -> None:
    """Two hosts answering with the same ids (a copied /etc/machine-id and a forged boot id) but other GPUs: the
    second's failure used to be set aside as a duplicate's, never drained."""
    ctx = context({"a": machine_report("a", MACHINE_A, BOOT_1, GPUS_A),
                   "b": machine_report("b", MACHINE_A, BOOT_1, GPUS_B, fail={"gpu.xid": "Xid 79"})})
    assert mark(ctx) == []
    assert [node for node, _ in handoff.drain(ctx)] == ["b"]
    assert "the same machine id and boot id with other GPUs" in ctx.nodes["a"].reason
    assert ctx.nodes["a"].status == Status.WARN and ctx.nodes["b"].status == Status.FAIL


def test_the_same_machine_id_and_boot_id_is_one_machine() -> None:
    ctx = context({"a": machine_report("a", MACHINE_A, BOOT_1, GPUS_A),
                   "b": machine_report("b", MACHINE_A, BOOT_1, [])})  # its agent saw no GPU: the ids suffice
    assert mark(ctx) == ["b"]
    assert ctx.nodes["b"].reason.startswith("the same machine as a (machine id 4c4c4544…, boot id 2f1e4b8a…): ")


def test_both_ids_and_the_gpus_are_all_said() -> None:
    ctx = context({"a": machine_report("a", MACHINE_A, BOOT_1, GPUS_A),
                   "b": machine_report("b", MACHINE_A, BOOT_1, GPUS_A)})
    mark(ctx)
    assert "(machine id 4c4c4544…, boot id 2f1e4b8a…; GPU UUIDs GPU-15c4aacf… and 1 more)" in ctx.nodes["b"].reason


@pytest.mark.parametrize("b_ids", [(MACHINE_A, BOOT_2), (MACHINE_B, BOOT_1), (None, None), (MACHINE_A, None)],
                         ids=["cloned-image", "containers-on-one-kernel", "ids-unreadable", "boot-id-unreadable"])
def test_one_id_alone_is_not_one_machine(b_ids: tuple[str | None, str | None]) -> None:
    ctx = context({"a": machine_report("a", MACHINE_A, BOOT_1, GPUS_A),
                   "b": machine_report("b", *b_ids, GPUS_B)})
    assert mark(ctx) == []
    assert [o.status for o in ctx.nodes.values()] == [Status.PASS, Status.PASS]
    assert handoff.overall_exit(ctx) == 0


def test_an_older_agent_that_says_nothing_of_its_machine_is_left_alone() -> None:
    ctx = context({"a": node_report("a"), "b": node_report("b"), "c": None})
    assert mark(ctx) == []
    assert [o.kind for o in ctx.nodes.values()] == ["report", "report", "unreachable"]


def test_odd_machine_facts_are_no_evidence_and_no_crash() -> None:
    odd = [machine_report("a", MACHINE_A, BOOT_1, GPUS_A) for _ in range(3)]
    odd[0]["facts"]["machine"] = "not a mapping"
    odd[1]["facts"]["machine"] = {"machine_id": 7, "boot_id": ["x"], "gpu_uuids": "GPU-1"}
    odd[2]["facts"]["machine"] = {"machine_id": " ", "boot_id": "", "gpu_uuids": [None, 3, ""]}
    ctx = context({"a": odd[0], "b": odd[1], "c": odd[2]})
    assert mark(ctx) == []


def test_ids_a_node_printed_stay_one_line() -> None:
    odd_id = "ab\ncd\x1b[2J"
    ctx = context({"a": machine_report("a", odd_id, BOOT_1, []), "b": machine_report("b", odd_id, BOOT_1, [])})
    mark(ctx)
    assert "\n" not in ctx.nodes["b"].reason and "\x1b" not in ctx.nodes["b"].reason


def test_of_three_entries_the_two_that_are_one_machine_are_named_and_counted_once() -> None:
    ctx = context({"node01": machine_report("node01", MACHINE_A, BOOT_1, GPUS_A),
                   "node02": machine_report("node02", MACHINE_B, BOOT_1, GPUS_B),
                   "node03": machine_report("node03", MACHINE_A, BOOT_1, GPUS_A, driver="535.161.08")})
    assert mark(ctx) == ["node03"]
    assert [ctx.nodes[n].status for n in ("node01", "node02", "node03")] == [Status.PASS, Status.PASS, Status.ERROR]
    assert ctx.nodes["node03"].reason.startswith("the same machine as node01 ")
    assert ctx.checked() == ["node01", "node02"]  # the stages and the stragglers count the machine once
    taking_part = nodes.participants(ctx)
    assert taking_part.nodes == ["node01", "node02"]
    assert taking_part.left_out["node03"].startswith("the same machine as node01 ")  # not "no report: ..."
    for name, stage in stages.STAGES:
        if name in ("consistency", "stragglers"):
            stages.run_stage(name, stage, ctx)
    driver = next(r for r in ctx.results if r.check == "cluster.consistency.driver_version")
    assert driver.status == Status.PASS and "all 2 nodes" in driver.reason  # node03's copy is not a third vote
    assert handoff.drain(ctx) == [] and handoff.overall_exit(ctx) == 3


def test_a_third_entry_names_the_first_it_matches_in_inventory_order() -> None:
    ctx = context({"a": machine_report("a", MACHINE_A, BOOT_1, GPUS_A),
                   "b": machine_report("b", MACHINE_A, BOOT_1, GPUS_A),
                   "c": machine_report("c", None, None, GPUS_A)})
    assert mark(ctx) == ["b", "c"]
    assert ctx.nodes["b"].reason.startswith("the same machine as a ")
    assert ctx.nodes["c"].reason.startswith("the same machine as a (GPU UUIDs GPU-15c4aacf… and 1 more)")


def test_every_report_format_shows_the_error_on_the_second_entry() -> None:
    ctx = context({"node01": machine_report("node01", MACHINE_A, BOOT_1, GPUS_A),
                   "node02": machine_report("node02", MACHINE_A, BOOT_1, GPUS_A)})
    mark(ctx)
    doc = handoff.document(ctx, "2026-01-01T00:00:00+00:00", 1.0, ["gpucheck", "cluster"], complete=True)
    assert doc["exit_code"] == 3 and doc["counts"]["nodes"]["error"] == 1 and doc["drain"] == []
    entry = doc["nodes"]["node02"]
    assert (entry["status"], entry["kind"], entry["report"]) == ("error", "duplicate", None)
    case = ET.fromstring(render_junit(doc)).find("testsuite[@name='gpucheck.node.node02']/testcase/error")
    assert case.get("type") == "duplicate" and case.get("message").startswith("the same machine as node01 ")
    assert "ERROR   node02: the same machine as node01 (" in render_summary(doc, "/tmp/r")


# ---------------------------------------------------------------- end to end: two entries, one sshd port

def test_two_inventory_entries_reaching_one_host_are_named_and_exit_3(sshd: LoopbackSshd, tmp_path: Path) -> None:
    one, other = sshd.ports[:2]
    sshd.report(one, machine_report("gpu01", MACHINE_A, BOOT_1, GPUS_A))
    sshd.report(other, machine_report("gpu02", MACHINE_B, BOOT_1, GPUS_B))
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, {
        "node01": {"ansible_port": one}, "node02": {"ansible_port": other}, "gpu01-bmc-alias": {"ansible_port": one}})
    report = tmp_path / "report"
    done = run_cluster(["-i", str(inventory), "--remote-command", str(sshd.agent), "--report", str(report)],
                       cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    doc = load_report(report)
    assert [n["status"] for n in doc["nodes"].values()] == ["pass", "pass", "error"]
    reason = doc["nodes"]["gpu01-bmc-alias"]["reason"]
    assert reason.startswith("the same machine as node01 (machine id 4c4c4544…, boot id 2f1e4b8a…; GPU UUIDs ")
    assert f"ERROR   gpu01-bmc-alias: {reason}" in done.stdout
    own_file = json.loads((report / "nodes" / "gpu01-bmc-alias.json").read_text())
    assert own_file["status"] == "error" and own_file["kind"] == "duplicate"
    assert (report / "drain.txt").read_text() == ""


# ---------------------------------------------------------------- the agent's side

@pytest.fixture
def fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /proc with a boot id (GPUCHECK_PROC_ROOT) and machine-id files under tmp_path."""
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(BOOT_1 + "\n")
    monkeypatch.setenv("GPUCHECK_PROC_ROOT", str(proc))
    monkeypatch.setattr(identity, "MACHINE_ID_FILES", (tmp_path / "etc-machine-id", tmp_path / "dbus-machine-id"))
    return tmp_path


def test_the_node_report_says_which_machine_it_ran_on(fake_machine: Path) -> None:
    (fake_machine / "etc-machine-id").write_text(MACHINE_A + "\n")
    nvml = {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": GPUS_A[0]},
                     {"index": 1, "lost": True, "uuid": GPUS_A[1]},  # a lost GPU is still this machine's
                     {"index": 2, "uuid": None}]}
    ctx = Context(facts={"nvml": nvml})
    facts = pipeline.summary_facts(ctx, load("generic"), pipeline.Gatherer(ctx))
    assert facts["machine"] == {"machine_id": MACHINE_A, "boot_id": BOOT_1, "gpu_uuids": GPUS_A}
    json.dumps(facts)  # it travels in the JSON report


def test_the_dbus_machine_id_is_the_fallback_and_what_cannot_be_read_is_none(fake_machine: Path) -> None:
    (fake_machine / "etc-machine-id").write_text("uninitialized\n")  # systemd's before the first boot completes
    (fake_machine / "dbus-machine-id").write_text(MACHINE_B + "\n")
    assert identity.machine({}) == {"machine_id": MACHINE_B, "boot_id": BOOT_1, "gpu_uuids": []}
    (fake_machine / "dbus-machine-id").write_text("")
    (fake_machine / "proc" / "sys" / "kernel" / "random" / "boot_id").unlink()
    assert identity.machine({"gpus": []}) == {"machine_id": None, "boot_id": None, "gpu_uuids": []}


def test_reading_the_ids_is_cheap(fake_machine: Path) -> None:
    (fake_machine / "etc-machine-id").write_text("f" * 10_000_000)  # not an id: read no further than one
    began = time.monotonic()
    assert identity.machine_id() is None
    assert time.monotonic() - began < 0.5
