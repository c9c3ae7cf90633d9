"""`gpucheck node --slurm` against a real Slurm (tests/slurmkit.py: munged, slurmctld and slurmd on this machine)
and the fake NVML: a failure drains the node with a `gpucheck:` reason, a pass resumes only gpucheck's own drain,
an admin's drain is never undone, a harness error changes nothing, and every way scontrol can fail is one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_node_fake_nvml import CI_PROFILE, DGX_H100_BUS, IBSTAT_H100, NVSWITCHES, QUIET_DMESG

import slurmkit
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree
from support import run_gpucheck


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_library()


@pytest.fixture
def health_check(libdir, fake_bin, fabric_manager, tmp_path, slurm):
    """`gpucheck node --slurm` as slurmd runs its HealthCheckProgram; returns the finished process."""
    fake_bin.add("ibstat", IBSTAT_H100)
    fake_bin.add("dmesg", QUIET_DMESG)
    config = tmp_path / "node.yaml"
    config.write_text("profile: auto\n")
    sysfs = write_pci_tree(tmp_path / "sys", DGX_H100_BUS, NVSWITCHES)

    def run(scenario: str, *args: str, path: str | None = None, conf: dict[str, str] | None = None,
            mode: tuple[str, ...] = ("--slurm",), **extra_env: str):
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=path or fake_bin.path(), GPUCHECK_CONFIG=str(config), GPUCHECK_SYSFS_ROOT=str(sysfs),
                   GPUCHECK_STATE_DIR=str(tmp_path / "state"), **extra_env)
        env.update(conf if conf is not None else slurm.env)
        return run_gpucheck(["node", *mode, "--profile", CI_PROFILE, *args], env)

    return run


@pytest.fixture(autouse=True)
def in_service(slurm):
    """Every test starts from the node in service, with no reason."""
    state, _ = slurm.state()
    if "DRAIN" in state:
        slurm.set(state="resume")
    yield


def test_a_failure_drains_with_a_gpucheck_reason_and_a_pass_resumes(health_check, slurm):
    faulty = health_check("ecc-uncorrected")
    assert faulty.returncode == 2, faulty.stderr
    state, reason = slurm.state()
    assert "DRAIN" in state
    assert reason.startswith("gpucheck: gpu.ecc_errors "), reason
    assert f"gpucheck: slurm: drained {slurmkit.NODE}: gpucheck: gpu.ecc_errors" in faulty.stderr
    sinfo = subprocess.run(["sinfo", "-R", "-h", "-o", "%N %E"], capture_output=True, text=True,
                           env={**os.environ, **slurm.env}).stdout
    assert sinfo.startswith(f"{slurmkit.NODE} gpucheck: gpu.ecc_errors"), sinfo

    again = health_check("ecc-uncorrected")  # still faulty: stays drained, the reason untouched
    assert again.returncode == 2 and "already drained for the same reason" in again.stderr
    assert slurm.state()[1] == reason and "DRAIN" in slurm.state()[0]  # (NOT_RESPONDING comes and goes)

    repaired = health_check("dgx-h100")
    assert repaired.returncode == 0, repaired.stderr
    state, reason = slurm.state()
    assert "DRAIN" not in state and reason == ""
    assert f"resumed {slurmkit.NODE}" in repaired.stderr


def test_a_scheduled_checks_failure_drains_saying_so_and_the_health_checks_pass_leaves_it(health_check, slurm):
    """gpucheck schedule's job (SLURM_JOB_ID set, as slurmd sets it): its failure drains with the kind of check in
    the reason; the passive health check's pass on the same node then leaves that drain to the admin."""
    faulty = health_check("ecc-uncorrected", mode=("--scheduled", "daily"), SLURM_JOB_ID="4242",
                          SLURMD_NODENAME=slurmkit.NODE)
    assert faulty.returncode == 2, faulty.stderr
    state, reason = slurm.state()
    assert "DRAIN" in state and reason.startswith("gpucheck: scheduled daily: gpu.ecc_errors "), (state, reason)
    healthy = health_check("dgx-h100")
    assert healthy.returncode == 0, healthy.stderr
    assert "drained by an active check" in healthy.stderr, healthy.stderr
    assert slurm.state()[1] == reason and "DRAIN" in slurm.state()[0]


def test_scheduled_outside_a_slurm_job_or_with_slurm_is_one_line(health_check):
    alone = health_check("dgx-h100", mode=("--scheduled", "daily"))
    assert alone.returncode == 3 and "there is no SLURM_JOB_ID here" in alone.stderr, alone.stderr
    both = health_check("dgx-h100", mode=("--slurm", "--scheduled", "daily"), SLURM_JOB_ID="1")
    assert both.returncode == 3 and "leave out --slurm" in both.stderr, both.stderr
    bad = health_check("dgx-h100", mode=("--scheduled", "Daily!"), SLURM_JOB_ID="1")
    assert bad.returncode == 3 and "lower-case letters" in bad.stderr, bad.stderr


def test_an_admins_drain_is_never_undone_nor_overwritten(health_check, slurm):
    slurm.set(state="drain", reason="PSU swap, ticket 4711")
    healthy = health_check("dgx-h100")
    assert healthy.returncode == 0
    assert "drained by someone else (PSU swap, ticket 4711): only its owner resumes it" in healthy.stderr
    faulty = health_check("ecc-uncorrected")
    assert faulty.returncode == 2  # as a prolog: the job is requeued; the node was drained already
    assert "drained by someone else (PSU swap, ticket 4711): only its owner resumes it" in faulty.stderr
    state, reason = slurm.state()
    assert "DRAIN" in state and reason == "PSU swap, ticket 4711"


def test_an_admins_fail_state_is_never_drained_over_nor_resumed(health_check, slurm):
    """A node an admin set DOWN, FAIL or MAINT with their own reason got a gpucheck: drain over it, and a later
    pass resumed it. FAIL here: this Slurm's ReturnToService puts a DOWN node whose slurmd answers back by itself
    (slurm.decide's unit tests take DOWN and MAINT)."""
    slurm.set(state="fail", reason="admin: failing DIMM, ticket 4712")
    try:
        faulty = health_check("ecc-uncorrected")
        assert faulty.returncode == 2 and "gpucheck leaves an admin's state alone" in faulty.stderr, faulty.stderr
        healthy = health_check("dgx-h100")
        assert healthy.returncode == 0, healthy.stderr
        state, reason = slurm.state()
        assert "FAIL" in state and reason == "admin: failing DIMM, ticket 4712", (state, reason)
    finally:
        slurm.set(state="resume")


def test_a_report_that_cannot_be_written_still_drains_the_failed_node(health_check, slurm, tmp_path):
    """A full disk (here: an --output under a file) exited 3 before telling Slurm: the failed node stayed in service."""
    (tmp_path / "full").write_text("")
    faulty = health_check("ecc-uncorrected", "--output", str(tmp_path / "full" / "node.json"))
    state, reason = slurm.state()
    assert "DRAIN" in state and reason.startswith("gpucheck: gpu.ecc_errors "), (state, reason, faulty.stderr)
    assert faulty.returncode == 2, faulty.stderr
    assert f"cannot write {tmp_path / 'full' / 'node.json'}: Not a directory (Slurm was told first)" in faulty.stderr


def test_a_harness_error_neither_drains_nor_resumes(health_check, slurm):
    """--deadline 0.001: nothing is collected in time, every check is `error`: the run proved nothing."""
    blip = health_check("dgx-h100", "--deadline", "0.001")
    assert blip.returncode == 0, blip.stderr  # a prolog's non-zero exit would make Slurm drain the node
    assert "a node is never drained or resumed on a run that proved nothing" in blip.stderr
    assert "DRAIN" not in slurm.state()[0]
    health_check("ecc-uncorrected")
    _, reason = slurm.state()
    blip = health_check("dgx-h100", "--deadline", "0.001")
    state, after = slurm.state()
    assert blip.returncode == 0 and "DRAIN" in state and after == reason  # gpucheck's drain stays until a pass


def test_the_node_is_found_by_its_host_name_or_named(health_check, slurm):
    named = health_check("dgx-h100", "--slurm-node", slurmkit.NODE)
    assert named.returncode == 0 and f"left {slurmkit.NODE} as it is: in service" in named.stderr
    unknown = health_check("dgx-h100", "--slurm-node", "nosuch")
    assert unknown.returncode == 3
    assert "gpucheck: slurm: Slurm does not know node nosuch: scontrol said: Node nosuch not found" in unknown.stderr


def test_which_node_this_host_is_comes_from_slurms_columns_not_from_a_reason(health_check, slurm):
    """A drain reason carries a node's own findings; one that reads like scontrol's fields ("NodeName=gpu-zz") once
    made this host another node, whose state the health check then changed (or, as here, one Slurm does not know).
    Slurm's own columns (sinfo %N, %n) say which node this is."""
    slurm.set(state="drain", reason="gpucheck: gpu.xid NodeName=gpu-zz NodeHostName=elsewhere")
    repaired = health_check("dgx-h100")
    assert repaired.returncode == 0, repaired.stderr
    assert f"resumed {slurmkit.NODE}" in repaired.stderr
    assert "DRAIN" not in slurm.state()[0]


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpucheck: slurm:")]


def test_scontrol_missing_and_slurmctld_down_are_one_line(health_check, slurm, tmp_path):
    gone = health_check("dgx-h100", path=str(tmp_path))  # an empty PATH: no Slurm client (sinfo is asked first)
    assert gone.returncode == 3 and "Traceback" not in gone.stderr
    assert lines(gone.stderr) == ["gpucheck: slurm: sinfo not found on PATH: is this a Slurm node (the "
                                  "slurm-client package)?"]
    elsewhere = tmp_path / "slurm.conf"  # the same cluster, its controller on a port nothing listens on
    text = slurm.conf.read_text()
    port = text.split("SlurmctldPort=")[1].split()[0]
    elsewhere.write_text(text.replace(f"SlurmctldPort={port}", f"SlurmctldPort={slurmkit.free_port()}"))
    down = health_check("dgx-h100", conf={"SLURM_CONF": str(elsewhere)})
    assert down.returncode == 3 and "Traceback" not in down.stderr
    (line,) = lines(down.stderr)
    assert line.startswith("gpucheck: slurm: slurmctld does not answer"), line


def test_no_permission_is_one_line(health_check, slurm, fake_bin):
    """A user who is neither root nor SlurmUser may look, not change. scontrol's refusal is replayed as Slurm
    22.05 prints it to such a user (`slurm_update error: Invalid user id`, exit 1); looking still goes to the
    real scontrol."""
    script = fake_bin.dir / "scontrol"
    fake_bin.dir.mkdir(exist_ok=True)
    script.write_text('#!/bin/sh\nif [ "$1" = update ]; then echo "slurm_update error: Invalid user id" >&2; '
                      'exit 1; fi\nexec /usr/bin/scontrol "$@"\n')
    script.chmod(0o755)
    done = health_check("ecc-uncorrected")
    assert "Traceback" not in done.stderr
    (line,) = lines(done.stderr)
    assert done.returncode == 3 and line.startswith("gpucheck: slurm: not allowed to change node states"), line
    assert "DRAIN" not in slurm.state()[0]
