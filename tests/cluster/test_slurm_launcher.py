"""`gpucheck cluster --launcher slurm` against a real Slurm on this machine (tests/slurmkit.py: gpu-a has a slurmd,
gpu-b is drained by an admin, so Slurm runs no job there) and the loopback sshd: gpu-a's node checks run
through srun and are judged as the SSH path judges them, gpu-b is checked over SSH and says why, and Slurm that
cannot be asked is one line, exit 3. The multi-node srun jobs (MPI, smoke) run on the lab
(tests/cluster_lab/test_slurm_lab.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cluster_helpers import LoopbackSshd, load_report, node_report, run_cluster, write_inventory

import slurmkit
from gpucheck.cluster.slurm import fanout, srun
from gpucheck.model import Status

# The agent a task runs: srun's tasks have SLURMD_NODENAME, SSH's have SSH_CONNECTION (the sshd's dispatch).
AGENT = """#!/bin/sh
if [ -n "$SLURMD_NODENAME" ]; then exec "$(dirname "$0")/by-slurm/$SLURMD_NODENAME" "$@"; fi
exec "$(dirname "$0")/gpucheck" "$@"
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm"), others=("gpu-b",)) as cluster:
        # drained by an admin: Slurm runs no job there (and gpu-b's address, 127.0.0.2, reaches gpu-a's slurmd)
        cluster.set("gpu-b", state="drain", reason="admin: fan replaced")
        yield cluster


@pytest.fixture
def agent(sshd: LoopbackSshd) -> Path:
    path = sshd.agent_dir / "agent-any"
    path.write_text(AGENT)
    path.chmod(0o755)
    (sshd.agent_dir / "by-slurm").mkdir(exist_ok=True)
    return path


def on_slurm_node(sshd: LoopbackSshd, node: str, script: str) -> None:
    path = sshd.agent_dir / "by-slurm" / node
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def slurm_report(sshd: LoopbackSshd, node: str, report: dict) -> None:
    path = sshd.agent_dir / f"slurm-{node}.json"
    path.write_text(json.dumps(report))
    on_slurm_node(sshd, node, f"echo 'a warning on stderr' >&2\ncat '{path}'\nexit {report['exit_code']}\n")


def cluster(sshd, slurm, agent, tmp_path, *extra, env=None):
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, {"gpu-a": {"ansible_port": sshd.ports[0]},
                                                               "node02": {"ansible_port": sshd.ports[1],
                                                                          "slurm_node_name": "gpu-b"}})
    report = tmp_path / "report"
    done = run_cluster(["-i", str(inventory), "--remote-command", str(agent), "--report", str(report),
                        "--launcher", "slurm", *extra], env={**os.environ, **(env or slurm.env)}, cwd=tmp_path)
    return done, report


def test_node_checks_through_srun_judged_as_over_ssh_and_a_node_slurm_cannot_use_checked_over_ssh(
        sshd, slurm, agent, tmp_path) -> None:
    slurm_report(sshd, "gpu-a", node_report("gpu-a", fail={"gpu.ecc_errors": "GPU3: 2 volatile uncorrected"}))
    sshd.report(sshd.ports[1], node_report("node02"))
    done, report = cluster(sshd, slurm, agent, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    doc = load_report(report)
    a, b = doc["nodes"]["gpu-a"], doc["nodes"]["node02"]
    assert (a["status"], a["via"], a["kind"]) == ("fail", "srun", "report")
    assert a["report"]["host"] == "gpu-a" and "gpu.ecc_errors" in a["reason"]
    assert "a warning on stderr" in a["evidence"]  # the agent's stderr, kept apart from its report
    assert (b["status"], b["via"]) == ("pass", "ssh")
    assert "DRAIN" in b["slurm_state"] and "(admin: fan replaced)" in b["slurm_state"]
    assert [d["node"] for d in doc["drain"]] == ["gpu-a"]
    assert "node checks: 1 node(s) through srun; over SSH, as Slurm runs no job there now: node02" in done.stdout


def test_a_hung_agent_under_srun_is_that_nodes_timeout_and_the_job_is_ended(sshd, slurm, agent, tmp_path) -> None:
    pids = tmp_path / "hung.pids"
    on_slurm_node(sshd, "gpu-a", f"echo $$ >> '{pids}'\nexec sleep 600\n")
    sshd.report(sshd.ports[1], node_report("node02"))
    done, report = cluster(sshd, slurm, agent, tmp_path, "--host-timeout", "5")
    doc = load_report(report)
    a = doc["nodes"]["gpu-a"]
    assert (a["status"], a["kind"], a["via"]) == ("fail", "timeout", "srun"), a
    assert done.returncode == 2
    pid = int(pids.read_text().split()[0])
    assert not Path(f"/proc/{pid}").exists() or "sleep" not in Path(f"/proc/{pid}/cmdline").read_text()


def test_a_crashed_agent_and_a_missing_one_are_said_as_over_ssh(sshd, slurm, agent, tmp_path) -> None:
    on_slurm_node(sshd, "gpu-a", "echo 'Traceback: boom' >&2\nexit 1\n")
    sshd.report(sshd.ports[1], node_report("node02"))
    _, report = cluster(sshd, slurm, agent, tmp_path)
    a = load_report(report)["nodes"]["gpu-a"]
    assert (a["status"], a["kind"]) == ("error", "agent-crashed") and "boom" in a["reason"], a
    (sshd.agent_dir / "by-slurm" / "gpu-a").unlink()
    _, report = cluster(sshd, slurm, agent, tmp_path)
    a = load_report(report)["nodes"]["gpu-a"]
    assert a["status"] == "error" and a["kind"] in ("agent-missing", "agent-crashed"), a


def test_slurm_that_cannot_be_asked_is_one_line_exit_3(sshd, slurm, agent, tmp_path) -> None:
    gone = tmp_path / "no-slurm.conf"
    gone.write_text(slurm.conf.read_text().replace(f"SlurmctldPort={_port(slurm)}", "SlurmctldPort=9"))
    done, _ = cluster(sshd, slurm, agent, tmp_path, env={"SLURM_CONF": str(gone)})
    assert done.returncode == 3
    assert done.stderr.strip().startswith("gpucheck: error: --launcher slurm: slurmctld does not answer")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done, _ = cluster(sshd, slurm, agent, tmp_path, env={**slurm.env, "PATH": str(tmp_path / "no-slurm-here")})
    assert done.returncode == 3 and done.stderr.strip() == (
        "gpucheck: error: --launcher slurm: scontrol not found on PATH: is this a Slurm node (the slurm-client "
        "package)?")


def _port(slurm) -> str:
    return next(line.split("=", 1)[1] for line in slurm.conf.read_text().splitlines()
                if line.startswith("SlurmctldPort="))


def test_srun_gives_each_task_its_lines_whole_and_sends_a_file_to_every_task(slurm, monkeypatch) -> None:
    """srun cuts a line at 1 KiB (a node report is one long line): srun.WRAP's pieces put it back together."""
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)  # srun.run passes on the command line's own environment
    script = 'cat; echo "$SLURM_PROCID $X"; printf "%05000d\\n" 7; echo oops >&2; exit "$SLURM_PROCID"'
    step = srun.run(srun.Job("t", ["gpu-a", "gpu-a"], ["/bin/sh", "-c", script], 30, env={"X": "x"}),
                    input_text="sent\n")
    assert step.remote.exit == 1 and step.remote.error is None  # the highest of the tasks' exit statuses
    long_line = "0" * 4999 + "7"
    for number in (0, 1):
        task = step.tasks[number]
        assert (task.node, task.exit, task.stderr) == ("gpu-a", number, "oops\n")
        assert task.stdout == f"sent\n{number} x\n{long_line}\n"
    assert f"1: {long_line}\n" in step.remote.stdout  # labelled as srun --label would, one line whole


def test_outcome_without_an_exit_status_is_an_error_naming_what_srun_said() -> None:
    said = "srun: error: gpu-a: task 0: Killed\nsrun: Job step aborted"
    got = fanout.outcome("gpu-a", srun.Task("gpu-a", '{"partial'), 60, 3.0, said)
    assert got.status == Status.ERROR and got.kind == "slurm" and got.via == "srun"
    assert "no report through srun" in got.reason and "task 0: Killed" in got.reason


def test_a_long_line_comes_back_whole_from_its_pieces_and_srun_s_own_lines_stay_apart() -> None:
    ended = []
    collect = srun.Collector(lambda n, task: ended.append((n, task.exit)))
    for raw in ["0: =n gpu-a", " 1: =n gpu-b", "0: +o " + "a" * 900, "1: =o short", "srun: error: gpu-c: Killed",
                "0: +o " + "b" * 900, "0: =o end", "0: =e warning", "1: =x 2", "0: =x 0", "1: not a piece"]:
        collect.line(raw)
    assert collect.tasks[0].stdout == "a" * 900 + "b" * 900 + "end\n" and collect.tasks[0].stderr == "warning\n"
    assert (collect.tasks[1].node, collect.tasks[1].stdout, collect.tasks[1].exit) == ("gpu-b", "short\n", 2)
    assert ended == [(1, 2), (0, 0)]
    assert collect.other == ["srun: error: gpu-c: Killed", "1: not a piece"]
    assert collect.labelled("stdout").splitlines()[1] == "1: short"


def test_the_job_command_asks_for_whole_nodes_their_gpus_and_our_task_order() -> None:
    job = srun.Job("mpi", ["node02", "node02", "node01"], ["hostname"], 100, mpi="pmix", gpus_per_node=8,
                   env={"A": "b c"})
    words = job.argv("/tmp/hosts")
    alloc, step = words[:words.index("srun")], words[words.index("srun"):]
    assert alloc[:2] == ["salloc", f"--job-name={job.name}"] and job.name.startswith("gpucheck-mpi-")
    assert {"--nodes=2", "--nodelist=node02,node01", "--exclusive", "--gres=gpu:8", "--time=2"} <= set(alloc)
    assert "SLURM_HOSTFILE=/tmp/hosts" in alloc
    assert {"--ntasks=3", "--distribution=arbitrary", "--export=NONE", "--mpi=pmix", "--label"} <= set(step)
    assert step[-5:] == ["/bin/sh", "-c", srun.WRAP, "gpucheck-task", "hostname"] and "A=b c" in step


def test_slurm_names_the_gpus_it_has_as_gres_and_says_which_nodes_run_jobs_now() -> None:
    from gpucheck import slurm

    assert slurm.NodeState("a", "IDLE", "", "gpu:h100:8(S:0-1)").gpus == 8
    assert slurm.NodeState("a", "IDLE", "", "gpu:a100:4,gpu:t4:2,nic:1").gpus == 6
    assert slurm.NodeState("a", "IDLE", "").gpus == 0
    assert [slurm.NodeState("a", s, "").runs_jobs_now for s in ("IDLE", "IDLE+DRAIN", "IDLE*", "MIXED", "DOWN*")] \
        == [True, False, False, False, False]


def test_each_task_takes_its_own_variables_by_its_slurm_rank() -> None:
    """tf-ps under Slurm: one srun, each task its TF_CONFIG (JSON, quotes and spaces), the ps without a GPU."""
    import subprocess

    from gpucheck.cluster.slurm import jobs as slurm_jobs

    envs = [{"TF_CONFIG": '{"task": {"type": "ps", "index": 0}}', "CUDA_VISIBLE_DEVICES": ""},
            {"TF_CONFIG": '{"task": {"type": "chief", "index": 0}}'}]
    shared = {"GPUCHECK_TASK_VARS": "CUDA_VISIBLE_DEVICES TF_CONFIG",
              **{f"GPUCHECK_T{i}_{k}": v for i, env in enumerate(envs) for k, v in env.items()}}
    show = 'printf "%s|%s" "$TF_CONFIG" "${CUDA_VISIBLE_DEVICES-unset}"'
    got = [subprocess.run(["sh", "-c", slurm_jobs.PER_TASK, "per-task", "sh", "-c", show], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": str(i), **shared}).stdout
           for i in range(2)]
    assert got == ['{"task": {"type": "ps", "index": 0}}|', '{"task": {"type": "chief", "index": 0}}|unset']
    ranks = subprocess.run(["sh", "-c", slurm_jobs.TORCH_RANK, "torch-rank", "sh", "-c",
                            'echo "$RANK $LOCAL_RANK $WORLD_SIZE"'], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
                                "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4"}).stdout
    assert ranks == "5 1 8\n"


def test_only_idle_nodes_go_through_srun_the_others_say_why() -> None:
    from gpucheck import slurm
    from gpucheck.cluster.inventory import Host

    def host(name: str, **variables: str) -> Host:
        return Host(name, "10.0.0.1", 22, "root", None, (), True, vars=variables)

    states = {n: slurm.NodeState(n, s, r, "gpu:8") for n, s, r in (
        ("a", "IDLE", ""), ("b", "IDLE+DRAIN", "gpucheck: gpu.ecc_errors"), ("c", "MIXED", ""), ("gpu-d", "IDLE", ""),
        ("e", "DOWN*", "Not responding"))}
    plan = fanout.split([host("a"), host("b"), host("c"), host("d", slurm_node_name="gpu-d"), host("e"),
                               host("f")], states)
    assert [h.name for h in plan.srun] == ["a", "d"]
    assert plan.ssh == {"b": "IDLE+DRAIN in Slurm (gpucheck: gpu.ecc_errors)",
                        "c": "MIXED in Slurm; a job runs there: passive checks only",
                        "e": "DOWN* in Slurm (Not responding)",
                        "f": "Slurm has no node f (set its slurm_node_name host variable)"}
    assert plan.busy == {"c"}


def test_a_node_running_a_job_gets_no_active_check_even_with_full(monkeypatch) -> None:
    """--full through Slurm: the burn-in runs only where Slurm says no job runs; a node running one (checked over
    SSH, as Slurm will not give it to us) gets the passive checks, so no job's GPUs are loaded."""
    from gpucheck import slurm
    from gpucheck.cluster import fanout as ssh_fanout
    from gpucheck.cluster.context import NodeOutcome, Options
    from gpucheck.cluster.inventory import Host
    from gpucheck.model import Status

    asked: dict[str, bool] = {}

    def ssh_side(hosts, options, on_done):
        for h in hosts:
            asked[h.name] = options.full
            on_done(NodeOutcome(h.name, Status.PASS, "", "", 0.0))

    def srun_side(hosts, options, gpus, on_done):
        for h in hosts:
            asked[h.name] = options.full
            on_done(NodeOutcome(h.name, Status.PASS, "", "", 0.0, via="srun"))

    monkeypatch.setattr(ssh_fanout, "fan_out", ssh_side)
    monkeypatch.setattr(fanout, "through_srun", srun_side)
    states = {n: slurm.NodeState(n, s, "", "gpu:8") for n, s in (
        ("idle", "IDLE"), ("mixed", "MIXED"), ("allocated", "ALLOCATED"), ("drained", "IDLE+DRAIN"),
        ("draining", "MIXED+DRAIN"))}
    hosts = [Host(n, "10.0.0.1", 22, "root", None, (), True) for n in states]
    fanout.fan_out(hosts, Options(full=True), states)
    assert asked == {"idle": True, "mixed": False, "allocated": False, "drained": True, "draining": False}


def test_steps_of_one_allocation_run_at_once_and_scancel_ends_them(slurm, monkeypatch) -> None:
    """The burn's shape through Slurm (slurm/allocation.py): salloc --no-shell holds gpu-a, two steps run in it at
    the same time (srun --jobid --overlap: gpu-a has one CPU, which the first step holds), release ends the job."""
    import threading

    from gpucheck.cluster.slurm import allocation

    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    job_id, why = allocation.allocate("burn", ["gpu-a"], 120, 0)
    assert job_id.isdigit() and why == "", why
    try:
        flag = slurm.dir / f"step-one-{job_id}"
        first: list[srun.Step] = []
        long = threading.Thread(target=lambda: first.append(srun.run(srun.Job(
            "burn", ["gpu-a"], ["/bin/sh", "-c", f"touch {flag}; sleep 4; echo one $SLURM_JOB_ID"], 60,
            jobid=job_id))))
        long.start()
        for _ in range(100):  # the first step runs
            if flag.exists():
                break
            time.sleep(0.1)
        second = srun.run(srun.Job("mpi", ["gpu-a"], ["/bin/sh", "-c", "echo two $SLURM_JOB_ID"], 30, jobid=job_id))
        assert long.is_alive(), "the second step waited for the first to end"
        long.join(30)
        assert second.tasks[0].stdout == f"two {job_id}\n" and first[0].tasks[0].stdout == f"one {job_id}\n"
    finally:
        allocation.release(job_id)
    for _ in range(50):
        queue = slurm.scontrol("show", "job", job_id).stdout
        if "JobState=CANCELLED" in queue or "Invalid job id" in queue or not queue:
            break
        time.sleep(0.2)
    assert "JobState=RUNNING" not in slurm.scontrol("show", "job", job_id).stdout


def test_an_allocation_slurm_will_not_give_says_why(slurm, monkeypatch) -> None:
    from gpucheck.cluster.slurm import allocation

    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    job_id, why = allocation.allocate("burn", ["gpu-b"], 60, 0, wait_s=2)  # drained by an admin
    assert job_id == "" and why.startswith("Slurm gave no allocation of 1 node(s): "), why
    job_id, why = allocation.allocate("burn", ["no-such-node"], 60, 0, wait_s=2)
    assert job_id == "" and ("no-such-node" in why or "Invalid node name" in why), why


def test_a_step_of_an_allocation_asks_for_no_allocation_of_its_own() -> None:
    job = srun.Job("mpi", ["node02", "node01"], ["hostname"], 100, mpi="pmix", gpus_per_node=8, jobid="42")
    words = job.argv("/tmp/hosts")
    assert "salloc" not in words and words[:5] == ["/usr/bin/env", "SLURM_HOSTFILE=/tmp/hosts", "srun",
                                                   "--jobid=42", "--overlap"]
    assert {"--ntasks=2", "--distribution=arbitrary", "--mpi=pmix", "--label"} <= set(words)
