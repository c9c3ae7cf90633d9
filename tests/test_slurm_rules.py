"""The rule gpucheck follows in Slurm (slurm.decide, LBNL NHC's): drain on a failure unless someone else drained
the node, resume only gpucheck's own drain on a pass, change nothing on a harness error; and the reason it writes."""

from __future__ import annotations

import pytest

from gpucheck import slurm

ADMIN = slurm.NodeState("n1", "IDLE+DRAIN", "PSU swap")
OURS = slurm.NodeState("n1", "MIXED+DRAIN", "gpucheck: gpu.xid Xid 79 on GPU2")
UP = slurm.NodeState("n1", "IDLE", "")
DOWN_OURS = slurm.NodeState("n1", "DOWN*+DRAIN", "gpucheck: host.disk / 1.2 GiB free")


@pytest.mark.parametrize("current, verdict, verb", [
    (UP, "fail", "drain"), (OURS, "fail", "drain"), (ADMIN, "fail", "keep"), (DOWN_OURS, "fail", "drain"),
    (UP, "pass", "keep"), (OURS, "pass", "resume"), (ADMIN, "pass", "keep"), (DOWN_OURS, "pass", "resume"),
    (UP, "error", "keep"), (OURS, "error", "keep"), (ADMIN, "error", "keep"),
])
def test_the_rule(current, verdict, verb):
    assert slurm.decide(current, verdict, ["gpu.ecc_errors 2 uncorrected"]).verb == verb


@pytest.mark.parametrize("verdict", ["pass", "fail"])
def test_a_node_the_rolling_upgrade_drained_is_left_to_the_upgrade(verdict):
    """Half-way through its upgrade (or stopped by one) a node may pass the passive checks: a health check that
    resumed it would hand a half-upgraded node to jobs; one that failed would hide the upgrade's reason."""
    upgrading = slurm.NodeState("n1", "IDLE+DRAIN", "gpucheck: upgrade to tf-horovod-r550 (driver 550.163.01)")
    action = slurm.decide(upgrading, verdict, ["gpu.driver NVML version mismatch"])
    assert action.verb == "keep" and "only the upgrade (playbooks/upgrade.yml) resumes it" in action.reason
    resumed = slurm.NodeState("n1", "IDLE", "gpucheck: upgrade to tf-horovod-r550 (driver 550.163.01)")
    assert slurm.decide(resumed, "fail", ["gpu.xid Xid 79"]).verb == "drain"  # a reason left from before: no drain


def test_a_scheduled_checks_drain_says_so_and_only_an_admin_or_another_scheduled_pass_clears_it():
    """A scheduled burn-in saw what the passive health check cannot (a GPU too hot under load): the health check's
    pass every 5 minutes must not hand the node back to jobs."""
    action = slurm.decide(UP, "fail", ["gpu.burn GPU3 hottest sample 95 C > 87 C"], scheduled="weekly")
    assert (action.verb, action.reason) == ("drain", "gpucheck: scheduled weekly: gpu.burn GPU3 hottest sample 95 C "
                                                     "> 87 C")
    drained = slurm.NodeState("n1", "IDLE+DRAIN", action.reason)
    assert drained.ours and drained.drained_by_scheduled_check
    kept = slurm.decide(drained, "pass", [])
    assert kept.verb == "keep" and "drained by a scheduled active check" in kept.reason
    assert "scontrol update nodename=n1 state=resume" in kept.reason
    assert slurm.decide(drained, "pass", [], scheduled="daily").verb == "resume"
    assert slurm.decide(drained, "fail", ["gpu.xid Xid 79"]).verb == "drain"  # a new fault, seen passively: said


def test_the_same_failure_again_leaves_the_drain_as_it_is():
    reason = slurm.drain_reason(["gpu.xid Xid 79 on GPU2"])
    assert reason == OURS.reason
    assert slurm.decide(OURS, "fail", ["gpu.xid Xid 79 on GPU2"]).verb == "keep"


def test_exit_codes_map_to_verdicts_and_warnings_are_no_reason_to_drain():
    assert [slurm.verdict_of(code) for code in (0, 1, 2, 3)] == ["pass", "pass", "fail", "error"]


def test_the_reason_is_one_line_with_the_prefix_and_bounded():
    reason = slurm.drain_reason(["gpu.ecc_errors GPU3:\n2 errors", "host.disk " + "x" * 400])
    assert reason.startswith("gpucheck: gpu.ecc_errors GPU3: 2 errors; host.disk xxx") and "\n" not in reason
    assert len(reason) == slurm.REASON_MAX and reason.endswith("…")


def test_show_node_reads_state_and_the_whole_reason(fake_bin, monkeypatch):
    """scontrol show node as Slurm 22.05 prints it for a drained node (recorded on Debian 12's slurm-wlm)."""
    fake_bin.add("scontrol", "NodeName=gpu-a Arch=x86_64 CoresPerSocket=1 \n"
                             "   CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.70\n"
                             "   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
                             "   Partitions=batch \n"
                             "   Reason=gpucheck: gpu.ecc_errors 3 uncorrected [root@2026-11-23T19:15:55]\n")
    monkeypatch.setenv("PATH", fake_bin.path())
    node = slurm.show_node("gpu-a")
    assert node == slurm.NodeState("gpu-a", "IDLE+DRAIN", "gpucheck: gpu.ecc_errors 3 uncorrected")
    assert node.drained and node.ours


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


@pytest.mark.parametrize("state, reason", [
    ("DOWN", "admin: PSU swap"), ("DOWN+DRAIN", "admin: PSU swap"), ("FAIL", "RMA 4411"), ("IDLE+MAINT", ""),
    ("MIXED+FAIL", "failing DIMM"), ("DOWN*", "Not responding"), ("IDLE+MAINT+DRAIN", "firmware"),
])
def test_a_node_someone_else_took_out_of_service_is_never_drained_over_or_resumed(state, reason):
    """An admin's DOWN, FAIL or MAINT (with or without DRAIN) was drained over with a gpucheck: reason and later
    resumed: their state is theirs to end."""
    node = slurm.NodeState("n1", state, reason)
    for verdict in ("fail", "pass", "error"):
        action = slurm.decide(node, verdict, ["gpu.ecc_errors 2 uncorrected"])
        assert action.verb == "keep", (verdict, action)
    assert f"already {state} by someone else" in slurm.decide(node, "fail", ["x"]).reason


@pytest.mark.parametrize("name", ["gpu-[01-26]", "a,b", "gpu-*", "gpu-0?", "gpu 1", "", "n=1"])
def test_a_name_that_is_not_one_node_is_refused_before_scontrol_is_asked(fake_bin, monkeypatch, name):
    """`scontrol update nodename=gpu-[01-26]` drains 26 nodes: gpucheck acts on exactly the node it judged."""
    log = fake_bin.dir / "called"
    fake_bin.add("scontrol", "NodeName=x State=IDLE\n")
    (fake_bin.dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> '{log}'\n")
    monkeypatch.setenv("PATH", fake_bin.path())
    for attempt in (lambda: slurm.show_node(name), lambda: slurm.apply(slurm.Action("drain", name, "gpucheck: x"))):
        with pytest.raises(slurm.SlurmError, match="is not one Slurm node name"):
            attempt()
    assert not log.exists()


def test_a_refused_drain_says_drain_not_resume(fake_bin, monkeypatch):
    fake_bin.add("scontrol", "slurm_update error: Invalid node state specified", 1)
    monkeypatch.setenv("PATH", fake_bin.path())
    with pytest.raises(slurm.SlurmError) as caught:
        slurm.apply(slurm.Action("drain", "n1", "gpucheck: x"))
    assert str(caught.value).startswith("Slurm refused to drain n1:") and "resume" not in str(caught.value)
