"""Who holds a Slurm node and what each of gpucheck's six paths may do with it (drain_rule: one table, one
function; LBNL NHC's rule at its core: nobody undoes a state they did not make), the reason gpucheck writes, and
how scontrol's words are read. The whole table is walked on a real slurmctld in tests/node/test_drain_table.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucheck import drain_rule, slurm

FINDINGS = ["gpu.ecc_errors 2 uncorrected"]
# One node per holder, as scontrol shows them (slurmctld 22.05's flags: MAINTENANCE, REBOOT_*, NOT_RESPONDING).
HELD = {
    "nobody": slurm.NodeState("n1", "IDLE", ""),
    "passive": slurm.NodeState("n1", "MIXED+DRAIN", "gpucheck: gpu.xid Xid 79 on GPU2"),
    "active": slurm.NodeState("n1", "IDLE+DRAIN", "gpucheck: scheduled weekly: gpu.burn GPU3 95 °C > 87 °C"),
    "watch": slurm.NodeState("n1", "MIXED+DRAIN", "gpucheck: watch: gpu.xid GPU 0000:18:00 has fallen off the bus"),
    "upgrade": slurm.NodeState("n1", "IDLE+DRAIN", "gpucheck: upgrade to tf-horovod-r550 (driver 550.163.01)"),
    "admin-drain": slurm.NodeState("n1", "IDLE+DRAIN", "PSU swap"),
    "down": slurm.NodeState("n1", "DOWN+NOT_RESPONDING", "cable"),
    "fail": slurm.NodeState("n1", "IDLE+FAIL", "RMA 4411"),
    "maint": slurm.NodeState("n1", "IDLE+MAINTENANCE+RESERVED", ""),
    "reboot": slurm.NodeState("n1", "UNKNOWN+REBOOT_REQUESTED", "reboot requested"),
}


@pytest.mark.parametrize("state, reason, holder", [
    ("IDLE", "", "nobody"), ("ALLOCATED", "", "nobody"), ("IDLE+NOT_RESPONDING", "", "nobody"),
    ("MIXED+DRAIN", "gpucheck: gpu.xid Xid 79", "passive"), ("DOWN*+DRAIN", "gpucheck: host.disk 1 GiB", "passive"),
    ("IDLE+DRAIN", "gpucheck: cluster: gpu.burn slow", "active"),
    ("IDLE+DRAIN", "gpucheck: scheduled daily: gpu.xid Xid 48", "active"),
    ("DRAINED", "gpucheck: upgrade to r550 stopped: x", "upgrade"), ("IDLE+DRAIN", "", "admin-drain"),
    ("IDLE+DRAIN", "gpucheck: watch: gpu.ecc_errors GPU3: 2 uncorrected", "watch"),
    ("IDLE+DRAIN", "gpucheck: repair: proving: reset-gpu GPU3 done", "active"),
    ("IDLE+DRAIN", "gpucheck: needs-hands: reset-gpu GPU3 did not mend it", "active"),
    ("DOWN+DRAIN", "admin: PSU swap", "admin-drain"), ("DOWN", "admin: PSU swap", "down"), ("DOWN*", "", "down"),
    ("MIXED+FAIL", "failing DIMM", "fail"), ("IDLE+MAINT", "", "maint"), ("IDLE+MAINTENANCE+RESERVED", "", "maint"),
    ("IDLE+MAINT+DRAIN", "gpucheck: gpu.xid x", "maint"), ("DOWN+REBOOT_ISSUED", "reboot issued", "reboot"),
    ("IDLE+DRAIN+REBOOT_REQUESTED", "gpucheck: gpu.xid x", "reboot"),
    # a check id that starts like a head is still a passive check's
    ("IDLE+DRAIN", "gpucheck: upgraded.x y", "passive"),
])
def test_who_holds_a_node_comes_from_its_flags_then_its_reason(state, reason, holder):
    assert drain_rule.holder_of(slurm.NodeState("n1", state, reason)) == holder


@pytest.mark.parametrize("holder", list(drain_rule.HOLDERS))
@pytest.mark.parametrize("path", list(drain_rule.PATHS))
def test_decide_follows_the_table(holder, path):
    for verdict, verb in zip(drain_rule.VERDICTS, drain_rule.RULES[holder][drain_rule.PATHS[path][0]], strict=True):
        action = drain_rule.decide(HELD[holder], path, verdict, FINDINGS, "weekly")
        assert (action.verb, action.holder) == (verb, holder), (verdict, action)
        if verb == "drain":
            assert action.reason == drain_rule.drain_reason(FINDINGS, drain_rule.head_of(path, "weekly"))


def test_the_holes_the_table_closes():
    """Each of these once put a faulty node back into service or undid an admin's state (issue 35)."""
    def verb(holder: str, path: str, verdict: str) -> str:
        return drain_rule.decide(HELD[holder], path, verdict, FINDINGS, "weekly").verb

    # A scheduled check's drain outlives the passive checks: their failure does not overwrite it (their next pass
    # would then have resumed it), and their pass does not resume it; cluster --drain is an active check too.
    for path in ("health-check", "prolog"):
        assert verb("active", path, "fail") == verb("active", path, "pass") == "keep"
    assert drain_rule.holder_of(slurm.NodeState("n1", "IDLE+DRAIN", drain_rule.drain_reason(
        FINDINGS, drain_rule.head_of("cluster")))) == "active"
    # The upgrade: an admin's DOWN or FAIL is not its own, nor is an active check's drain.
    for holder in ("down", "fail", "active", "admin-drain"):
        assert verb(holder, "upgrade", "fail") == verb(holder, "upgrade", "pass") == "keep"
    # A pending reboot: a resume would cancel it (measured on slurmctld 22.05), a drain would replace its reason.
    assert {verb("reboot", path, v) for path in drain_rule.PATHS for v in drain_rule.VERDICTS} == {"keep"}
    # The watcher's drain waits for proof: no passive pass resumes it, the watcher never resumes anything, and an
    # active check's pass does; a passive drain it meets is made its own (it saw the fault as it happened).
    for path in ("health-check", "prolog", "watch", "upgrade"):
        assert verb("watch", path, "pass") == "keep"
    assert {verb(holder, "watch", "pass") for holder in drain_rule.HOLDERS} == {"keep"}
    assert verb("watch", "scheduled", "pass") == verb("watch", "cluster", "pass") == "resume"
    assert verb("passive", "watch", "fail") == "drain" and verb("active", "watch", "fail") == "keep"
    kept = drain_rule.decide(HELD["active"], "health-check", "pass", [])
    assert "a passive check cannot see what it saw" in kept.reason
    assert "scontrol update nodename=n1 state=resume" in kept.reason


def test_docs_slurm_md_shows_the_table_the_code_follows():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "slurm.md").read_text()
    assert drain_rule.render_table() in docs, "docs/slurm.md's table differs: paste `gpucheck slurm table` there"


def test_the_same_failure_again_leaves_the_drain_as_it_is():
    reason = drain_rule.drain_reason(["gpu.xid Xid 79 on GPU2"])
    assert reason == HELD["passive"].reason
    assert drain_rule.decide(HELD["passive"], "health-check", "fail", ["gpu.xid Xid 79 on GPU2"]).verb == "keep"
    scheduled = drain_rule.decide(HELD["nobody"], "scheduled", "fail", ["gpu.burn GPU3 95 °C > 87 °C"], "weekly")
    assert scheduled.reason == "gpucheck: scheduled weekly: gpu.burn GPU3 95 °C > 87 °C"


def test_exit_codes_map_to_verdicts_and_warnings_are_no_reason_to_drain():
    assert [drain_rule.verdict_of(code) for code in (0, 1, 2, 3)] == ["pass", "pass", "fail", "error"]


def test_an_observed_failure_is_not_named_among_a_drains_reasons():
    """A node failing a counted check and an observed one is drained for the counted one only."""
    from gpucheck.model import Result, Status

    results = [Result("gpu.ecc_errors", Status.FAIL, reason="GPU3: 2 uncorrected"),
               Result("gpu.temperature", Status.FAIL, reason="observed only (would drain): GPU1 91 C", observed=True)]
    assert drain_rule.findings(results) == ["gpu.ecc_errors GPU3: 2 uncorrected"]


def test_the_reason_is_one_line_with_the_prefix_and_bounded():
    reason = drain_rule.drain_reason(["gpu.ecc_errors GPU3:\n2 errors", "host.disk " + "x" * 400])
    assert reason == "gpucheck: gpu.ecc_errors GPU3: 2 errors; host.disk…"  # no word cut: the long one left out
    findings = [f"gpu.clocks GPU{i}: hw_thermal_slowdown at 94 °C" for i in range(8)]
    reason = drain_rule.drain_reason(findings)
    whole = " ".join(["gpucheck:", *"; ".join(findings).split()])
    assert reason.endswith("…") and len(reason) <= drain_rule.REASON_MAX and "\n" not in reason
    assert whole.startswith(reason[:-1]) and whole[len(reason) - 1] in " ;"  # it stops after a whole word
    assert len(drain_rule.drain_reason(["x" * 400])) == drain_rule.REASON_MAX  # one word wider than the room


def test_show_node_reads_state_and_the_whole_reason(fake_bin, monkeypatch):
    """scontrol show node as Slurm 22.05 prints it for a drained node (recorded on Debian 12's slurm-wlm)."""
    fake_bin.add("scontrol", "NodeName=gpu-a Arch=x86_64 CoresPerSocket=1 \n"
                             "   CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.70\n"
                             "   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
                             "   Partitions=batch \n"
                             "   Reason=gpucheck: gpu.ecc_errors 3 uncorrected [root@2026-11-23T19:15:55]\n")
    monkeypatch.setenv("PATH", fake_bin.path())
    node = slurm.show_node("gpu-a")
    assert node == slurm.NodeState("gpu-a", "IDLE+DRAIN", "gpucheck: gpu.ecc_errors 3 uncorrected",
                                   reason_at="2026-11-23T19:15:55")  # when, for the breaker
    assert node.drained and drain_rule.holder_of(node) == "passive"


def test_a_comment_that_says_reason_is_not_the_reason(fake_bin, monkeypatch):
    """The Reason line is the record's own; an admin's Comment above it that holds "Reason=" is not read as one."""
    fake_bin.add("scontrol", "NodeName=gpu-a Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
                             "   Comment=moved Reason=gpucheck: gpu.x y\n"
                             "   Reason=PSU swap [root@2026-11-23T19:15:55]\n")
    monkeypatch.setenv("PATH", fake_bin.path())
    assert drain_rule.holder_of(slurm.show_node("gpu-a")) == "admin-drain"


@pytest.mark.parametrize("said, meaning", [
    ("slurm_load_node error: Unable to contact slurm controller (connect failure)", "slurmctld does not answer"),
    ("Node nosuch not found", "Slurm does not know node n1"),
    ("slurm_update error: Invalid user id", "not allowed to change node states"),
    ("slurm_update error: Invalid node state specified", "Slurm refused to change the state of n1"),
    ("scontrol: error: Munge encode failed: Failed to access", "munge refused the request"),
    ("something new", "scontrol show node exited 1: something new"),
])
def test_every_refusal_is_one_line_saying_what_it_means(fake_bin, monkeypatch, said, meaning):
    fake_bin.add("scontrol", said, 1)
    monkeypatch.setenv("PATH", fake_bin.path())
    with pytest.raises(slurm.SlurmError) as caught:
        slurm.show_node("n1")
    assert str(caught.value).startswith(meaning) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["gpu-[01-26]", "a,b", "gpu-*", "gpu-0?", "gpu 1", "", "n=1"])
def test_a_name_that_is_not_one_node_is_refused_before_scontrol_is_asked(fake_bin, monkeypatch, name):
    """`scontrol update nodename=gpu-[01-26]` drains 26 nodes: gpucheck acts on exactly the node it judged."""
    log = fake_bin.dir / "called"
    fake_bin.add("scontrol", "NodeName=x State=IDLE\n")
    (fake_bin.dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> '{log}'\n")
    monkeypatch.setenv("PATH", fake_bin.path())
    for attempt in (lambda: slurm.show_node(name), lambda: slurm.this_node(name),
                    lambda: drain_rule.apply(drain_rule.Action("drain", name, "gpucheck: x"))):
        with pytest.raises(slurm.SlurmError, match="is not one Slurm node name"):
            attempt()
    assert not log.exists()


def test_a_refused_drain_says_drain_not_resume(fake_bin, monkeypatch):
    fake_bin.add("scontrol", "slurm_update error: Invalid node state specified", 1)
    monkeypatch.setenv("PATH", fake_bin.path())
    with pytest.raises(slurm.SlurmError) as caught:
        drain_rule.apply(drain_rule.Action("drain", "n1", "gpucheck: x"))
    assert str(caught.value).startswith("Slurm refused to drain n1:") and "resume" not in str(caught.value)


def test_gpucheck_slurm_refuses_a_hostlist_and_an_empty_reason_in_one_line(capsys):
    from gpucheck.main import main

    assert main(["slurm", "show", "gpu-[01-26]"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("gpucheck: slurm: 'gpu-[01-26]' is not one Slurm node name") and err.count("\n") == 1
    with pytest.raises(SystemExit) as done:
        main(["slurm", "apply", "gpu-a", "--as", "cluster", "--fail", " "])
    assert done.value.code == 3 and "--fail needs a reason" in capsys.readouterr().err
    assert main(["slurm", "table"]) == 0 and capsys.readouterr().out == drain_rule.render_table()
