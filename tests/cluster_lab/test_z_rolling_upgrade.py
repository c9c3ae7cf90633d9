"""The rolling upgrade (playbooks/upgrade.yml, roles/gpu_upgrade) on the cluster lab, for real: admin01's Slurm
drains each node in turn, waits for its jobs, the GPU roles move it from the R535 stack to R550 (driver, Fabric
Manager, NCCL 2.18.5 -> 2.21.5) from the stand-in NVIDIA repository, the host reboots, `gpucheck node` proves it,
Slurm gets it back. A job spans two nodes meanwhile and completes; a Fabric Manager that refuses to start on one
node stops the rollout there; the rerun that finishes it goes two nodes at a time; the way back waits for the
reboot it may not make. A watcher polls sinfo throughout: never more nodes out than the batch.

Runs last among this folder's lab modules (its name): it needs every node healthy on the golden image's stack, and
leaves node01 back on R535 and the others on R550, in service, node04's ECC fault restored. Nothing after it uses
this lab (tests/lab takes it down for its own), so no way back for all four nodes is paid for."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_lab_helpers import (
    FAULTY,
    ROOT,
    LabState,
    ansible_playbook,
    lab,
    playbook_command,
    slurm_cmd,
    task_outcomes,
)

pytestmark = pytest.mark.lab

NODES = ("node01", "node02", "node03", FAULTY)
R550 = {"driver": "550.163.01", "nccl": "2.21.5-1+cuda12.4", "fm": "nvidia-fabricmanager-550"}
R535 = {"driver": "535.261.03", "nccl": "2.18.5-1+cuda12.2", "fm": "nvidia-fabricmanager-535"}
# node03's Fabric Manager 550 refuses to start (a systemd drop-in, outside the role and the agent); 535 still starts.
DROP_IN = "/etc/systemd/system/nvidia-fabricmanager.service.d/planted-fault.conf"
FM_REFUSES_UNIT = ("[Service]\nExecStartPre=/bin/sh -c 'case \"$$(/usr/bin/nv-fabricmanager -v)\" in *550.*) "
                   "echo \"planted fault: this Fabric Manager refuses to start\" >&2; exit 1;; esac'\n")
FM_REFUSES = (f"mkdir -p {os.path.dirname(DROP_IN)} && echo {base64.b64encode(FM_REFUSES_UNIT.encode()).decode()} "
              f"| base64 -d > {DROP_IN} && systemctl daemon-reload")
FM_REPAIRED = f"rm -f {DROP_IN} && systemctl daemon-reload"
NVML_DRIVER = ("/opt/gpucheck/venv/bin/python -c 'import pynvml as n\ntry:\n n.nvmlInit(); "
               "print(n.nvmlSystemGetDriverVersion())\nexcept n.NVMLError as e: print(type(e).__name__)'")


def ssh(node: str, command: str, check: bool = True) -> str:
    return lab("ssh", node, "--", command, timeout=300, check=check).stdout


def node_states(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{node: (sinfo's long state, drain reason)}."""
    text = slurm_cmd(env, "sinfo", "-h", "-N", "-o", "%N|%T|%E")
    return {name: (state, reason) for name, state, reason in (line.split("|", 2) for line in text.splitlines())}


class DrainWatcher:
    """Polls sinfo every half second while a rollout runs: the most nodes out of service (draining or drained)
    at once, and when each first went out."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.most, self.out_at = env, 0, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.stop.is_set():
            try:
                out = [n for n, (state, _) in node_states(self.env).items() if "drain" in state]
            except (AssertionError, subprocess.TimeoutExpired):
                out = []
            self.most = max(self.most, len(out))
            for name in out:
                self.out_at.setdefault(name, time.monotonic())
            self.stop.wait(0.5)

    def __enter__(self) -> DrainWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def upgrade_command(reports: Path, *extra: str, reboot_ok: bool = True) -> tuple[list[str], dict[str, str]]:
    args = ["-e", f"gpu_reboot_ok={str(reboot_ok).lower()}", "-e", "gpu_upgrade_job_poll=2", *extra]
    return args, {"XDG_STATE_HOME": str(reports)}


def upgrade(reports: Path, *extra: str, reboot_ok: bool = True) -> subprocess.CompletedProcess:
    args, env = upgrade_command(reports, *extra, reboot_ok=reboot_ok)
    return ansible_playbook("playbooks/upgrade.yml", *args, timeout=3000, env=env)


def on_stack(node: str, stack: dict[str, str]) -> None:
    """What the node runs, read on the node: NVML's driver, the one Fabric Manager branch (and its NSCQ library)
    installed and active at the driver's version, NCCL's package."""
    assert ssh(node, NVML_DRIVER).strip() == stack["driver"], node
    query = ("dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\\n' 'nvidia-fabricmanager-*' "
             "'libnvidia-nscq-*' libnccl2")
    installed = sorted(line.split()[1:] for line in ssh(node, query, check=False).splitlines()
                       if line.startswith("installed "))
    nscq = stack["fm"].replace("nvidia-fabricmanager", "libnvidia-nscq")
    assert installed == [["libnccl2", stack["nccl"]], [nscq, f"{stack['driver']}-1"],
                         [stack["fm"], f"{stack['driver']}-1"]], (node, installed)
    units = ssh(node, "systemctl is-active nvidia-fabricmanager; nv-fabricmanager -v", check=False)
    assert units == f"active\nFabric Manager version is : {stack['driver']}\n", (node, units)


def node_folder(reports: Path, stack: str, node: str) -> Path:
    """The node's folder of the latest rollout to `stack` that upgraded it (a rollout that skipped it has none)."""
    runs = sorted(reports.glob(f"gpucheck/reports/upgrade-{stack}-2*"), reverse=True)  # its UTC time
    return next(run / node for run in runs if (run / node / "after.json").is_file())


def report_of(reports: Path, stack: str, node: str, phase: str) -> dict:
    return json.loads((node_folder(reports, stack, node) / f"{phase}.json").read_text())


def pins_measured(report: dict) -> dict:
    pins = next(r for r in report["results"] if r["check"] == "stack.pins")
    assert pins["status"] == "pass", pins
    return pins["measured"]["system"]


def stack_pin(stack: str, package: str) -> str:
    """`package==VERSION` as the lab's inventory pins it for `stack` (inventory/lab's versions.yml)."""
    catalog = yaml.safe_load((ROOT / "inventory/lab/group_vars/all/versions.yml").read_text())["gpu_stack_catalog"]
    return next(p for p in catalog[stack]["pip_packages"] if p.split("==")[0] == package)


@pytest.fixture(scope="module")
def fleet(lab4: LabState, slurm: dict[str, str]) -> Iterator[dict[str, str]]:
    """Every node healthy and in service for this module: node04's ECC fault repaired (restored after), node03's
    TensorFlow back at the stack's pin (test_cluster_lab drifts it for the modules after it: the upgrade's proof,
    stack.pins, would stop at node03 for it), and a drain Slurm's health check made of them undone. slurmd runs that
    check when it starts: one still running on node04 when the fault is repaired drains it after (seen in CI:
    slurmctld's log had node04 drained as the rollout began), so the checks in flight are waited for first."""
    lab("fault", FAULTY, "scenario", "dgx-h100", timeout=120)
    lab("fault", "node03", "drift", stack_pin("tf-horovod", "tensorflow-cpu"), timeout=900)
    for node in NODES:
        deadline = time.monotonic() + 300
        while ssh(node, "pgrep -f 'gpucheck node [-]-slurm' || true").strip() and time.monotonic() < deadline:
            time.sleep(2)
    for node, (state, _) in node_states(slurm).items():
        if "drain" in state:
            slurm_cmd(slurm, "scontrol", "update", f"nodename={node}", "state=resume")
    try:
        yield slurm
    finally:
        lab("fault", FAULTY, "scenario", "ecc-uncorrected", timeout=120)


def test_the_rollout_waits_for_a_job_stops_at_the_first_failing_node_and_a_rerun_finishes_it(fleet, lab4,
                                                                                               tmp_path):
    ssh("node03", FM_REFUSES)
    script = tmp_path / "job.sh"  # runs until the test lets it end (node02 reboots after: its /tmp goes, /root stays)
    script.write_text("#!/bin/sh\nsrun hostname\nwhile [ ! -e /tmp/release-job ]; do sleep 1; done\nsrun hostname\n")
    job = slurm_cmd(fleet, "sbatch", "--parsable", "-N2", "-w", "node02,node03", "--chdir=/root",
                    "--output=/root/job-%j.out", "--error=/root/job-%j.err", str(script)).strip()
    args, env = upgrade_command(tmp_path, "-e", "gpu_stack=tf-horovod-r550")
    began = time.monotonic()
    with DrainWatcher(fleet) as watch:
        argv, environ = playbook_command("playbooks/upgrade.yml", *args, env=env)
        rollout = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environ)
        try:
            deadline = time.monotonic() + 1200
            while "node02" not in watch.out_at and time.monotonic() < deadline and rollout.poll() is None:
                time.sleep(1)
            waiting = node_states(fleet)["node02"]
            job_state = slurm_cmd(fleet, "squeue", "-h", "-j", job, "-o", "%T").strip()
            time.sleep(6)  # a few of the rollout's looks at node02's jobs
            ssh("node02", "touch /tmp/release-job")
            output, _ = rollout.communicate(timeout=2400)
        finally:
            if rollout.poll() is None:
                rollout.kill()
    lab4.timings["upgrade_3_nodes_one_failing_s"] = round(time.monotonic() - began, 1)
    # node02 was drained while the job still ran on it, and its upgrade waited for the job, which completed
    assert waiting[0] in ("draining", "mixed+drain", "allocated+drain") and job_state == "RUNNING", (waiting, job_state)
    assert "FAILED - RETRYING: [node02 -> admin01]: Wait for the node's jobs to end" in output, output[-5000:]
    record = slurm_cmd(fleet, "scontrol", "show", "job", job)
    assert "JobState=COMPLETED" in record and "ExitCode=0:0" in record, record
    assert sorted(ssh("node02", f"cat /root/job-{job}.out").split()) == ["node02", "node02", "node03", "node03"]
    # stopped at node03: drained with why, node04 never touched; never more than one node out at once
    assert rollout.returncode != 0 and watch.most == 1, (watch.out_at, output[-5000:])
    states = node_states(fleet)
    state, reason = states["node03"]
    assert "drain" in state and reason.startswith("gpucheck: upgrade to tf-horovod-r550 stopped: "), states
    assert "nvidia-fabricmanager" in reason, reason
    assert "The upgrade to tf-horovod-r550 stopped at node03" in " ".join(output.split()), output[-5000:]
    assert not any("drain" in states[n][0] for n in ("node01", "node02", FAULTY)), states
    assert "node04" not in watch.out_at and ssh(FAULTY, NVML_DRIVER).strip() == R535["driver"]
    for node in ("node01", "node02"):
        on_stack(node, R550)
    assert pins_measured(report_of(tmp_path, "tf-horovod-r550", "node01", "after"))["nccl"] == "2.21.5"
    diff = (node_folder(tmp_path, "tf-horovod-r550", "node01") / "diff.txt").read_text()
    assert "version  driver: 535.261.03 -> 550.163.01" in diff and "nccl (tf-horovod): 2.18.5 -> 2.21.5" in diff, diff
    # a health check cannot put the stopped node back: the upgrade's drain is the upgrade's to end
    health = lab("ssh", "node03", "--", "/usr/local/sbin/gpucheck-slurm-health", timeout=300, check=False)
    assert "only the upgrade (playbooks/upgrade.yml) resumes it" in health.stderr, health.stderr[-2000:]
    assert "drain" in node_states(fleet)["node03"][0]

    ssh("node03", FM_REPAIRED)
    began = time.monotonic()
    with DrainWatcher(fleet) as watch:
        again = upgrade(tmp_path, "-e", "gpu_stack=tf-horovod-r550", "-e", "upgrade_batch=2")
    lab4.timings["upgrade_rerun_2_nodes_at_once_s"] = round(time.monotonic() - began, 1)
    flat = " ".join(again.stdout.split())
    assert again.returncode == 0, again.stdout[-6000:]
    for node in ("node01", "node02"):
        assert f"{node} finished its upgrade to tf-horovod-r550 before: skipped" in flat
    # one batch of both nodes: NVIDIA's repository configured once (not once per GPU role), the agent's stack part only
    assert again.stdout.count("TASK [nvidia_repo : Add NVIDIA's CUDA repository]") == 1, again.stdout[-6000:]
    assert "TASK [gpucheck_agent : Write the node configuration]" in again.stdout
    assert "TASK [gpucheck_agent : Install the agent from its local wheel only]" not in again.stdout
    assert set(watch.out_at) == {"node03", FAULTY} and watch.most == 2, (watch.most, watch.out_at)
    for node in NODES:
        on_stack(node, R550)
    assert not any("drain" in state for state, _ in node_states(fleet).values())


def test_the_way_back_waits_for_the_reboot_it_may_not_make(fleet, lab4, tmp_path):
    """Without gpu_reboot_ok the first node stops the rollout: R535 is installed on node01 but the loaded module is
    still 550's, so NVML refuses (version mismatch) and node01 stays drained, saying why. With it, the same command
    (limited to node01) reboots it: the module, not this run's changes, says it must."""
    began = time.monotonic()
    with DrainWatcher(fleet) as watch:
        held = upgrade(tmp_path, "-e", "gpu_stack=tf-horovod", reboot_ok=False)
    lab4.timings["downgrade_stopped_by_reboot_s"] = round(time.monotonic() - began, 1)
    flat = " ".join(held.stdout.split())
    assert held.returncode != 0 and set(watch.out_at) == {"node01"}, (watch.out_at, held.stdout[-5000:])
    assert ("REBOOT REQUIRED on node01: the loaded nvidia module (550.163.01) is not the installed driver "
            "(535.261.03)") in flat, held.stdout[-5000:]
    assert "needs a reboot to load driver 535.261.03 and gpu_reboot_ok is false" in flat
    assert ssh("node01", NVML_DRIVER).strip() == "NVMLError_LibRmVersionMismatch"
    state, reason = node_states(fleet)["node01"]
    assert "drain" in state and reason.startswith("gpucheck: upgrade to tf-horovod stopped: Check the new driver is "
                                                  "loaded"), (state, reason)
    for node in ("node02", "node03", FAULTY):
        assert ssh(node, NVML_DRIVER).strip() == R550["driver"], node

    began = time.monotonic()
    with DrainWatcher(fleet) as watch:
        done = upgrade(tmp_path, "-e", "gpu_stack=tf-horovod", "--limit", "node01")
    lab4.timings["downgrade_node01_rebooted_s"] = round(time.monotonic() - began, 1)
    assert done.returncode == 0, done.stdout[-6000:]
    rebooted = task_outcomes(done.stdout, "nvidia_driver : Reboot to load the NVIDIA driver")
    assert rebooted.get("changed") == {"node01"}, (rebooted, done.stdout[-6000:])
    assert set(watch.out_at) == {"node01"}, watch.out_at  # already drained by the held run: held, then resumed
    on_stack("node01", R535)
    assert pins_measured(report_of(tmp_path, "tf-horovod", "node01", "after")) == {
        "driver": "535.261.03", "cuda": "12.4", "cudnn": "8.9.7", "nccl": "2.18.5"}
    # before the reboot NVML refused (the loaded module is 550's): the diff has no driver before, a pass after
    assert re.search(r"version +driver: - -> 535\.261\.03", done.stdout), done.stdout[-4000:]
    assert re.search(r"verdict +gpu\.driver: fail -> pass", done.stdout), done.stdout[-4000:]
    assert not any("drain" in state for state, _ in node_states(fleet).values())
