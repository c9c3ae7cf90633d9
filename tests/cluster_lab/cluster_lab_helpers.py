"""Helpers of the cluster stage tests: a context built from node reports, a fake RemoteHosts that answers
the stages' commands from a model of the cluster (link speeds, broken MPI, rank results), and, for
the lab tests, running `gpucheck cluster` against inventory/lab with the current agent."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucheck import profiles
from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.ssh.result import Remote
from gpucheck.model import Status
from lab import compute, config
from labkit import lab_cli

ROOT = Path(__file__).resolve().parents[2]


def address_of(index: int) -> str:
    return f"10.0.0.{11 + index}"


def make_ctx(names: list[str], profile: str = "lab", gpus: int = 8, frameworks: dict[str, Any] | None = None,
             failed: tuple[str, ...] = (), hostnames: dict[str, str] | None = None, **options: Any) -> ClusterContext:
    """A context as the fan-out leaves it: every node reported (those in `failed` with a failure), each
    report carrying the thresholds of `profile` (checks/) as a current agent's does."""
    hosts = [Host(n, address_of(i), 22, "root", None, (), True) for i, n in enumerate(names)]
    stacks = frameworks if frameworks is not None else {"tf-horovod": {"tensorflow": "2.15.1", "horovod": "0.28.1"}}
    ctx = ClusterContext(Options(**options), Inventory(["test"], "all", None, hosts))
    thresholds = profiles.load(profile).data
    for n in names:
        status = Status.FAIL if n in failed else Status.PASS
        report = {"host": (hostnames or {}).get(n, n), "profile": profile, "exit_code": 2 if n in failed else 0,
                  "results": [], "facts": {"profile": profile, "gpu_count": gpus, "frameworks": stacks},
                  "thresholds": json.loads(json.dumps(thresholds))}
        ctx.nodes[n] = NodeOutcome(n, status, "", "report", report=report)
    return ctx


@dataclass
class FakeBackground:
    runner: FakeRunner
    node: str
    cmd: str
    killed: bool = False

    def wait_for(self, needle: str, timeout: float) -> bool:
        return self.runner.listens(self.node, self.cmd)

    def wait(self, timeout: float | None = None) -> Remote:
        return self.runner.finish(self.node, self.cmd, self.killed)

    def kill(self) -> None:
        self.killed = True


@dataclass
class FakeRunner:
    """The cluster as the stages see it through a RemoteHosts.

    link: node -> Gb/s of its link (a pair gets the slower of its two; `path` overrides a pair);
    flaky: pairs slow on their first measurement only; mpi_broken: nodes where no MPI rank starts;
    ranks: (node, rank, size) -> the GPUCHECK_RESULT dict a workload rank prints (default: a good one).
    """

    addresses: dict[str, str]
    link: dict[str, float] = field(default_factory=dict)
    path: dict[frozenset[str], float] = field(default_factory=dict)
    flaky: set[frozenset[str]] = field(default_factory=set)
    mpi_broken: set[str] = field(default_factory=set)
    hostname: dict[str, str] = field(default_factory=dict)
    rank_result: Callable[[str, int, int, str], dict[str, Any]] | None = None
    nccl_tests: str | None = None  # all_reduce_perf output on the launcher, if it has nccl-tests
    ib_output: Callable[[float], str] | None = None
    commands: list[tuple[str, str]] = field(default_factory=list)
    copies: list[tuple[str, str]] = field(default_factory=list)
    sent: dict[str, str] = field(default_factory=dict)  # receiver -> sender of the current pair
    measured: list[frozenset[str]] = field(default_factory=list)

    def node_at(self, address: str) -> str:
        return next(n for n, a in self.addresses.items() if a == address)

    def speed(self, a: str, b: str) -> float:
        key = frozenset((a, b))
        value = self.path.get(key, min(self.link.get(a, 10.0), self.link.get(b, 10.0)))
        if key in self.flaky and key not in self.measured:
            value = value / 20
        self.measured.append(key)
        return value

    # -- RemoteHosts interface
    def run(self, node: str, cmd: str, timeout: float) -> Remote:
        self.commands.append((node, cmd))
        argv = shlex.split(cmd)
        if argv[0] == "env":
            argv = argv[1:]
            while argv and "=" in argv[0] and not argv[0].startswith("-"):
                argv = argv[1:]
        if "send" in argv and "net" in argv:
            target = self.node_at(argv[argv.index("send") + 1])
            self.sent[target] = node
            return Remote(node, cmd, "{}\n", "", 0)
        if "ib_write_bw" in argv[:1]:
            target = self.node_at(argv[-1])
            value = self.speed(node, target)
            return Remote(node, cmd, (self.ib_output or ib_write_bw_output)(value), "", 0)
        if cmd.startswith("command -v all_reduce_perf"):
            return Remote(node, cmd, "/usr/bin/all_reduce_perf\n" if self.nccl_tests else "", "",
                          0 if self.nccl_tests else 1)
        if "mpirun" in argv:
            return self.mpirun(node, argv, cmd)
        if argv[0] == "mkdir":
            return Remote(node, cmd, "", "", 0)
        raise AssertionError(f"unexpected command on {node}: {cmd}")

    def start(self, node: str, cmd: str, timeout: float) -> FakeBackground:
        self.commands.append((node, cmd))
        return FakeBackground(self, node, cmd)

    def put(self, node: str, local: str | Path, remote_dir: str, timeout: float = 60.0) -> Remote:
        self.copies.append((node, f"{remote_dir}/{Path(local).name}"))
        return Remote(node, "copy", exit=0)

    # -- the fake cluster
    def listens(self, node: str, cmd: str) -> bool:
        return "serve" in cmd or "ib_write_bw" in cmd

    def finish(self, node: str, cmd: str, killed: bool) -> Remote:
        if "serve" in cmd:
            sender = self.sent.pop(node)
            value = self.speed(sender, node)
            return Remote(node, cmd, json.dumps({"listening": 1}) + "\n" + json.dumps({"Gbps": value}) + "\n", "", 0)
        if "ib_write_bw" in cmd:
            return Remote(node, cmd, "", "", 0)
        if "torchrun" in cmd or "TF_CONFIG" in cmd:
            return self.task(node, cmd)
        raise AssertionError(f"unexpected background command on {node}: {cmd}")

    def mpirun(self, node: str, argv: list[str], cmd: str) -> Remote:
        options, program = mpirun_words(argv)
        hosts = options["-H"].split(",")
        slots = [(self.node_at(h.split(":")[0]), int(h.split(":")[1])) for h in hosts]
        size = sum(k for _, k in slots)
        if any(n in self.mpi_broken for n, _ in slots):
            bad = next(n for n, _ in slots if n in self.mpi_broken)
            return Remote(node, cmd, "", f"ORTE was unable to reliably start one or more daemons (on {bad})", 1)
        lines, rank = [], 0
        for host, count in slots:
            for _ in range(count):
                if program[0] == "hostname":
                    lines.append(f"[1,{rank}]<stdout>:{self.hostname.get(host, host)}")
                elif program[0].endswith("all_reduce_perf"):
                    pass
                else:
                    result = (self.rank_result or good_rank)(host, rank, size, program[1])
                    if result is not None:
                        lines.append(f"[1,{rank}]<stdout>:GPUCHECK_RESULT " + json.dumps(result))
                rank += 1
        if program[0].endswith("all_reduce_perf"):
            return Remote(node, cmd, self.nccl_tests or "", "", 0)
        ok = all(f"[1,{r}]" in "\n".join(lines) for r in range(size))
        return Remote(node, cmd, "\n".join(lines) + "\n", "", 0 if ok else 1)

    def task(self, node: str, cmd: str) -> Remote:
        raise AssertionError("no torch/tf-ps job expected in this test")


MPIRUN_VALUES = {"-np": 1, "-H": 1, "--host": 1, "--bind-to": 1, "--map-by": 1, "-x": 1, "--mca": 2}


def mpirun_words(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(option -> its last value, the program and its arguments) of an `mpirun ...` argv; flags
    (--allow-run-as-root, --tag-output, ...) map to ''. An unknown option is the test's failure."""
    options: dict[str, str] = {}
    i = argv.index("mpirun") + 1
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        count = MPIRUN_VALUES.get(word, 0)
        if count == 0 and word not in ("--allow-run-as-root", "--oversubscribe", "--tag-output"):
            raise AssertionError(f"mpirun option the fake does not know: {word}")
        options[word] = " ".join(argv[i + 1:i + 1 + count])
        i += 1 + count
    return options, argv[i:]


def good_rank(host: str, rank: int, size: int, script: str) -> dict[str, Any]:
    """What a healthy rank prints: the smoke job or the all-reduce benchmark, by script name."""
    if "allreduce" in script:
        return {"ok": True, "workload": "allreduce_bench", "rank": rank, "size": size, "hostname": host,
                "backend": "mpi", "bytes": 64 << 20, "algbw_GBps": 1.0, "busbw_GBps": 2.0 * (size - 1) / size,
                "wrong": 0}
    return {"ok": True, "workload": "smoke_horovod_keras", "rank": rank, "size": size, "hostname": host,
            "loss_first": 1.0, "loss_last": 0.2, "loss_fell": True, "weights_sha256": "ab" * 32,
            "samples_per_s": 1000.0 * (0.8 if size > 1 else 1.0)}


def ib_write_bw_output(gbps: float) -> str:
    """A perftest client's output at one message size (shaped as ib_write_bw 3.x prints it)."""
    return f"""\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 128
 Mtu             : 4096[B]
 Link type       : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1234567          0.00               {gbps:.2f}   \t\t   0.700000
---------------------------------------------------------------------------------------
"""


def runner_for(ctx: ClusterContext, **kwargs: Any) -> FakeRunner:
    return FakeRunner({h.name: h.address for h in ctx.inventory.hosts}, **kwargs)


# ------------------------------------------------------------------ lab runs

LAB_INVENTORY = config.INVENTORY  # this worker's lab instance's (tests/conftest.py)
GOLDEN_GLOB = f"{config.CACHE_DIR}/golden-*/meta.json"
SCENARIOS = ("dgx-h100", "dgx-h100", "dgx-h100", "ecc-uncorrected")
HEALTHY = ("node01", "node02", "node03")
FAULTY = "node04"


@dataclass
class LabState:
    timings: dict[str, float] = field(default_factory=dict)
    figures: dict[str, object] = field(default_factory=dict)


def lab(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """`python3 -m lab ARGS` from the repository root (labkit.lab_cli, with the cluster lab's longer timeout)."""
    return lab_cli(*args, timeout=timeout, check=check)


def run_cluster(args: list[str], report: Path, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict, float]:
    """`gpucheck cluster -i inventory/lab ARGS --report REPORT` as a user runs it; (process, report.json, s). The
    runs of one test share a history store beside their reports, no other test's: what one test planted (a hung
    host, a drifted version) must not make a node a repeat offender in another's verdicts."""
    environ = dict(os.environ)
    environ["GPUCHECK_HISTORY"] = str(report.parent / "history.sqlite")
    environ["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("ANSIBLE_CONFIG", None)
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpucheck", "cluster", "-i", str(LAB_INVENTORY), "--report",
                           str(report), *args], capture_output=True, text=True, env=environ, timeout=timeout,
                          cwd=ROOT, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - began
    try:
        doc = json.loads((report / "report.json").read_text())
    except (OSError, ValueError):
        raise AssertionError(f"no report.json (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
    return done, doc, wall


def by_check(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["cluster"]}


def drained(report: Path) -> dict[str, str]:
    out = {}
    for line in (report / "drain.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            node, _, reason = line.partition(" ")
            out[node] = reason.strip()
    return out


def playbook_command(playbook: str, *args: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of `ansible-playbook -i inventory/lab/hosts.yml PLAYBOOK ARGS`, run from the repository
    root as a user runs it: this venv's ansible first on PATH, no ANSIBLE_CONFIG of the caller's."""
    environ = {**os.environ, **(env or {})}
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    environ.pop("ANSIBLE_CONFIG", None)
    return ["ansible-playbook", "-i", str(LAB_INVENTORY), playbook, *args], environ


def ansible_playbook(playbook: str, *args: str, timeout: float = 1200,
                     env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv, environ = playbook_command(playbook, *args, env=env)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=environ, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def slurm_cmd(env: dict[str, str], *argv: str) -> str:
    """A Slurm client command on this machine (env: the `slurm` fixture's), which must succeed; its output."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


# slurmd runs no HealthCheckProgram on a timer in these tests: they run it themselves, when they mean to. On its
# 300-s timer it drained the faulty node between a test's resume and its `gpucheck cluster --drain` (seen in CI).
NO_TIMED_HEALTH_CHECK = ("-e", "slurm_health_check_interval_s=0")


def scheduler(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """site.yml's scheduler stage (Slurm), which must succeed; slurmd's timed health check off."""
    done = ansible_playbook("site.yml", "--tags", "scheduler", *NO_TIMED_HEALTH_CHECK, *args, timeout=timeout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    return done


def task_outcomes(output: str, task: str) -> dict[str, set[str]]:
    """Each outcome (ok, changed, skipping, fatal, ...) of a task named `ROLE : NAME` in an ansible-playbook output,
    with the hosts that had it, over every batch that ran it (hosts of one batch print in the order they end)."""
    outcomes: dict[str, set[str]] = {}
    for block in re.findall(rf"^TASK \[{re.escape(task)}\] \**\n(.*?)(?:\n\n|\Z)", output, re.M | re.S):
        for outcome, host in re.findall(r"^(\w+): \[([^\]]+)\]", block, re.M):
            outcomes.setdefault(outcome, set()).add(host)
    return outcomes


def changed(output: str) -> dict[str, int]:
    """Each host's changed count in a PLAY RECAP."""
    return {host: int(n) for host, n in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", output, re.M)}


def refresh_agent(timeout: float = 900) -> float:
    """ansible-playbook site.yml --tags agent,mpi against the lab: the hosts run this checkout's agent, and OpenMPI
    is set for this lab's subnet (the golden image may have been built by another lab instance, on its own)."""
    began = time.monotonic()
    done = ansible_playbook("site.yml", "--tags", "agent,mpi", timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"refreshing the agent failed ({done.returncode}):\n{done.stdout[-6000:]}\n"
                             f"{done.stderr[-3000:]}")
    return time.monotonic() - began


def netns_exec(node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """A command inside a lab host's network namespace (lab/config.py netns_name)."""
    netns = config.netns_name(node)
    done = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"ip netns exec {netns} {' '.join(argv)}: {done.stderr}")
    return done


def host_veth(node: str) -> str:
    """The host-side end of the node's veth pair (lab/config.py veth_name)."""
    return config.veth_name(node)


def slow_link(node: str, rate: str = "200mbit") -> None:
    """Slow the node's link both ways: its eth0 egress (inside its namespace) and the bridge-side veth's
    egress (the node's ingress)."""
    shape = ["tc", "qdisc", "replace", "dev"]
    tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"]
    netns_exec(node, *shape, "eth0", *tbf)
    subprocess.run([*shape, host_veth(node), *tbf], check=True, capture_output=True, timeout=30)


def restore_link(node: str) -> None:
    netns_exec(node, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
    subprocess.run(["tc", "qdisc", "del", "dev", host_veth(node), "root"], capture_output=True, timeout=30)


def knob_wrapper(directory: str, extra: str = "") -> str:
    """A `--remote-command` for a test that sets the lab's fake-GPU knobs its own way (lab/compute.py): the agent
    with the lab's environment file read, then DIRECTORY/env over it; `extra`: arguments after the caller's."""
    return f"""#!/bin/sh
# gpucheck on the lab's simulated GPU compute, with this test's knobs from {directory}/env
set -a; . {compute.AGENT_ENV_FILE}; . {directory}/env; set +a
exec {compute.AGENT_LINK} "$@"{' ' + extra if extra else ''}
"""


def put_file(node: str, path: str, data: bytes, mode: str = "0644") -> None:
    """Write `data` to `path` on a lab host (through `lab ssh`, as base64 on the command line)."""
    encoded = base64.b64encode(data).decode()
    lab("ssh", node, "--", f"sh -c 'echo {encoded} | base64 -d > {path} && chmod {mode} {path}'", timeout=120)


def lines_matching(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]
