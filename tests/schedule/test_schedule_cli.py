"""`gpucheck schedule` against stand-in Slurm client commands (sinfo, squeue, sbatch, scancel on PATH, sharing one
queue file the way slurmctld's queue is shared): what it queues, with which options and batch script, that a second
run queues nothing more, that a job's successor begins EVERY later, and that the batch script, run by sh as slurmd
runs it, calls the agent and then queues its successor with the same schedule. The real Slurm runs the same in
tests/cluster_lab/test_schedule_lab.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

FAKE_SLURM = r'''#!{python}
import json, os, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
state_path = os.environ["FAKE_SLURM_STATE"]
state = json.load(open(state_path))
state["calls"].append([name, *args])
code = 0
if os.environ.get("FAKE_SLURM_DOWN"):
    print(f"{name}: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
    code = 1
elif name == "sinfo":
    print("\n".join(n for n in state["nodes"] for _ in (0, 1)))  # -N: a node once per partition it is in
elif name == "squeue":
    for job in state["queue"]:
        print("|".join([job["id"], job["name"], job["state"], job["begin"]]))
elif name == "sbatch":
    job = str(100 + len(state["queue"]))
    opt = lambda flag: args[args.index(flag) + 1]
    state["queue"].append({"id": job, "name": opt("--job-name"), "state": "PENDING", "begin": opt("--begin"),
                           "args": args, "script": sys.stdin.read()})
    print(f"{job};lab")
elif name == "scancel":
    state["queue"] = [j for j in state["queue"] if j["id"] != args[0]]
json.dump(state, open(state_path, "w"))
sys.exit(code)
'''


@pytest.fixture
def fake_slurm(tmp_path: Path):
    """The stand-in Slurm: run(*args, env=...) runs `gpucheck schedule`; .state() reads the queue and the calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fake_slurm.py"
    fake.write_text(FAKE_SLURM.replace("{python}", sys.executable, 1))
    fake.chmod(0o755)
    for tool in ("sinfo", "squeue", "sbatch", "scancel"):
        (bin_dir / tool).symlink_to(fake)
    state_path = tmp_path / "slurm.json"
    state_path.write_text(json.dumps({"nodes": ["node01", "node02"], "queue": [], "calls": []}))

    class Slurm:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_STATE": str(state_path),
               "PYTHONPATH": str(ROOT / "agent")}

        def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "gpucheck", "schedule", *args], capture_output=True,
                                  text=True, env={**self.env, **env}, timeout=60)

        def state(self) -> dict:
            return json.loads(state_path.read_text())

    return Slurm()


def option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_each_node_gets_one_job_per_kind_the_whole_node_requeued_in_the_checks_partition(fake_slurm) -> None:
    done = fake_slurm.run()
    assert done.returncode == 0, done.stderr
    queue = fake_slurm.state()["queue"]
    assert [j["name"] for j in queue] == ["gpucheck-daily-node01", "gpucheck-weekly-node01",
                                          "gpucheck-daily-node02", "gpucheck-weekly-node02"]
    for job in queue:
        args = job["args"]
        assert option(args, "--partition") == "gpucheck" and "--exclusive" in args and "--requeue" in args
        assert option(args, "--nodelist") == job["name"].rsplit("-", 1)[1] and option(args, "--begin") == "now"
        assert option(args, "--output") == "/var/log/%x.log"
    daily = queue[0]["script"]
    assert "gpucheck node --scheduled daily --full --skip gpu.burn gpu.dcgm --format json --output " \
           "/var/lib/gpucheck/scheduled-daily.json" in daily
    assert "gpucheck schedule --next daily --node node01 --partition gpucheck --daily 86400s" in daily
    assert "gpucheck node --scheduled weekly --full --format json" in queue[1]["script"]
    assert done.stdout.splitlines()[0].startswith("gpucheck-daily-node01: job 100 queued: --full --skip gpu.burn")


def test_a_second_run_queues_nothing_more_and_dry_run_and_off_change_what_they_say(fake_slurm) -> None:
    fake_slurm.run("--nodes", "node01", "--weekly", "0")
    again = fake_slurm.run("--nodes", "node01,node02", "--weekly", "0", "--dry-run")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "gpucheck-daily-node01: job 100 already queued (PENDING, begins now)",
        "gpucheck-daily-node02: would queue: --full --skip gpu.burn gpu.dcgm, every 86400 s"]
    assert len(fake_slurm.state()["queue"]) == 1
    off = fake_slurm.run("--off")
    assert off.stdout == "gpucheck-daily-node01: job 100 (PENDING) cancelled\n" and fake_slurm.state()["queue"] == []
    assert fake_slurm.run("--off").stdout.startswith("no scheduled check is queued in partition gpucheck")


def test_a_job_queues_its_successor_every_later_unless_one_is_queued(fake_slurm) -> None:
    fake_slurm.run("--nodes", "node01", "--weekly", "0")  # job 100, the one now running
    successor = fake_slurm.run("--next", "daily", "--node", "node01", "--daily", "12h", SLURM_JOB_ID="100")
    assert successor.returncode == 0, successor.stderr
    assert successor.stdout == "gpucheck-daily-node01: job 101 queued, to begin 43200 s from now\n"
    assert option(fake_slurm.state()["queue"][1]["args"], "--begin") == "now+43200"
    twice = fake_slurm.run("--next", "daily", "--node", "node01", "--daily", "12h", SLURM_JOB_ID="100")
    assert "job 101 already queued" in twice.stdout and len(fake_slurm.state()["queue"]) == 2


def test_the_batch_script_runs_the_check_then_queues_the_next_with_the_same_schedule(fake_slurm, tmp_path) -> None:
    """The script as slurmd runs it (sh, the job's environment): a stand-in gpucheck records its arguments; the
    job's exit status is the check's (2: it failed, and drained the node), and the successor is queued anyway."""
    fake_slurm.run("--nodes", "node01", "--daily", "0", "--weekly", "14d", "--daily-args",
              "--only gpu.gemm --profile '/etc/gpucheck/my site.yaml'", "--gpucheck", str(tmp_path / "gc"))
    script = fake_slurm.state()["queue"][0]["script"]
    log = tmp_path / "calls"
    (tmp_path / "gc").write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s|' \"$a\" >> {log}; done\n"
                                 f"echo >> {log}\n[ \"$1\" = node ] && exit 2\n"
                                 f"exec {sys.executable} -m gpucheck \"$@\"\n")  # schedule: the real one
    (tmp_path / "gc").chmod(0o755)
    batch = tmp_path / "job.sh"
    batch.write_text(script.replace("mkdir -p /var/lib/gpucheck", f"mkdir -p {tmp_path}/state")
                     .replace("export PATH=", "export IGNORED_PATH="))  # the stand-in Slurm stays on PATH
    done = subprocess.run(["sh", str(batch)], capture_output=True, text=True, timeout=60,
                          env={**fake_slurm.env, "SLURM_JOB_ID": "100"})
    assert done.returncode == 2, done.stderr
    assert done.stdout == "gpucheck-weekly-node01: job 101 queued, to begin 1209600 s from now\n", done.stderr
    successor_job = fake_slurm.state()["queue"][1]
    assert option(successor_job["args"], "--begin") == "now+1209600"
    assert successor_job["script"] == script  # the same schedule, the same check, again
    check, successor = [line.rstrip("|").split("|") for line in log.read_text().splitlines()]
    assert check == ["node", "--scheduled", "weekly", "--full", "--format", "json", "--output",
                     "/var/lib/gpucheck/scheduled-weekly.json"]
    assert successor[:4] == ["schedule", "--next", "weekly", "--node"] and successor[4] == "node01"
    assert option(successor, "--weekly") == "1209600s" and option(successor, "--daily") == "0s"
    assert "--daily-args=--only gpu.gemm --profile '/etc/gpucheck/my site.yaml'" in successor
    assert "--weekly-args=--full" in successor  # without =, a lone "--full" reads as an option of its own
    assert option(successor, "--gpucheck") == str(tmp_path / "gc")


@pytest.mark.parametrize(("args", "says"), [
    (["--daily", "5m"], "at least 10 minutes between two checks"),
    (["--daily", "often"], "a duration such as 1d"),
    (["--weekly-args", "--full --output /tmp/x"], "--output is the scheduled job's own"),
    # another node, in every spelling gpucheck node's parser accepts: the job must judge the node it runs on
    (["--daily-args", "--slurm-node gpu-b"], "--slurm-node is the scheduled job's own"),
    (["--daily-args=--slurm-n=gpu-b"], "--slurm-node is the scheduled job's own"),
    (["--daily-args", "--slurm-no gpu-b --full"], "--slurm-node is the scheduled job's own"),
    (["--weekly-args", "--sched daily"], "--scheduled is the scheduled job's own"),
    (["--weekly-args", "--full --bogus"], "not options gpucheck node takes"),
    (["--daily-args", "--full 'unclosed"], "No closing quotation"),
    (["--next", "daily"], "--next and --node go together"),
    (["--daily", "0", "--weekly", "0"], "every kind of check is off"),
    (["--nodes", "gpu-[01-04]"], "is not one Slurm node name"),
])
def test_bad_input_is_one_line_and_exit_3(fake_slurm, args, says) -> None:
    done = fake_slurm.run(*args)
    assert done.returncode == 3 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert fake_slurm.state()["queue"] == []


def test_a_slurm_that_does_not_answer_is_one_line_and_exit_3(fake_slurm) -> None:
    done = fake_slurm.run(FAKE_SLURM_DOWN="1")
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("gpucheck: error: slurm: slurmctld does not answer"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
