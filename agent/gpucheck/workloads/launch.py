"""Command lines and environments that start the workloads across nodes (gpucheck side; stdlib only).

The workloads themselves (smoke_horovod_keras.py, smoke_torch_ddp.py, smoke_tf_ps.py, allreduce_bench.py,
and the training benchmark's resnet_horovod_keras.py and resnet_torch_ddp.py) are standalone scripts run by a
framework virtualenv's python, each importing rank_io.py from its own folder (``files_for`` names what must be
copied to a node); this module only builds what starts them, as argv lists (never a shell string with
interpolated values; ``remote_command`` quotes each word for the one place that needs a string, an SSH
command line):

- ``mpirun_command`` / ``horovodrun_command``: one launcher on the admin node starts every rank;
- ``torchrun_command``: one torchrun per node (env:// rendezvous on the first node);
- ``plan_ps_cluster`` + ``tf_config``: TensorFlow parameter-server mode, one process per task, each
  with its own ``TF_CONFIG``, started over SSH by the cluster stage.

Every command here was run on a 2-core Debian 12 machine as root with Debian's OpenMPI 4.1.4 (the
tests in tests/workloads run them): as root OpenMPI needs ``--allow-run-as-root`` (or
``OMPI_ALLOW_RUN_AS_ROOT=1`` and ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``), and more ranks than cores
need ``--oversubscribe``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "horovod": HERE / "smoke_horovod_keras.py",
    "torch": HERE / "smoke_torch_ddp.py",
    "tf-ps": HERE / "smoke_tf_ps.py",
    "allreduce": HERE / "allreduce_bench.py",
    "resnet-horovod": HERE / "resnet_horovod_keras.py",
    "resnet-torch": HERE / "resnet_torch_ddp.py",
}
# The modules every script in SCRIPTS imports from its own folder: copied beside the script on every node.
SUPPORT_FILES = (HERE / "rank_io.py",)
# What mpirun needs to start ranks as root (Debian's OpenMPI refuses otherwise).
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
PS_ROLES = ("chief", "worker", "ps")


def script_path(kind: str) -> Path:
    """The file of one workload: a key of SCRIPTS ('horovod', 'torch', 'tf-ps', 'allreduce', 'resnet-horovod',
    'resnet-torch')."""
    try:
        return SCRIPTS[kind]
    except KeyError:
        raise ValueError(f"unknown workload {kind!r}: one of {', '.join(SCRIPTS)}") from None


def files_for(kind: str) -> list[Path]:
    """Every file one workload needs on a node, in one folder: its script first, then its support modules."""
    return [script_path(kind), *SUPPORT_FILES]


def _hosts_arg(slots: Sequence[tuple[str, int]]) -> str:
    for host, count in slots:
        if not host or any(c in host for c in ",: \t\n") or count < 1:
            raise ValueError(f"bad host slot {host!r}:{count}")
    return ",".join(f"{host}:{count}" for host, count in slots)


def mpirun_command(program: Sequence[str], slots: Sequence[tuple[str, int]], *,
                   as_root: bool = False, oversubscribe: bool = False, env_names: Sequence[str] = (),
                   tcp_if: str | None = None, mpirun: str = "mpirun",
                   extra: Sequence[str] = ()) -> list[str]:
    """``mpirun -np N -H h1:s1,h2:s2 --bind-to none --map-by slot [-x VAR ...] program...``.

    ``slots`` is one (host, ranks) pair per node; ``env_names`` are exported to every rank with ``-x``;
    ``tcp_if`` restricts OpenMPI's TCP traffic to one interface or subnet (e.g. ``lo``, ``ib0``).
    """
    total = sum(count for _, count in slots)
    cmd = [mpirun, "-np", str(total), "-H", _hosts_arg(slots), "--bind-to", "none", "--map-by", "slot"]
    if as_root:
        cmd.append("--allow-run-as-root")
    if oversubscribe:
        cmd.append("--oversubscribe")
    if tcp_if:
        cmd += ["--mca", "btl_tcp_if_include", tcp_if, "--mca", "oob_tcp_if_include", tcp_if]
    for name in env_names:
        cmd += ["-x", name]
    return [*cmd, *extra, *program]


def horovodrun_command(program: Sequence[str], slots: Sequence[tuple[str, int]], *, gloo: bool = False,
                       horovodrun: str = "horovodrun", network_interface: str | None = None,
                       start_timeout_s: int | None = None, extra: Sequence[str] = ()) -> list[str]:
    """``horovodrun [--gloo|--mpi] -np N -H h1:s1,... program...`` (Gloo needs SSH between nodes only)."""
    total = sum(count for _, count in slots)
    cmd = [horovodrun, "--gloo" if gloo else "--mpi", "-np", str(total), "-H", _hosts_arg(slots)]
    if network_interface:
        cmd += ["--network-interface", network_interface]
    if start_timeout_s:
        cmd += ["--start-timeout", str(int(start_timeout_s))]
    return [*cmd, *extra, *program]


def torchrun_command(script: str | Path, script_args: Sequence[str], *, nnodes: int, node_rank: int,
                     nproc_per_node: int, master_addr: str, master_port: int = 29500,
                     torchrun: str = "torchrun") -> list[str]:
    """One node's torchrun (static rendezvous, env://): run the same on every node with its node_rank."""
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank {node_rank} not in 0..{nnodes - 1}")
    return [torchrun, "--nnodes", str(nnodes), "--node-rank", str(node_rank),
            "--nproc-per-node", str(nproc_per_node), "--master-addr", master_addr,
            "--master-port", str(master_port), str(script), *script_args]


@dataclass(frozen=True)
class PsTask:
    """One task of a parameter-server cluster: where it runs and the TF_CONFIG it is started with."""

    host: str
    port: int
    role: str  # chief | worker | ps
    index: int
    tf_config: str = field(repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(base or {})
        env["TF_CONFIG"] = self.tf_config
        if self.role == "ps":
            env["CUDA_VISIBLE_DEVICES"] = ""  # ps tasks hold variables on the CPU
        return env


def tf_config(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> str:
    """The TF_CONFIG JSON for one task of ``cluster`` ({"chief": [...], "worker": [...], "ps": [...]})."""
    if role not in PS_ROLES:
        raise ValueError(f"role must be one of {PS_ROLES}, not {role!r}")
    members = list(cluster.get(role, []))
    if not 0 <= index < len(members):
        raise ValueError(f"no {role} {index} in a cluster with {len(members)} {role} task(s)")
    return json.dumps({"cluster": {k: list(v) for k, v in cluster.items() if v},
                       "task": {"type": role, "index": index}}, sort_keys=True)


def plan_ps_cluster(hosts: Sequence[str], base_port: int = 2222, *, num_ps: int = 1,
                    workers_per_host: int = 1, chief_host: str | None = None) -> list[PsTask]:
    """Lay out a PS cluster on ``hosts`` and build each task's TF_CONFIG.

    Every host gets ``workers_per_host`` workers (one per GPU is the usual choice); ``num_ps`` ps tasks
    go round-robin over the hosts; the chief goes on ``chief_host`` (default: the first host). Ports are
    given per host from ``base_port`` up, so several tasks on one host (or a host named twice: every
    task on 127.0.0.1 for a local test) never collide. Returns the tasks chief first, then workers, then ps.
    """
    if not hosts:
        raise ValueError("no hosts")
    if num_ps < 1 or workers_per_host < 1:
        raise ValueError("need at least one ps and one worker per host")
    if not 0 < base_port < 65536:
        raise ValueError(f"bad base port {base_port}")
    next_port: dict[str, int] = {}

    def take(host: str) -> tuple[str, int]:
        port = next_port.get(host, base_port)
        if port > 65535:
            raise ValueError(f"ran out of ports on {host}")
        next_port[host] = port + 1
        return host, port

    chief = take(chief_host or hosts[0])
    workers = [take(h) for h in hosts for _ in range(workers_per_host)]
    ps = [take(hosts[i % len(hosts)]) for i in range(num_ps)]
    layout = {"chief": [chief], "worker": workers, "ps": ps}
    cluster = {role: [f"{h}:{p}" for h, p in layout[role]] for role in PS_ROLES}
    return [PsTask(host, port, role, i, tf_config(cluster, role, i))
            for role in PS_ROLES for i, (host, port) in enumerate(layout[role])]


def remote_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell command line for SSH: ``env VAR=value ... argv...``, every word quoted."""
    words = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    return " ".join(shlex.quote(str(w)) for w in [*words, *argv])


def workload_files(script: Path) -> list[Path]:
    """The script and the modules it imports from its own folder (SUPPORT_FILES): what a node needs of it."""
    return [script, *(f for f in SUPPORT_FILES if f.name != script.name)]
