"""Slurm on the lab, for real: site.yml's scheduler stage on admin01 (slurmctld) and the nodes (slurmd), both run
as systemd units (the role's branch for hosts without an init system is tested on node01 on its own); then
gpucheck drains and resumes nodes there, through Slurm's own HealthCheckProgram on the nodes and `gpucheck cluster
--drain` from this machine (a Slurm client of admin01, as an admin node with slurm-client is: lab/slurm.py). Runs
after test_cluster_lab on the same lab (conftest.lab4): node03 carries that module's version drift by then, so the
healthy nodes here are node01 and node02."""

from __future__ import annotations

import re
import subprocess

import pytest
from cluster_lab_helpers import FAULTY, by_check, changed, lab, run_cluster, scheduler, slurm_cmd

pytestmark = pytest.mark.lab

HEALTH = "/usr/local/sbin/gpucheck-slurm-health"


def node(env: dict[str, str], name: str) -> tuple[str, str]:
    text = slurm_cmd(env, "scontrol", "show", "node", name)
    reason = next((ln.strip().removeprefix("Reason=") for ln in text.splitlines() if ln.strip().startswith("Reason=")),
                  "")
    return re.search(r"\bState=(\S+)", text).group(1), re.sub(r"\s*\[[^\]]*\]$", "", reason)


def health_check(name: str) -> subprocess.CompletedProcess:
    """slurmd's HealthCheckProgram on the node (gpucheck node --slurm), run when the test means it to (scheduler())."""
    return lab("ssh", name, "--", HEALTH, timeout=300, check=False)


def test_the_scheduler_stage_builds_a_cluster_check_mode_works_and_gres_are_the_gpus(slurm) -> None:
    assert set(changed(scheduler("--check").stdout).values()) == {0}
    nodes = slurm_cmd(slurm, "sinfo", "-h", "-N", "-p", "gpu", "-o", "%N")
    assert nodes.split() == ["node01", "node02", "node03", FAULTY]
    assert "Gres=gpu:8" in slurm_cmd(slurm, "scontrol", "show", "node", "node01")
    config = slurm_cmd(slurm, "scontrol", "show", "config")
    assert re.search(r"HealthCheckProgram\s+= /usr/local/sbin/gpucheck-slurm-health", config)
    assert re.search(r"MpiDefault\s+= pmix", config) and re.search(r"SlurmctldHost\[0\]\s+= admin01", config)


def test_the_faulty_node_is_drained_by_its_health_check_with_gpuchecks_reason(slurm) -> None:
    done = health_check(FAULTY)
    assert done.returncode == 2, done.stderr[-2000:]
    state, reason = node(slurm, FAULTY)
    assert "DRAIN" in state and reason.startswith("gpucheck: gpu.ecc_errors"), (state, reason)
    assert f"{FAULTY} gpucheck: gpu.ecc_errors" in " ".join(slurm_cmd(slurm, "sinfo", "-R", "-h", "-o",
                                                                      "%N %E").split())


def test_an_admins_drain_is_never_undone(slurm) -> None:
    slurm_cmd(slurm, "scontrol", "update", "nodename=node02", "state=drain", "reason=DIMM swap, ticket 4711")
    try:
        done = health_check("node02")
        assert done.returncode == 0 and "only its owner resumes it" in done.stderr, done.stderr[-2000:]
        state, reason = node(slurm, "node02")
        assert "DRAIN" in state and reason == "DIMM swap, ticket 4711"
    finally:
        slurm_cmd(slurm, "scontrol", "update", "nodename=node02", "state=resume")


def test_a_harness_error_does_not_drain(slurm) -> None:
    """One GPU's temperature cannot be read on node01 (the call hangs): gpu.temperature is an error there and
    nothing fails, so the run proves nothing and Slurm is left as it was. (A hung GPU count is no harness
    error: nothing about any GPU can be read, the node fails and is drained.)"""
    lab("fault", "node01", "hang", "nvmlDeviceGetTemperature@gpu2", timeout=120)
    try:
        done = health_check("node01")
        assert done.returncode == 0, done.stderr[-2000:]
        assert "a node is never drained or resumed on a run that proved nothing" in done.stderr
        assert "DRAIN" not in node(slurm, "node01")[0]
    finally:
        lab("fault", "node01", "scenario", "dgx-h100", timeout=120)


def test_cluster_drain_drains_the_faulty_node_and_resumes_it_once_repaired(slurm, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    for name in ("node01", "node02", FAULTY):  # start from every node in service, as if never drained
        if "DRAIN" in node(slurm, name)[0]:
            slurm_cmd(slurm, "scontrol", "update", f"nodename={name}", "state=resume")
    limit = ["--limit", f"node01,node02,{FAULTY}", "--stages", "consistency", "--drain"]
    done, doc, _ = run_cluster(limit, tmp_path / "first")
    actions = {a["node"]: a["action"] for a in doc["slurm"]}
    assert actions == {"node01": "keep", "node02": "keep", FAULTY: "drain"}, done.stdout + done.stderr
    assert f"slurm: drained {FAULTY}: gpucheck: cluster: gpu.ecc_errors" in done.stdout
    state, reason = node(slurm, FAULTY)
    assert "DRAIN" in state and reason.startswith("gpucheck: cluster: gpu.ecc_errors")  # an active check's drain
    lab("fault", FAULTY, "scenario", "dgx-h100", timeout=120)  # repaired
    try:
        done, doc, _ = run_cluster(limit, tmp_path / "repaired")
        assert {a["node"]: a["action"] for a in doc["slurm"]}[FAULTY] == "resume", done.stdout + done.stderr
        assert "DRAIN" not in node(slurm, FAULTY)[0]
    finally:
        lab("fault", FAULTY, "scenario", "ecc-uncorrected", timeout=120)


def test_the_slurm_launcher_gives_the_ssh_verdicts_and_runs_the_smoke_job_as_a_slurm_job(slurm, tmp_path,
                                                                                         monkeypatch) -> None:
    """`--launcher slurm`: node01 and node02 checked through one srun, the faulty node (drained by an admin, so
    Slurm runs no job there) over SSH; each node's verdict and reason as the SSH path gives them; then the MPI
    and smoke-training jobs as Slurm jobs (srun --mpi=pmix) across node01 and node02."""
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    for name in ("node01", "node02"):
        if "DRAIN" in node(slurm, name)[0]:
            slurm_cmd(slurm, "scontrol", "update", f"nodename={name}", "state=resume")
    slurm_cmd(slurm, "scontrol", "update", f"nodename={FAULTY}", "state=drain", "reason=admin: PSU swap")
    try:
        limit = ["--limit", f"node01,node02,{FAULTY}"]
        by_ssh, ssh_doc, _ = run_cluster([*limit, "--stages", "consistency"], tmp_path / "ssh")
        done, doc, _ = run_cluster([*limit, "--stages", "consistency,mpi,smoke", "--launcher", "slurm"],
                                   tmp_path / "slurm")
        state, reason = node(slurm, FAULTY)
        assert "DRAIN" in state and reason == "admin: PSU swap"  # untouched: no --drain
    finally:
        slurm_cmd(slurm, "scontrol", "update", f"nodename={FAULTY}", "state=resume")

    def verdicts(report: dict) -> dict:
        return {n: (v["status"], v["reason"], [(r["check"], r["status"]) for r in v["report"]["results"]])
                for n, v in report["nodes"].items()}

    assert verdicts(doc) == verdicts(ssh_doc), done.stdout + done.stderr
    assert doc["drain"] == ssh_doc["drain"] and [d["node"] for d in doc["drain"]] == [FAULTY]
    assert {n: v["via"] for n, v in doc["nodes"].items()} == {"node01": "srun", "node02": "srun", FAULTY: "ssh"}
    assert "admin: PSU swap" in doc["nodes"][FAULTY]["slurm_state"]
    assert f"node checks: 2 node(s) through srun; over SSH, as Slurm runs no job there now: {FAULTY}" in done.stdout
    checks = by_check(doc)
    consistency = {k: v["status"] for k, v in checks.items() if k.startswith("cluster.consistency")}
    assert consistency == {k: v["status"] for k, v in by_check(ssh_doc).items()}
    mpi, smoke = checks["cluster.mpi"], checks["cluster.smoke.tf-horovod"]
    assert mpi["status"] == "pass" and "through srun --mpi=pmix" in mpi["reason"], mpi
    assert smoke["status"] == "pass", smoke["reason"] + smoke["evidence"][-3000:]
    assert smoke["evidence"].startswith("--- 1 rank\n$ salloc ") and "srun --ntasks=1" in smoke["evidence"]
    assert "--mpi=pmix" in smoke["evidence"] and "mpirun" not in smoke["evidence"]
    assert sorted(smoke["measured"]["2 nodes"]["hosts"]) == ["node01", "node02"]
    assert by_ssh.returncode == done.returncode == 2


def test_without_an_init_system_the_role_starts_the_daemons_itself(slurm) -> None:
    """The role's branch for hosts with no init system (containers), slurm_service_manager=direct, on the whole
    cluster (a --limit run would rewrite slurm.conf, see the role's README) after node01's slurmd unit is stopped:
    the role finds every other daemon running and leaves it; it starts node01's slurmd itself, outside systemd, once."""
    lab("ssh", "node01", "--", "systemctl stop slurmd", timeout=60)
    try:
        first = scheduler("-e", "slurm_service_manager=direct")
        moved = {host: n for host, n in changed(first.stdout).items() if n}
        assert moved == {"node01": 1}, first.stdout[-3000:]
        state = lab("ssh", "node01", "--", "systemctl is-active slurmd; pgrep -x slurmd", timeout=60,
                    check=False).stdout.split()
        assert state[0] == "inactive" and state[1].isdigit(), state  # running, and not as the unit
        again = scheduler("-e", "slurm_service_manager=direct")
        assert set(changed(again.stdout).values()) == {0}, again.stdout[-3000:]
        assert slurm_cmd(slurm, "srun", "-w", "node01", "-N1", "hostname").strip() == "node01"
    finally:
        lab("ssh", "node01", "--", "pkill -x slurmd; sleep 1; systemctl start slurmd", timeout=60)
