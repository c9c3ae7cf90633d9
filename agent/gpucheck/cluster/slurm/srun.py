"""Slurm jobs from this machine (the admin node, a Slurm client) for `gpucheck cluster --launcher slurm`: the
command line of one, and running it to its end within a time limit. Slurm starts the tasks on the nodes
(slurmctld's fan-out tree, no SSH from here), streams their output back labelled with the task id, and ends them
with the job.

A job is `salloc` (the allocation: whole nodes, --exclusive, with their GPUs as GRES) running one `srun` step in
it, because task placement by our list (--distribution=arbitrary) works for a step in an allocation, not for an
srun that makes its own. What the step asks for, and why:
- --export=NONE and a fixed PATH on the node: the tasks get the node's environment, not this machine's (a
  virtualenv or PYTHONPATH here means nothing there), as a job script's `srun` in a clean login would;
- --kill-on-bad-exit=0: one task's failure (a failed node check exits 2) must not end the others;
- --label: "  3: text", how a line is traced to its task and so to its node (see WRAP);
- --distribution=arbitrary with SLURM_HOSTFILE: task i runs on the i-th node we name, whatever order Slurm keeps
  its nodes in, so a rank is traced to its node as under mpirun; --overcommit: more tasks than CPUs (CPU nodes);
- --time (on the allocation): Slurm's own end of a job we lost; one that overruns our limit is cancelled by name.
Nothing here raises: salloc or srun missing, refused or overrunning is a `Remote` with `error` set."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..inventory import Host
from ..ssh.result import Remote, tail

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the tasks' PATH on the node
GRACE_S = 15.0  # srun needs a moment beyond the tasks' own limit to allocate, start and collect
LABEL = re.compile(r"^ *(\d+): ?(.*)$")  # srun --label's "%*d: " before each line of a task
# srun cuts a task's line at 1 KiB and labels each piece as a line of its own, so a long line (a node report, a
# rank's result) cannot be told from two. Each task therefore runs its program under WRAP, which sends every line
# in pieces of at most CHUNK bytes, each marked "+s " (more follows) or "=s " (the line ends) with s its stream:
# n the node's name, o stdout, e stderr (after stdout: from a file on the node), x the exit status (last).
CHUNK = 900
_AWK = ('{ while (length($0) > CHUNK) { print "+" s " " substr($0, 1, CHUNK); $0 = substr($0, CHUNK + 1) } '
        'print "=" s " " $0 }').replace("CHUNK", str(CHUNK))
WRAP = ('echo "=n $SLURMD_NODENAME"; rc=$(mktemp) && err=$(mktemp) || exit 1; '
        '{ "$@" 2>"$err"; echo $? >"$rc"; } | awk -v s=o \'AWK\'; awk -v s=e \'AWK\' "$err"; '
        'code=$(cat "$rc"); rm -f "$rc" "$err"; echo "=x $code"; exit "$code"').replace("AWK", _AWK)
_names = itertools.count(1)


def node_name(host: Host) -> str:
    """The host's NodeName in Slurm: its `slurm_node_name` host variable, else its inventory name."""
    return str(host.vars.get("slurm_node_name") or host.name)


def job_name(what: str) -> str:
    """A name no other job of ours has (scancel --name ends exactly this one)."""
    return f"gpucheck-{what}-{os.getpid()}-{next(_names)}"


@dataclass
class Job:
    """One Slurm job: `program` as one task on each entry of `tasks` (Slurm node names in task order; a node named
    k times runs k tasks), every task with `env` and the node's PATH."""

    what: str  # a word for its name: nodes, mpi, ddp, copy ...
    tasks: Sequence[str]
    program: Sequence[str]
    seconds: float  # the tasks' own limit; the job gets GRACE_S more
    mpi: str | None = None  # srun --mpi (pmix for MPI programs)
    gpus_per_node: int = 0  # the GRES the job asks for on every node (its steps get them all)
    immediate_s: float | None = None  # give up if the nodes cannot be had within this long
    env: Mapping[str, str] = field(default_factory=dict)
    name: str = field(default="")
    jobid: str = ""  # run as a step of this allocation (allocation.py), beside its other steps: no salloc

    def __post_init__(self) -> None:
        self.name = self.name or job_name(self.what)

    def argv(self, hostfile: str) -> list[str]:
        step = ["srun", f"--ntasks={len(self.tasks)}", "--distribution=arbitrary", "--overcommit", "--export=NONE",
                "--kill-on-bad-exit=0", "--label"]
        if self.mpi:
            step.append(f"--mpi={self.mpi}")
        task_env = {"PATH": NODE_PATH, **self.env}
        step += ["/usr/bin/env", *(f"{k}={v}" for k, v in task_env.items()), "/bin/sh", "-c", WRAP, "gpucheck-task",
                 *self.program]
        if self.jobid:  # --overlap: the allocation's other steps keep their CPUs and GPUs, and share them
            return ["/usr/bin/env", f"SLURM_HOSTFILE={hostfile}", step[0], f"--jobid={self.jobid}", "--overlap",
                    *step[1:]]
        nodes = list(dict.fromkeys(self.tasks))
        alloc = ["salloc", f"--job-name={self.name}", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
                 "--exclusive", f"--time={max(1, math.ceil((self.seconds + GRACE_S) / 60))}"]
        if self.gpus_per_node:
            alloc.append(f"--gres=gpu:{self.gpus_per_node}")
        if self.immediate_s:
            alloc.append(f"--immediate={max(1, math.ceil(self.immediate_s))}")
        return [*alloc, "/usr/bin/env", f"SLURM_HOSTFILE={hostfile}", *step]


@dataclass
class Task:
    """What one task gave, whole: its node's name, its stdout and stderr, its exit status (None: it never said)."""

    node: str = ""
    stdout: str = ""
    stderr: str = ""
    exit: int | None = None


class Collector:
    """Puts each task's lines back together from srun --label output (WRAP's chunks) as they come; calls
    on_task(task id, Task) when a task has said its exit status."""

    def __init__(self, on_task: Callable[[int, Task], None] | None = None) -> None:
        self.tasks: dict[int, Task] = {}
        self.other: list[str] = []  # lines no task printed (srun's own, a node's slurmstepd)
        self._open: dict[tuple[int, str], list[str]] = {}
        self.on_task = on_task

    def line(self, raw: str) -> None:
        m = LABEL.match(raw)
        if not m or len(m[2]) < 2 or m[2][0] not in "+=" or m[2][1] not in "noex":
            self.other.append(raw)
            return
        number, text = int(m[1]), m[2]
        more, stream, body = text[0] == "+", text[1], text[3:]
        task = self.tasks.setdefault(number, Task())
        parts = self._open.setdefault((number, stream), [])
        parts.append(body)
        if more:
            return
        whole = "".join(parts)
        parts.clear()
        if stream == "n":
            task.node = whole
        elif stream == "o":
            task.stdout += whole + "\n"
        elif stream == "e":
            task.stderr += whole + "\n"
        else:
            task.exit = int(whole) if whole.strip().isdigit() else None
            if self.on_task:
                self.on_task(number, task)

    def labelled(self, stream: str) -> str:
        """Every task's stdout or stderr, task by task, each line as "rank: text" (as srun --label prints it)."""
        return "".join(f"{n}: {line}\n" for n, task in sorted(self.tasks.items())
                       for line in getattr(task, stream).splitlines())


@dataclass
class Step:
    """An srun run: its Remote (stdout and stderr put back together, task by task) and each task's own."""

    remote: Remote
    tasks: dict[int, Task] = field(default_factory=dict)


def run(job: Job, input_text: str | None = None, on_task: Callable[[int, Task], None] | None = None) -> Step:
    """Run the job and wait up to its seconds + GRACE_S; on_task hears of each task as it ends. Over the limit, or
    on Ctrl-C, it is stopped and cancelled (KeyboardInterrupt re-raised). The exit status is the highest of the
    tasks' (salloc's own when not every task said)."""
    tasks, seconds, name = job.tasks, job.seconds, job.name
    began = time.monotonic()
    collect = Collector(on_task)
    with tempfile.NamedTemporaryFile("w", prefix="gpucheck-hosts-", suffix=".txt") as hostfile:
        hostfile.write("\n".join(tasks) + "\n")
        hostfile.flush()
        words = job.argv(hostfile.name)
        shown = shlex.join(words)
        try:
            stdin = subprocess.PIPE if input_text is not None else subprocess.DEVNULL
            proc = subprocess.Popen(words, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, errors="replace", start_new_session=True)
        except (FileNotFoundError, PermissionError) as exc:
            return Step(Remote("srun", shown, error=f"salloc not found on this machine ({exc.strerror}): install "
                               "slurm-client here, with the cluster's slurm.conf and munge key", kind="usage"))
        err: list[str] = []
        readers = [threading.Thread(target=_read, args=(proc.stdout, collect.line), daemon=True),
                   threading.Thread(target=_read, args=(proc.stderr, err.append), daemon=True)]
        for reader in readers:
            reader.start()
        if input_text is not None:  # fed aside: srun reads it only once the tasks run, which may be never
            readers.append(threading.Thread(target=_feed, args=(proc, input_text), daemon=True))
            readers[-1].start()
        try:
            proc.wait(timeout=seconds + GRACE_S)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(proc, name)
        except KeyboardInterrupt:
            stop(proc, name)
            raise
        for reader in readers:
            reader.join(timeout=5)
    wall = time.monotonic() - began
    stdout = collect.labelled("stdout")
    stderr = collect.labelled("stderr") + "\n".join(collect.other + [x.rstrip("\n") for x in err])
    codes = [t.exit for t in collect.tasks.values()]
    code = max(codes) if codes and None not in codes and len(codes) == len(tasks) else proc.returncode
    if timed_out:
        return Step(Remote("srun", shown, stdout, tail(stderr), None, f"timed out: the Slurm job did not end "
                           f"within {seconds + GRACE_S:g} s (cancelled)", "timeout", wall), collect.tasks)
    said = refusal(stderr)
    if said and not collect.tasks:
        return Step(Remote("srun", shown, stdout, tail(stderr), proc.returncode, f"Slurm did not run the job: {said}",
                           "slurm", wall), collect.tasks)
    return Step(Remote("srun", shown, stdout, tail(stderr), code, wall_s=wall), collect.tasks)


def refusal(stderr: str) -> str:
    """srun's own line when Slurm would not run the job at all (no allocation, no such node, ...); '' if none."""
    for line in stderr.splitlines():
        if re.search(r"Unable to allocate resources|Invalid (node name|partition|job credential)|"
                     r"Unable to contact slurm controller|Job submit/allocate failed|Authentication error|"
                     r"Unable to create step", line, re.I):
            return re.sub(r"^(salloc|srun): (error: )?", "", line.strip())[:300]
    return ""


def _read(stream, on_line: Callable[[str], None]) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        on_line(line.rstrip("\n"))


def _feed(proc: subprocess.Popen, text: str) -> None:
    """srun copies its stdin to every task (its default): a file it sends to the nodes."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(text)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def stop(proc: subprocess.Popen, name: str) -> None:
    """Two SIGINTs within a second make srun cancel the step; then the group is killed and the job cancelled by
    name, so no task outlives us on a node."""
    for _ in range(2):
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.3)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()
    if name:
        # if scancel cannot, the job has its --time: Slurm ends it then
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30, check=False)
