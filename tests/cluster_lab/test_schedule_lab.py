"""Scheduled active checks in the lab's real Slurm (`gpucheck schedule`, docs/slurm.md): the slurm role's
scheduled-checks partition (lowest PriorityTier, PreemptMode=REQUEUE; inventory/lab turns it on and queues
nothing), jobs queued from this machine as an admin node does, run by slurmd on the nodes with the agent there.
Checked as Slurm says it: squeue for the jobs and their successors, scontrol for node states and requeues, and the
node's kept reports for what each run recorded, which `gpucheck history collect` brings to the admin node's
store. Each test cancels what it queued (`gpucheck schedule --off`).

The lab's GPUs are simulated below NVML, with no CUDA device (inventory/lab: CuPy imports, no burn-in runs), so
the jobs here run checks the lab can answer, through --daily-args/--weekly-args: passive ones, a check held by a
hung NVML call (`lab fault ... hang`) standing in for a long burn-in, and a stricter profile for a failure. What
is tested is what Slurm and gpucheck do with a scheduled check, whatever it runs."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_lab_helpers import LAB_INVENTORY, ROOT, lab, slurm_cmd
from test_slurm_lab import health_check, node

from gpucheck.history.records import utc
from gpucheck.history.store import Store
from support import wait_for

pytestmark = pytest.mark.lab

PARTITION = "gpucheck"
QUEUE = "%i|%j|%T|%r|%S"
FIELDS = ("job", "name", "state", "reason", "start")
STRICT = """name: strict
description: the lab's profile, asking for more free disk than any lab host has
inherits: lab
host:
  disk_free_GiB_min:
    /: 1000000
"""


def schedule(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`gpucheck schedule ARGS` on this machine, a Slurm client of the lab, as on an admin node."""
    environ = {**os.environ, **env, "PYTHONPATH": str(ROOT / "agent")}
    return subprocess.run([sys.executable, "-m", "gpucheck", "schedule", "--gpucheck", "/usr/local/bin/gpucheck",
                           *args], capture_output=True, text=True, env=environ, timeout=120, cwd=ROOT)


def jobs(env: dict[str, str]) -> list[dict[str, str]]:
    out = slurm_cmd(env, "squeue", "-h", "-p", PARTITION, "-o", QUEUE)
    return [dict(zip(FIELDS, line.split("|"), strict=True)) for line in out.splitlines()]


def polled(what: str, probe, timeout: float = 180.0):
    """support.wait_for, polling Slurm as an admin would: every second."""
    return wait_for(probe, timeout, what, every=1.0)


READ_KEPT = base64.b64encode(b"""import glob, json
print(json.dumps([json.load(open(f)) for f in sorted(glob.glob('/var/lib/gpucheck/reports/*.json'))]))
""").decode()


def kept(name: str) -> list[dict]:
    """The node's kept reports (/var/lib/gpucheck/reports), oldest first."""
    done = lab("ssh", name, "--", f"sh -c 'echo {READ_KEPT} | base64 -d | python3'", timeout=120)
    return json.loads(done.stdout)


def collect_history(store: Path, nodes: str) -> subprocess.CompletedProcess:
    """`gpucheck history collect` from this machine, as from the admin node: the nodes' kept reports, over SSH."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT / "agent")}
    environ.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpucheck", "history", "collect", "-i",
                           str(LAB_INVENTORY), "--limit", nodes, "--store", str(store)],
                          capture_output=True, text=True, env=environ, timeout=300, cwd=ROOT)


def in_service(env: dict[str, str], *names: str) -> None:
    for name in names:
        if "DRAIN" in node(env, name)[0]:
            slurm_cmd(env, "scontrol", "update", f"nodename={name}", "state=resume")


@pytest.fixture
def clean(slurm):
    """No scheduled job before or after the test; the nodes it drains put back."""
    schedule(slurm, "--off")
    in_service(slurm, "node01", "node02")
    yield slurm
    schedule(slurm, "--off")
    in_service(slurm, "node01", "node02")


def test_the_daily_checks_run_on_idle_nodes_and_queue_their_successors_a_day_later(clean, tmp_path) -> None:
    env = clean
    args = ("--nodes", "node01,node02", "--weekly", "0", "--daily", "1d",
            "--daily-args", "--only gpu.count gpu.memory gpu.ecc_errors")
    done = schedule(env, *args)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^gpucheck-daily-node01: job \d+ queued", done.stdout, re.M), done.stdout
    assert re.search(r"^gpucheck-daily-node02: job \d+ queued", done.stdout, re.M), done.stdout
    first = {j["name"]: j["job"] for j in jobs(env)}
    assert set(first) == {"gpucheck-daily-node01", "gpucheck-daily-node02"}, first
    config = slurm_cmd(env, "scontrol", "show", "partition", PARTITION)
    assert "PriorityTier=1" in config and "PreemptMode=REQUEUE" in config, config

    def successors():  # pending for their begin time (right after sbatch Slurm may still say Resources)
        now = jobs(env)
        fresh = [j for j in now if j["job"] not in first.values() and j["reason"] == "BeginTime"]
        return now if len(fresh) == 2 and len(now) == 2 else None

    queue = polled("each node's check ran and queued the next one, to begin a day later", successors)
    tomorrow = time.time() + 86400
    for job in queue:
        assert job["state"] == "PENDING" and job["reason"] == "BeginTime", queue
        begins = time.mktime(time.strptime(job["start"], "%Y-%m-%dT%H:%M:%S"))
        assert abs(begins - tomorrow) < 600, (job, time.ctime(tomorrow))
    # the admin node's history store gets them by `gpucheck history collect`
    store = tmp_path / "history.sqlite"
    collected = collect_history(store, "node01,node02")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    with Store(store, create=False) as history:
        recorded = history.query("SELECT r.source, r.started, nr.node, nr.status FROM runs r "
                                 "JOIN node_runs nr ON nr.run_id = r.id")
    for name in ("node01", "node02"):
        report = next(r for r in reversed(kept(name)) if (r.get("facts") or {}).get("scheduled"))
        assert report["facts"]["scheduled"]["kind"] == "daily" and report["exit_code"] == 0, report["results"]
        assert report["facts"]["scheduled"]["job"] == first[f"gpucheck-daily-{name}"]
        assert {r["check"] for r in report["results"]} == {"gpu.count", "gpu.memory", "gpu.ecc_errors"}
        assert [(r["node"], r["status"]) for r in recorded if r["started"] == utc(report["started"])
                and r["source"].startswith(f"{name}:kept/")] == [(name, "pass")], recorded
    again = schedule(env, *args)  # queued already: nothing more
    assert again.stdout.count("already queued (PENDING") == 2, again.stdout
    assert len(jobs(env)) == 2


def test_a_user_job_preempts_a_scheduled_check_which_is_kept_as_preempted_and_requeued(clean) -> None:
    """The weekly check is held for minutes by a hung NVML call on node01 (a long burn-in, as Slurm sees it)."""
    env = clean
    lab("fault", "node01", "hang", "nvmlDeviceGetTemperature@gpu2", timeout=120)
    try:
        preempted(env)
    finally:
        schedule(env, "--off")
        lab("fault", "node01", "scenario", "dgx-h100", timeout=120)


def preempted(env: dict[str, str]) -> None:
    done = schedule(env, "--nodes", "node01", "--daily", "0", "--weekly", "7d",
                    "--weekly-args", "--only gpu.temperature --timeout 600")
    assert done.returncode == 0, done.stderr
    [burn] = jobs(env)
    polled("the burn-in running", lambda: [j for j in jobs(env) if j["state"] == "RUNNING"])
    time.sleep(5)  # into the check
    user = slurm_cmd(env, "sbatch", "--parsable", "-p", "gpu", "-w", "node01", "--exclusive", "-J", "user-job",
                     "-o", "/dev/null", "--wrap", "sleep 2").strip()

    def user_job_done():
        out = slurm_cmd(env, "squeue", "-h", "-j", user, "-o", "%T")
        return out.strip() == "" or None

    polled("the user job preempted the burn-in and ran", user_job_done, timeout=240)
    requeued = slurm_cmd(env, "scontrol", "show", "job", burn["job"])
    assert re.search(r"\bRestarts=[1-9]", requeued), requeued  # requeued by Slurm, to run again when idle
    report = polled("node01's kept report of the preempted run", lambda: next(
        (r for r in kept("node01") if ((r.get("facts") or {}).get("scheduled") or {}).get("stopped")), None))
    scheduled = report["facts"]["scheduled"]
    assert scheduled["stopped"] == "preempted" and scheduled["job"] == burn["job"], scheduled
    [run] = report["results"]
    assert run["status"] == "error" and run["reason"].startswith("preempted: Slurm stopped this scheduled weekly"), run
    assert report["exit_code"] == 3  # could not judge: never a failure, never a drain
    assert "DRAIN" not in node(env, "node01")[0]


def test_a_failing_scheduled_check_drains_and_the_passive_health_check_leaves_the_drain(clean) -> None:
    """The scheduled check judges node02 against a stricter profile than the health check does (the lab's, asking
    for more free disk than any lab host has): what it finds, the health check cannot see, as with a slow GPU."""
    env = clean
    profile = base64.b64encode(STRICT.encode()).decode()
    lab("ssh", "node02", "--", f"sh -c 'echo {profile} | base64 -d > /var/tmp/strict.yaml'", timeout=120)
    done = schedule(env, "--nodes", "node02", "--weekly", "0",
                    "--daily-args", "--profile /var/tmp/strict.yaml --only host.disk")
    assert done.returncode == 0, done.stderr

    def drained():
        state, reason = node(env, "node02")
        return (state, reason) if "DRAIN" in state else None

    state, reason = polled("node02 drained by its scheduled check", drained)
    assert reason.startswith("gpucheck: scheduled daily: host.disk"), reason
    health = health_check("node02")
    assert health.returncode == 0, health.stderr[-2000:]
    assert "drained by an active check" in health.stderr, health.stderr[-2000:]
    after, kept_reason = node(env, "node02")
    assert "DRAIN" in after and kept_reason == reason, (after, kept_reason)  # still drained, for the same reason
