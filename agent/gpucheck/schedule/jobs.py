"""What `gpucheck schedule` asks Slurm for: one job per node and kind of check (daily, weekly), named
gpucheck-KIND-NODE, in the scheduled-checks partition, the whole node (--exclusive), requeued when a user job
preempts it, beginning when it is due. Each job, once its check has run, queues its successor EVERY later: the
schedule lives in Slurm's own queue (squeue shows when each node's next check begins), with no timer or cron on
any host; Debian 12's Slurm 22.05 has no scrontab."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from .. import slurm

KINDS = ("daily", "weekly")
DEFAULT_EVERY_S = {"daily": 86400, "weekly": 7 * 86400}
# daily: the light active checks (GEMM, memory and host bandwidth, memtest, peers, the node's own NCCL, the
# passive checks with them) without the sustained burn and DCGM's long diagnostic; weekly: all of it, the burn at
# its default length. Both with the node's profile, as `gpucheck node --full` judges it at handoff.
DEFAULT_ARGS = {"daily": ["--full", "--skip", "gpu.burn", "gpu.dcgm"], "weekly": ["--full"]}
DEFAULT_PARTITION = "gpucheck"
# Still queued, running, or on its way back to the queue (a preempted job is requeued): not to be submitted again.
LIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "RESIZING", "SUSPENDED", "PREEMPTED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
QUEUE_FORMAT = "%i|%j|%T|%S"  # job id, name, state, (expected) start time
LOG = "/var/log/%x.log"  # on the node: %x is the job's name; /var/log exists before any script of ours runs
REPORT_DIR = "/var/lib/gpucheck"


@dataclass(frozen=True)
class Settings:
    partition: str = DEFAULT_PARTITION
    every_s: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_EVERY_S))  # 0: that kind is off
    args: dict[str, list[str]] = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_ARGS.items()})
    gpucheck: str = "gpucheck"  # the command on the nodes

    def kinds(self) -> list[str]:
        return [kind for kind in KINDS if self.every_s.get(kind)]

    def schedule_argv(self) -> list[str]:
        """The options that say this schedule again, for the successor each job queues."""
        argv = ["--partition", self.partition]
        for kind in KINDS:
            # --KIND-args=VALUE: a value such as "--full" would otherwise read as an option of its own
            argv += [f"--{kind}", f"{self.every_s.get(kind, 0)}s", f"--{kind}-args={shlex.join(self.args[kind])}"]
        return argv


@dataclass(frozen=True)
class Queued:
    job: str
    name: str
    state: str
    begins: str


def job_name(kind: str, node: str) -> str:
    return f"gpucheck-{kind}-{node}"


def script(settings: Settings, kind: str, node: str) -> str:
    """The batch script of one scheduled check: the check, then its successor. A preempted job is killed with its
    shell before the successor is queued; Slurm requeues the job itself."""
    check = [settings.gpucheck, "node", "--scheduled", kind, *settings.args[kind], "--format", "json",
             "--output", f"{REPORT_DIR}/scheduled-{kind}.json"]
    successor = [settings.gpucheck, "schedule", "--next", kind, "--node", node, *settings.schedule_argv(),
                 "--gpucheck", settings.gpucheck]
    return f"""#!/bin/sh
# gpucheck's scheduled {kind} check of {node}, queued by `gpucheck schedule` (docs/slurm.md). A user job preempts
# it (Slurm requeues it, the node's kept reports say preempted); a failure drains the node; at its end it queues
# the next one, {settings.every_s[kind]} s later.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="${{HOME:-/root}}"
if [ -r /etc/default/gpucheck ]; then set -a; . /etc/default/gpucheck; set +a; fi
mkdir -p {REPORT_DIR}
{shlex.join(check)}
status=$?
{shlex.join(successor)}
exit $status
"""


def partition_nodes(partition: str) -> list[str]:
    out = slurm.client("sinfo", ["-h", "-N", "-p", partition, "-o", "%N"], doing="list the nodes of")
    return sorted(set(out.split()))


def queued(partition: str) -> list[Queued]:
    out = slurm.client("squeue", ["-h", "-p", partition, "-o", QUEUE_FORMAT], doing="read the queue of")
    jobs = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[1].startswith("gpucheck-"):
            jobs.append(Queued(*parts))
    return jobs


def submit(settings: Settings, kind: str, node: str, begin: str) -> str:
    """sbatch one scheduled check; its job id."""
    out = slurm.client("sbatch", ["--parsable", "--partition", settings.partition, "--nodelist", slurm.one_node(node),
                                  "--exclusive", "--requeue", "--job-name", job_name(kind, node),
                                  "--begin", begin, "--output", LOG, "--open-mode", "append", "--chdir", "/"],
                       node, "queue a scheduled check on", input_text=script(settings, kind, node))
    return out.strip().split(";")[0]


def cancel(job: str) -> None:
    slurm.client("scancel", [job], doing="cancel a scheduled check of")
