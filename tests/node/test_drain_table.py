"""Every cell of docs/slurm.md's table (drain_rule.RULES), path by path, against a real slurmctld (tests/slurmkit.py):
the node is put in each holder's state with scontrol, each of the seven paths is given a failure, a pass and a
could-not-judge through its own code (the health check's and a prolog's `--slurm`, a scheduled check's, `gpucheck
cluster --drain`'s, the watcher's and its repair's drain_rule.tell, the upgrade's `gpucheck slurm apply`), and
Slurm's state after says what was done."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

import slurmkit
from gpucheck import drain_rule, tell
from gpucheck.cluster.slurm.drain import apply_verdicts
from gpucheck.main import main
from gpucheck.model import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, Status

REBOOTING = "gpu-r"  # no slurmd: a reboot asked for stays pending
# No slurmd either (slurmkit gives both a port nothing listens on): an admin's DOWN stays; were the next ping
# answered, ReturnToService=2 would put the node back in service at once.
DOWN = "gpu-d"
FINDING = "gpu.ecc_errors GPU3: 2 uncorrected"
UPGRADE = "to tf-horovod-r550 (driver 550.163.01)"
# The state each holder leaves on a node (scontrol update ... ), for the holders a drain or a state makes.
DRAINS = {"passive": "gpucheck: gpu.xid Xid 79 on GPU2", "active": "gpucheck: scheduled weekly: gpu.burn GPU3 95 °C",
          "watch": "gpucheck: watch: gpu.xid Xid 79 on 0000:18:00",
          "upgrade": "gpucheck: upgrade to tf-horovod-r550 (driver 550.163.01)", "admin-drain": "PSU swap"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm"), (REBOOTING, DOWN)) as cluster:
        yield cluster


def wait_for(check, what: str, cluster) -> None:
    deadline = time.monotonic() + 60
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"slurmctld never showed {what}:\n{cluster.log()}")
        time.sleep(0.2)


def hold(cluster, node: str, holder: str) -> None:
    """Put `node` in `holder`'s state: back in service first, then that holder's drain or state."""
    if holder == "down":
        cluster.set(node, state="down", reason="admin: cable")  # from whatever state it is in
        return
    if any(flag in cluster.state(node)[0] for flag in ("DRAIN", "DOWN", "FAIL")) and holder != "reboot":
        cluster.set(node, state="resume")
    if holder in DRAINS:
        cluster.set(node, state="drain", reason=DRAINS[holder])
    elif holder == "fail":
        cluster.set(node, state="fail", reason="admin: RMA 4411")


def report(verdict: str) -> SimpleNamespace:
    status = {"fail": Status.FAIL, "pass": Status.PASS, "error": Status.ERROR}[verdict]
    code = {"fail": EXIT_FAIL, "pass": EXIT_OK, "error": EXIT_UNKNOWN}[verdict]
    return SimpleNamespace(exit_code=code, facts={}, results=[SimpleNamespace(check="gpu.ecc_errors", status=status,
                                                                              reason="GPU3: 2 uncorrected")])


def shown_holder(node: str, capsys) -> str:
    """Who holds `node`, as `gpucheck slurm show --format json` says it (what the rolling upgrade reads)."""
    capsys.readouterr()
    assert main(["slurm", "show", node, "--format", "json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)["holder"]


def run_path(path: str, node: str, verdict: str, monkeypatch) -> None:
    """The path's own code, as it runs in production, told `verdict` about `node`."""
    if path in ("health-check", "scheduled"):
        told = report(verdict)
        code = tell.slurm(node, told, "weekly" if path == "scheduled" else None)
        assert told.facts["slurm"]["path"] == path  # the kept report says what was done (history's transitions)
    elif path == "prolog":
        with monkeypatch.context() as env:
            env.setenv("SLURMD_NODENAME", node)
            env.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
            code = tell.slurm(None, report(verdict))
    elif path == "cluster":
        _, error = apply_verdicts({node: (node, verdict, [FINDING] if verdict == "fail" else [])})
        code = EXIT_UNKNOWN if error else EXIT_OK
    elif path in ("watch", "repair"):  # what gpucheck watch and its repair call with the report of what they ran
        run = report(verdict)
        drain_rule.tell(path, run.exit_code, drain_rule.findings(run.results), node)
        code = EXIT_OK
    else:
        said = {"fail": ["--fail", UPGRADE], "pass": ["--pass"], "error": ["--error"]}[verdict]
        code = main(["slurm", "apply", node, "--as", "upgrade", *said])
    assert code != EXIT_UNKNOWN, (path, verdict)


def expected_reason(path: str) -> str:
    return drain_rule.drain_reason([UPGRADE if path == "upgrade" else FINDING], drain_rule.head_of(path, "weekly"))


@pytest.mark.parametrize("holder", list(drain_rule.HOLDERS))
def test_every_path_does_what_the_table_says_to_a_node_so_held(holder, slurm, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    node = {"reboot": REBOOTING, "down": DOWN}.get(holder, slurmkit.NODE)
    if holder == "maint":
        assert slurm.scontrol("create", "reservation", "reservationname=maint", f"nodes={node}", "starttime=now",
                              "duration=30", "users=root", "flags=maint").returncode == 0
        wait_for(lambda: "MAINT" in slurm.state(node)[0], "the maintenance flag", slurm)
    if holder == "reboot":
        assert slurm.scontrol("reboot", node).returncode == 0, slurm.log()
        # nothing answers on its port, so the reboot stays requested, never issued nor done
        wait_for(lambda: "REBOOT_REQUESTED" in slurm.state(node)[0], "the reboot requested", slurm)
    try:
        for path, (kind, _) in drain_rule.PATHS.items():
            for verdict, verb in zip(drain_rule.VERDICTS, drain_rule.RULES[holder][kind], strict=True):
                hold(slurm, node, holder)
                before = slurm.state(node)
                assert shown_holder(node, capsys) == holder, before
                run_path(path, node, verdict, monkeypatch)
                state, reason = slurm.state(node)
                cell = f"{holder} / {path} / {verdict}: {before} -> {(state, reason)}"
                if verb == "drain":
                    assert "DRAIN" in state and reason == expected_reason(path), cell
                elif verb == "resume":
                    assert "DRAIN" not in state and reason == "", cell
                else:
                    assert ("DRAIN" in state, reason) == ("DRAIN" in before[0], before[1]), cell
                    assert shown_holder(node, capsys) == holder, cell
    finally:
        if holder == "maint":
            slurm.scontrol("delete", "reservationname=maint")
            wait_for(lambda: "MAINT" not in slurm.state(node)[0], "the maintenance flag gone", slurm)
        if holder not in ("reboot", "down"):
            hold(slurm, node, "nobody")
