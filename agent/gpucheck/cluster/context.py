"""What the cluster stages share: the options, the hosts, each node's outcome, and what the stages add
(results, per-node figures for the straggler comparison, pair bandwidths, scaling points).
Light to import (the inventory type only for annotations): the command line builds its defaults from
Options before anything heavy loads."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model import Result, Status
from .frameworks import DEFAULT_FRAMEWORK

if TYPE_CHECKING:
    from .inventory import Inventory


@dataclass
class ClusterResult(Result):
    """A cluster-level result; `nodes` maps each node it blames to why (those nodes are drained on fail)."""

    nodes: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeOutcome:
    """What running `gpucheck node` on one host gave: its report, or why there is none."""

    host: str
    status: Status
    reason: str
    kind: str  # report | unreachable | timeout | auth | host-key | ssh | agent-missing | agent-crashed | usage |
    # malformed (a report that is not the shape of one) | duplicate (a machine already listed: duplicates.py)
    wall_s: float = 0.0
    exit_code: int | None = None  # the remote command's exit status, when it ended
    report: dict[str, Any] | None = None
    evidence: str = ""
    via: str = "ssh"  # how the agent was started there: ssh | srun (--launcher slurm) | kubernetes (a pod)
    slurm_state: str = ""  # --launcher slurm: why Slurm could not run it there (then checked over SSH)

    @property
    def facts(self) -> dict[str, Any] | None:
        return (self.report or {}).get("facts") if self.report else None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status.value, "reason": self.reason, "kind": self.kind,
                "wall_s": round(self.wall_s, 3), "exit_code": self.exit_code, "evidence": self.evidence,
                "via": self.via, **({"slurm_state": self.slurm_state} if self.slurm_state else {}),
                "report": self.report}


@dataclass
class Options:
    """Everything `gpucheck cluster` was asked for; the command line takes its defaults from here."""

    # what each node runs, and the fan-out
    profile: str | None = None
    full: bool = False
    node_timeout: float | None = None
    forks: int = 50
    host_timeout: float = 300.0
    connect_timeout: float = 10.0
    remote_command: str = "gpucheck"
    # the comparison and the stages after the fan-out
    straggler_fraction: float = 0.9
    network_sample: int | None = None
    stages: tuple[str, ...] | None = None  # the stages run, in order; None: every one (stages.STAGE_NAMES)
    # what --stages named (and burn, with --burn-minutes): opt-in stages run only when asked for
    stages_asked: tuple[str, ...] = ()
    framework: str = DEFAULT_FRAMEWORK  # a key of frameworks.FRAMEWORKS
    pair_seconds: float = 3.0
    pair_fraction: float = 0.7
    stage_timeout: float = 600.0
    smoke_steps: int = 20  # steps per epoch on every rank (2 epochs)
    allreduce_size: str = "64M"
    scaling_efficiency_min: float | None = None  # warn below; None: reported beside the published figures only
    # the training benchmark (docs/training.md); None: ResNet-50 as published on GPUs, a small one on CPU ranks
    train_width: int | None = None
    train_image_size: int | None = None
    train_batch_size: int | None = None
    train_iterations: int = 5
    drain: bool = False  # apply the verdicts to the nodes' scheduler (Launcher.drain: Slurm's or Kubernetes')
    launcher: str = "ssh"  # ssh | slurm | kubernetes: how node checks and jobs start (launchers/)
    kubeconfig: str | None = None  # --launcher kubernetes: the API's credentials (None: in a pod, or KUBECONFIG)
    pod_template: str | None = None  # --launcher kubernetes: the site's Pod for a node's checks (cluster/pods.py)
    job_template: str | None = None  # --launcher kubernetes: the site's Pod for the MPI jobs (cluster/mpi_pods.py)
    burn_seconds: float = 600.0  # stage burn (opt-in): how long every GPU and the fabric are loaded at once
    burn_fabric_fraction: float = 0.7  # stage burn: an all-reduce under load below F x its cold figure warns
    history: Path | None = None  # the history store (None: history.store.default_path())
    no_history: bool = False  # neither compare with the history nor record the run in it

    def agent_argv(self) -> list[str]:
        """The agent's command on the nodes (--remote-command) as argv."""
        return shlex.split(self.remote_command)


@dataclass
class ClusterContext:
    options: Options
    inventory: Inventory
    nodes: dict[str, NodeOutcome] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    # metric -> node -> value, higher is better; stages add theirs before the straggler stage runs
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    # network stage: {"a", "b", "value", "unit", "status"}; smoke stage: {"label", "gpus", "throughput", "efficiency"}
    pairs: list[dict[str, Any]] = field(default_factory=list)
    scaling: list[dict[str, Any]] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)  # the training stage's table (training_verdict)
    # the history stage: per checked node, its key figures over its recent runs and when it last passed a run of
    # active checks ({node: {"trends": [...], "last_active_pass": UTC}}, history/trends.py)
    history: dict[str, Any] = field(default_factory=dict)
    burn: dict[str, Any] = field(default_factory=dict)  # the burn stage's figures (stages/burn_record.py)
    # rewrites the report files (the command line sets it): a long stage calls it as it goes, so an interrupted
    # run or a reader of report.json meanwhile sees what it has measured so far
    checkpoint: Callable[[], Any] | None = None
    drained: list[dict[str, str]] = field(default_factory=list)  # what --drain did, node by node
    drained_in: str = "slurm"  # where (Launcher.drains_in): the report's key for `drained`
    # what the launcher read of the nodes at the start (Launcher.read_nodes): --launcher slurm, every node Slurm
    # knows (slurm.NodeState by NodeName); --launcher kubernetes, every Node (its JSON by name)
    scheduler_nodes: dict[str, Any] | None = None
    slurm_job: str = ""  # --launcher slurm: the allocation a stage holds (the burn's); its jobs run as its steps
    # --launcher kubernetes: what its job image holds (job_image.read: probed once, by the first stage that asks),
    # and the workload files its jobs carry (Launcher.distribute's, by name)
    job_image: dict[str, Any] | None = None
    job_files: dict[str, bytes] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def checked(self) -> list[str]:
        """Nodes that returned a report, in inventory order: the ones later stages can use."""
        return [h.name for h in self.inventory.hosts if h.name in self.nodes and self.nodes[h.name].report]

    def stack_facts(self, node: str) -> dict[str, Any]:
        """Where a job on `node` learns its stacks (`frameworks`, `stacks`): the jobs' own image where they run in
        one, else the node's report."""
        if self.job_image is not None:
            return self.job_image
        return (self.nodes[node].facts or {}) if node in self.nodes else {}

    def usable(self) -> list[str]:
        """Checked nodes that did not fail: partners for network and training stages."""
        return [n for n in self.checked() if self.nodes[n].status != Status.FAIL]
