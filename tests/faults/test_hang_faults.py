"""`gpucheck node` never hangs and leaves no orphan.

- A host call that does not return (statvfs on a stuck mount, psutil, a sysfs read) costs only the checks that
  need its fact: `error` naming the path or call and "did not return within N s"; the rest of the report is
  whole, and the agent exits although the thread stuck in that call cannot be stopped.
- The run has a deadline (--deadline): what was not collected by then is `error` ("not run: the run's deadline
  (N s) passed"), the report is still written, exit 3 (2 when something failed), and the probe left running
  is killed.
- SIGTERM to the agent's process group (what coreutils `timeout -k` sends), SIGHUP and SIGINT end the agent
  promptly, and the probes it started in their own sessions (which those signals do not reach) with it.
- A stack python that does not answer is run once per run: later uses say "not asked: <python> did not
  answer within N s earlier in this run".

The blocking inputs are real: a FIFO where a sysfs file is expected (opening it blocks in the kernel), a
stack interpreter and a dmesg that sleep. The in-process tests block a patched call on an Event.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from gpucheck.model import Status
from gpucheck.node import CollectError, Context, host, links
from gpucheck.node.pipeline import DeadlinePassed, Gatherer, all_checks, evaluate
from gpucheck.profiles import load
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree
from support import ROOT, TEST_PROFILES, by_check, report_of, run_gpucheck

CI_PROFILE = str(TEST_PROFILES / "dgx-h100-ci.yaml")
BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
       "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
NVSWITCHES = [(f"0000:{bus}:00.0", "0x10de", "0x068000") for bus in ("05", "06", "07", "08")]
H100 = load("dgx-h100")


# ---------------------------------------------------------------- helpers

def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.fixture
def sleeper(tmp_path: Path):
    """make(path): an executable that appends its pid to a file, then sleeps as that pid (like a probe that
    never answers). Whatever is still running at the end of the test is killed."""
    made: list[Path] = []

    def make(path: Path) -> tuple[Path, Path]:
        path.parent.mkdir(parents=True, exist_ok=True)
        pidfile = path.parent / f"{path.name}.pids"
        path.write_text(f"#!/bin/sh\necho $$ >> '{pidfile}'\nexec sleep 600\n")
        path.chmod(0o755)
        made.append(pidfile)
        return path, pidfile

    yield make
    for pidfile in made:
        for pid in pids_in(pidfile):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def bounded(fn, *args, limit: float = 10):
    """fn(*args) in a thread: a test of a call that must not hang fails, instead of hanging, when it does."""
    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not return within {limit} s: it hangs")
    if "error" in box:
        raise box["error"]
    return box["value"]


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def release(path: Path) -> None:
    """Let a reader blocked in open() on the FIFO go (it then reads end of file)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def blocker():
    """block(obj, name): replace a function by one that blocks until the test ends (as a call stuck in the
    kernel does); the thread it holds is let go at the end."""
    gate = threading.Event()

    def block(target, name: str, only=None):
        real = getattr(target, name)

        def stuck(*args, **kwargs):
            if only is None or only(*args):
                gate.wait(600)
            return real(*args, **kwargs)

        return stuck

    yield block
    gate.set()


def node_yaml(tmp_path: Path, python: Path, frameworks: list[str]) -> Path:
    config = tmp_path / "node.yaml"
    config.write_text("stacks:\n  tf:\n    python: " + json.dumps(str(python)) + "\n    frameworks: "
                      + json.dumps(frameworks) + "\n")
    return config


def fake_nvml_env(tmp_path: Path, scenario: str, libdir: Path) -> dict[str, str]:
    sysfs = write_pci_tree(tmp_path / "sys", BUS, NVSWITCHES)
    (tmp_path / "node.yaml").write_text("profile: auto\n")
    env = env_for(scenario_path(scenario), libdir)
    env.update(GPUCHECK_CONFIG=str(tmp_path / "node.yaml"), GPUCHECK_SYSFS_ROOT=str(sysfs))
    return env


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_library()


# ---------------------------------------------------------------- host calls that do not return (in process)

def host_context(paths: dict[str, float], timeout: float = 1.0) -> Context:
    ctx = Context(timeout=timeout)
    ctx.profile = copy.deepcopy(load("generic"))
    ctx.profile.data["host"] = {"disk_free_GiB_min": paths, "cpu_cores_min": 1, "ram_to_gpu_memory_ratio_min": 0.001}
    return ctx


def test_a_stuck_mount_costs_host_disk_only_and_names_the_path(blocker, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", blocker(shutil, "disk_usage", only=lambda path: path == "/stuck"))
    ctx = host_context({"/": 0.001, "/stuck": 1})
    began = time.monotonic()
    facts = {"host": bounded(host.collect, ctx), "nvml": None}
    assert time.monotonic() - began < 3  # one call limit (1 s), not forever
    disk = host.disk(facts, ctx.profile)
    assert disk.status == Status.ERROR
    assert disk.reason == "/stuck: free space not read: shutil.disk_usage('/stuck') did not return within 1 s"
    assert isinstance(facts["host"]["disk_free_GiB"]["/"], float)  # the other path was measured
    assert host.cpu(facts, ctx.profile).status == Status.PASS
    assert host.memory(facts, ctx.profile).status == Status.SKIP  # NVML absent here: GPU memory unknown


def test_a_stuck_mount_and_a_full_disk_fail_naming_both(blocker, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", blocker(shutil, "disk_usage", only=lambda path: path == "/stuck"))
    ctx = host_context({"/": 10**9, "/stuck": 1})
    result = host.disk({"host": bounded(host.collect, ctx)}, ctx.profile)
    assert result.status == Status.FAIL
    assert "/ has " in result.reason and "/stuck: free space not read: " in result.reason


@pytest.mark.parametrize("call, check, fact", [
    ("virtual_memory", "memory", "RAM size not read: psutil.virtual_memory() did not return within 1 s"),
    ("cpu_count", "cpu", "CPU count not read: psutil.cpu_count(logical=True) did not return within 1 s"),
], ids=["virtual_memory", "cpu_count"])
def test_a_stuck_psutil_call_costs_only_its_check(call, check, fact, blocker, monkeypatch):
    monkeypatch.setattr(psutil, call, blocker(psutil, call))
    ctx = host_context({"/": 0.001})
    began = time.monotonic()
    facts = {"host": bounded(host.collect, ctx), "nvml": {"gpus": []}}
    assert time.monotonic() - began < 5  # cpu_count is asked twice: two limits at most
    results = {name: getattr(host, name)(facts, ctx.profile) for name in ("memory", "cpu", "disk")}
    assert (results[check].status, results[check].reason) == (Status.ERROR, fact)
    assert results[check].remediation
    assert all(r.status == Status.PASS for name, r in results.items() if name != check), results


def test_a_stuck_process_list_is_an_error_of_fabric_manager_only(blocker, monkeypatch):
    monkeypatch.setattr(psutil, "process_iter", blocker(psutil, "process_iter"))
    began = time.monotonic()
    with pytest.raises(CollectError) as caught:
        bounded(links.collect_fabric_manager, Context(timeout=1))
    assert time.monotonic() - began < 3
    assert caught.value.harness
    assert caught.value.reason == "listing the processes (psutil.process_iter) did not return within 1 s"


def test_a_sysfs_file_that_blocks_is_named_and_costs_one_limit(tmp_path, monkeypatch):
    """A FIFO where a device's `class` is expected: opening it blocks in the kernel, as a wedged driver's
    attribute does."""
    sysfs = write_pci_tree(tmp_path / "sys", BUS[:2])
    stuck = sysfs / "bus" / "pci" / "devices" / "0000:2a:00.0" / "class"
    stuck.unlink()
    fifo(stuck)
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(sysfs))
    began = time.monotonic()
    try:
        with pytest.raises(CollectError) as caught:
            bounded(links.collect_pci_gpus, Context(timeout=1))
    finally:
        release(stuck)
    assert time.monotonic() - began < 3
    assert caught.value.harness and caught.value.reason == f"reading {stuck} did not return within 1 s"


def test_an_unblocked_sysfs_tree_reads_as_before(tmp_path, monkeypatch):
    sysfs = write_pci_tree(tmp_path / "sys", BUS[:2], [("0000:05:00.0", "0x10de", "0x068000")])
    (sysfs / "class" / "infiniband" / "mlx5_0" / "device").mkdir(parents=True)
    (sysfs / "class" / "infiniband" / "mlx5_0" / "device" / "numa_node").write_text("1\n")
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(sysfs))
    assert [g["address"] for g in links.collect_pci_gpus(Context())["gpus"]] == ["0000:18:00.0", "0000:2a:00.0"]
    assert links.collect_nic_numa(Context())["nics"] == {"mlx5_0": 1}


# ---------------------------------------------------------------- a blocking sysfs file through the command line

def test_a_blocking_sysfs_file_costs_only_nic_affinity_and_the_agent_still_exits(libdir, fabric_manager, tmp_path):
    """The agent's thread stays blocked in open() on the FIFO: the agent must still report and exit."""
    env = fake_nvml_env(tmp_path, "dgx-h100", libdir)
    stuck = fifo(Path(env["GPUCHECK_SYSFS_ROOT"]) / "class" / "infiniband" / "mlx5_0" / "device" / "numa_node")
    began = time.monotonic()
    try:
        done = run_gpucheck(["node", "--profile", CI_PROFILE, "--only", "gpu", "--skip", "gpu.xid", "--format", "json",
                             "--timeout", "2"], env, timeout=60)
    finally:
        release(stuck)
    assert time.monotonic() - began < 30 and "Traceback" not in done.stderr, done.stderr
    checks = by_check(report_of(done))
    not_passing = {c: (r["status"], r["reason"]) for c, r in checks.items() if r["status"] not in ("pass", "skip")}
    assert not_passing == {"gpu.nic_affinity": ("error", f"reading {stuck} did not return within 2 s")}
    assert checks["gpu.nic_affinity"]["remediation"]
    assert done.returncode == 3


# ---------------------------------------------------------------- the run's deadline

@pytest.mark.parametrize("scenario, count, code", [("dgx-h100", "pass", 3), ("seven-of-eight", "fail", 2)])
def test_the_deadline_ends_the_run_with_a_whole_report(scenario, count, code, libdir, sleeper, tmp_path):
    """ibstat never answers (its own limit, --timeout, is 60 s): at the 10 s deadline ib.ports is cut off, the
    host checks after it are not run, gpu.count (gathered before) keeps its verdict, and ibstat is killed.
    The deadline leaves gpu.count room on a loaded machine (CI saw 4 s pass before NVML's answer); the run ends
    long before ibstat's own limit or run_gpucheck's guard (40 s) fails the test."""
    env = fake_nvml_env(tmp_path, scenario, libdir)
    ibstat, pidfile = sleeper(tmp_path / "bin" / "ibstat")
    env["PATH"] = f"{ibstat.parent}{os.pathsep}{env['PATH']}"
    done = run_gpucheck(["node", "--profile", CI_PROFILE, "--only", "gpu.count", "ib.ports", "host", "--format", "json",
                         "--timeout", "60", "--deadline", "10"], env, timeout=40)
    assert "Traceback" not in done.stderr, done.stderr
    report = report_of(done)
    checks = by_check(report)
    assert list(checks) == ["gpu.count", "ib.ports", "host.memory", "host.cpu", "host.disk"]
    assert checks["gpu.count"]["status"] == count
    assert checks["ib.ports"]["status"] == "error"
    assert checks["ib.ports"]["reason"].startswith(
        "not finished: the run's deadline (10 s) passed while collecting 'ib_ports'"), checks["ib.ports"]
    not_run = ("error", "not run: the run's deadline (10 s) passed")
    for name in ("host.memory", "host.cpu", "host.disk"):
        assert (checks[name]["status"], checks[name]["reason"]) == not_run
    assert done.returncode == report["exit_code"] == code
    assert len(pids_in(pidfile)) == 1 and not alive(pids_in(pidfile)[0])  # no ibstat left behind


def test_an_optional_fact_cut_off_by_the_deadline_is_not_read_as_unavailable():
    """host.memory takes NVML as optional (no NVML: skip). NVML cut off by the deadline is not "no NVML"."""
    ctx = Context(timeout=60)
    ctx.profile = H100
    gather = Gatherer(ctx, deadline=1)
    gate = threading.Event()
    gather.collectors["nvml"] = lambda ctx: gate.wait(600)
    gather.collectors["host"] = lambda ctx: {"ram_GiB": 2048.0, "cpu_cores_logical": 224, "disk_free_GiB": {}}
    check = next(c for c in all_checks() if c.id == "host.memory")
    try:
        began = time.monotonic()
        result = bounded(evaluate, check, gather, H100)
    finally:
        gate.set()
    assert time.monotonic() - began < 3
    assert result.status == Status.ERROR
    assert result.reason.startswith("not finished: the run's deadline (1 s) passed while collecting 'nvml'")
    assert isinstance(gather.failures["nvml"], DeadlinePassed)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e999"])
def test_a_deadline_out_of_bounds_is_one_line(value, tmp_path):
    done = run_gpucheck(["node", "--only", "host", "--deadline", value], dict(os.environ))
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.startswith("gpucheck: error: argument --deadline: ") and done.stderr.count("\n") == 1


def test_help_says_what_the_deadline_is():
    done = run_gpucheck(["node", "--help"], dict(os.environ))
    text = " ".join(done.stdout.split())
    assert "--deadline SECONDS limit for the whole run" in text
    assert "(default: 4 x --timeout, at least 60, plus 4 x --bench-timeout with --full)" in text


# ---------------------------------------------------------------- signals: the probes end with the agent

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_to_the_agents_group_ends_the_probe_too(signum, sleeper, tmp_path):
    """As `timeout -k 5 N gpucheck node` does at N s: the signal goes to the agent's process group only; the
    framework probe runs in its own session."""
    python, pidfile = sleeper(tmp_path / "stack" / "bin" / "python")
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, python, ["tensorflow"])),
               PYTHONPATH=str(ROOT / "agent"))
    agent = subprocess.Popen([sys.executable, "-m", "gpucheck", "node", "--only", "frameworks.tensorflow",
                              "--format", "json", "--timeout", "120"], env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waited = time.monotonic()
        while not pids_in(pidfile) and time.monotonic() - waited < 60 and agent.poll() is None:
            time.sleep(0.1)
        probe = pids_in(pidfile)
        assert probe and alive(probe[0]), "the probe never started"
        os.killpg(agent.pid, signum)
        began = time.monotonic()
        out, err = agent.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
    assert time.monotonic() - began < 5
    assert agent.returncode == 3
    assert err == f"gpucheck: stopped by {signum.name}: the run and the probes it started were ended\n"
    assert out == ""
    assert not alive(probe[0])


def stopped_once_probing(args: list[str], env: dict[str, str], pidfile: Path) -> tuple[int, str]:
    """`gpucheck node ARGS`, sent SIGTERM once its probe (the sleeper) runs; (exit code, stderr)."""
    agent = subprocess.Popen([sys.executable, "-m", "gpucheck", "node", *args], env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waited = time.monotonic()
        while not pids_in(pidfile) and time.monotonic() - waited < 60 and agent.poll() is None:
            time.sleep(0.1)
        assert pids_in(pidfile), "the probe never started"
        os.killpg(agent.pid, signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
    return agent.returncode, err


def test_a_stopped_run_replaces_the_last_output_so_it_never_reads_as_current(sleeper, tmp_path):
    """After SIGTERM, yesterday's passing --output report stayed in place as if it were this run's."""
    python, pidfile = sleeper(tmp_path / "stack" / "bin" / "python")
    output = tmp_path / "node.json"
    output.write_text(json.dumps({"exit_code": 0, "results": [{"check": "gpu.count", "status": "pass"}]}))
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, python, ["tensorflow"])),
               PYTHONPATH=str(ROOT / "agent"))
    code, _ = stopped_once_probing(["--only", "frameworks.tensorflow", "--format", "json", "--timeout", "120",
                                    "--output", str(output)], env, pidfile)
    assert code == 3
    report = json.loads(output.read_text())
    assert report["exit_code"] == 3 and [r["status"] for r in report["results"]] == ["error"]
    assert report["results"][0]["reason"].startswith("not finished: stopped by SIGTERM; the last report was replaced")


@pytest.mark.parametrize(("job_state", "outcome"), [("PENDING", "preempted"), ("CANCELLED", "cancelled")])
def test_a_scheduled_check_slurm_stopped_is_kept_as_preempted_never_as_a_failure(sleeper, fake_bin, tmp_path,
                                                                                 job_state, outcome):
    """gpucheck schedule's job, stopped by Slurm's SIGTERM: a user job preempting it (Slurm requeued it: PENDING
    again) or an admin's scancel (CANCELLED). The node's kept reports hold it as an error saying which, never a
    fail (which would count toward a repeat offender); nothing is drained. The real preemption:
    tests/cluster_lab/test_schedule_lab.py."""
    python, pidfile = sleeper(tmp_path / "stack" / "bin" / "python")
    fake_bin.add("scontrol", f"JobId=77 JobName=gpucheck-weekly-node01\n   JobState={job_state} Reason=None "
                             "Dependency=(null)\n")
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, python, ["tensorflow"])), SLURM_JOB_ID="77",
               PYTHONPATH=str(ROOT / "agent"), PATH=fake_bin.path(), GPUCHECK_STATE_DIR=str(tmp_path / "state"))
    code, err = stopped_once_probing(["--scheduled", "weekly", "--only", "frameworks.tensorflow", "--format", "json",
                                      "--timeout", "120"], env, pidfile)
    assert code == 3, err
    assert f"gpucheck: scheduled weekly check {outcome} (job 77 {job_state}): kept as such, not a failure" in err
    [kept] = list((tmp_path / "state" / "reports").iterdir())
    assert kept.name.endswith("-error.json"), kept.name
    report = json.loads(kept.read_text())
    assert report["facts"]["scheduled"] == {"kind": "weekly", "job": "77", "stopped": outcome, "job_state": job_state}
    [run] = report["results"]
    assert run["status"] == "error" and run["reason"].startswith(f"{outcome}: Slurm stopped this scheduled weekly "
                                                                 "check (stopped by SIGTERM; job 77 " + job_state)


# ---------------------------------------------------------------- a stack python that does not answer

def test_a_hung_stack_python_is_run_once_per_run(sleeper, tmp_path):
    """The library search asks it its sys.path first (and waits one --timeout); libs.ldd and the framework
    probe then do not run it again, and say why, naming it."""
    python, pidfile = sleeper(tmp_path / "stack" / "bin" / "python")
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, python, ["tensorflow"])))
    done = run_gpucheck(["node", "--profile", "generic", "--only", "libs", "frameworks", "--format", "json",
                         "--timeout", "4"], env, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    checks = by_check(report_of(done))
    assert len(pids_in(pidfile)) == 1  # the interpreter was started once, and (the reasons below) not waited on again
    later = f"not asked: {python} did not answer within 4 s earlier in this run"
    assert (checks["frameworks.tensorflow"]["status"], checks["frameworks.tensorflow"]["reason"]) == (
        "error", f"stack tf: {later}")
    assert checks["libs.ldd"]["status"] == "error"
    assert checks["libs.ldd"]["reason"].startswith(f"stack tf: tensorflow extension libraries not checked: {later}")
    places = report_of(done)["facts"]["collect_errors"]
    assert "libraries" not in places and "ldd" not in places and "frameworks" not in places
    assert not alive(pids_in(pidfile)[0])


def test_a_probe_that_never_starts_marks_its_python_and_horovodrun_is_not_run(sleeper, tmp_path):
    """horovodrun --check-build is a script of the same python: after the probe found it silent, it is not run,
    even in the deep run (--full) that asks for it."""
    python, pidfile = sleeper(tmp_path / "stack" / "bin" / "python")
    horovodrun = python.parent / "horovodrun"
    horovodrun.write_text(f"#!{python}\n")
    horovodrun.chmod(0o755)
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, python, ["tensorflow", "horovod"])))
    done = run_gpucheck(["node", "--profile", "generic", "--only", "frameworks", "--full", "--format", "json",
                         "--timeout", "4"], env, timeout=60)
    checks = by_check(report_of(done))
    assert len(pids_in(pidfile)) == 1, pids_in(pidfile)  # horovodrun, a script of the same python, never started
    first = f"{python} did not answer within 4 s: the probe never started (killed)"
    assert (checks["frameworks.tensorflow"]["status"], checks["frameworks.tensorflow"]["reason"]) == (
        "error", f"stack tf: {first}")
    assert (checks["frameworks.horovod"]["status"], checks["frameworks.horovod"]["reason"]) == (
        "error", f"stack tf: horovod.tensorflow: {first}")


def test_a_probe_dies_with_an_agent_killed_outright(tmp_path):
    """SIGKILL (`timeout -k` when TERM was not enough, the OOM killer) leaves the agent no chance to end its
    probes: the probe asked the kernel to be killed with its parent (prctl PR_SET_PDEATHSIG)."""
    pidfile = tmp_path / "probe.pids"
    package = tmp_path / "site" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"import os, time\nwith open({str(pidfile)!r}, 'a') as f:\n    f.write('%d\\n' % os.getpid())\n"
        "time.sleep(600)\n")
    env = dict(os.environ, GPUCHECK_CONFIG=str(node_yaml(tmp_path, Path(sys.executable), ["tensorflow"])),
               PYTHONPATH=os.pathsep.join([str(ROOT / "agent"), str(tmp_path / "site")]))
    agent = subprocess.Popen([sys.executable, "-m", "gpucheck", "node", "--only", "frameworks.tensorflow",
                              "--format", "json", "--timeout", "120"], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        waited = time.monotonic()
        while not pids_in(pidfile) and time.monotonic() - waited < 60 and agent.poll() is None:
            time.sleep(0.1)
        probe = pids_in(pidfile)
        assert probe and alive(probe[0]), "the probe never got to import tensorflow"
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=30)
        waited = time.monotonic()
        while alive(probe[0]) and time.monotonic() - waited < 5:
            time.sleep(0.05)
        assert not alive(probe[0])
    finally:
        for pid in pids_in(pidfile):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
