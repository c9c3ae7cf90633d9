"""The cluster stages' jobs as Slurm jobs (`--launcher slurm`): what jobs.py starts with mpirun or torchrun over
SSH, started here with srun from this machine, the way researchers will start theirs:
- an MPI program (the MPI hello, nccl-tests, Horovod): `srun --mpi=pmix`, one task per rank, ranks laid on the
  nodes in the Layout's order (srun.argv: arbitrary distribution), so a rank is traced to its node as before;
- a PyTorch DDP script: one srun task per rank, each given RANK, LOCAL_RANK and WORLD_SIZE from Slurm's own
  SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS (env:// rendezvous on the first node), no torchrun;
- tasks that each need their own environment (TensorFlow's parameter-server tasks, a TF_CONFIG each): one srun,
  every task picking its variables by SLURM_PROCID;
- the workload files: sent to every node through one srun's stdin (srun copies it to every task).
Inside an allocation a stage holds (ctx.slurm_job: the burn's), each is a step of it instead (allocation.py).
Every job asks for whole nodes (--exclusive: all their GPUs) and may put more tasks than CPUs on a node
(--overcommit: CPU lab nodes run a ps, a chief and a worker on one)."""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ... import slurm
from ...workloads.launch import workload_files
from ..context import ClusterContext
from ..layout import Layout
from ..ssh.result import Remote
from . import srun

COPIED = "gpucheck-copied"
# Each task takes the variables named in GPUCHECK_TASK_VARS from GPUCHECK_T<its SLURM_PROCID>_<name>, where set.
PER_TASK = ('for v in $GPUCHECK_TASK_VARS; do eval "if [ -n \\"\\${GPUCHECK_T${SLURM_PROCID}_$v+x}\\" ]; then '
            'export $v=\\"\\$GPUCHECK_T${SLURM_PROCID}_$v\\"; fi"; done; exec "$@"')
# What torchrun would set and env:// reads (a rank's place on its node picks its GPU: rank_io.torch_device).
TORCH_RANK = 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"; exec "$@"'


def slurm_name(ctx: ClusterContext, node: str) -> str:
    """The inventory node's NodeName in Slurm (srun.node_name)."""
    host = next((h for h in ctx.inventory.hosts if h.name == node), None)
    return srun.node_name(host) if host is not None else node


def tasks(ctx: ClusterContext, lay: Layout) -> list[str]:
    """The Slurm node of each rank, in rank order."""
    return [slurm_name(ctx, node) for node, count in lay.slots for _ in range(count)]


def gpus_per_node(ctx: ClusterContext, names: Sequence[str]) -> int:
    """The GPUs every one of these nodes has in Slurm (GRES), which a job on them asks for: all of each node's.
    From the states the run read at its start (ctx.scheduler_nodes), read here once when it has none."""
    if ctx.scheduler_nodes is None:
        try:
            ctx.scheduler_nodes = slurm.all_nodes()
        except slurm.SlurmError:
            return 0  # the job itself then says what Slurm said
    states = ctx.scheduler_nodes
    return min((states[n].gpus if n in states else 0 for n in set(names)), default=0)


def job(ctx: ClusterContext, what: str, lay: Layout, program: Sequence[str], env: Mapping[str, str], timeout: float,
        mpi: str | None = None) -> Remote:
    ranks = tasks(ctx, lay)
    done = srun.run(srun.Job(what, ranks, program, timeout, mpi=mpi, gpus_per_node=gpus_per_node(ctx, ranks),
                             env=env, jobid=ctx.slurm_job)).remote
    done.host = lay.slots[0][0] if lay.slots else "srun"
    return done


def mpi_job(ctx: ClusterContext, lay: Layout, program: Sequence[str], env: Mapping[str, str],
            timeout: float) -> Remote:
    """An MPI program on the layout's ranks: srun --mpi=pmix (Slurm's PMIx wires the ranks up, no mpirun)."""
    return job(ctx, "mpi", lay, program, env, timeout, mpi="pmix")


def torch_job(ctx: ClusterContext, lay: Layout, python: str, path: str, args: Sequence[str], env: Mapping[str, str],
              master_addr: str, port: int, timeout: float) -> Remote:
    """PyTorch DDP: every rank a task of one srun, its rank from Slurm's, the rendezvous on the first node."""
    program = ["/bin/sh", "-c", TORCH_RANK, "torch-rank", python, path, *args]
    return job(ctx, "ddp", lay, program, {**env, "MASTER_ADDR": master_addr, "MASTER_PORT": str(port)}, timeout)


def per_task_job(ctx: ClusterContext, lay: Layout, program: Sequence[str], envs: Sequence[Mapping[str, str]],
                 timeout: float) -> Remote:
    """One srun whose task i runs `program` with envs[i] (len(envs) == the layout's ranks)."""
    names = sorted({k for env in envs for k in env})
    shared = {"GPUCHECK_TASK_VARS": " ".join(names)}
    for i, env in enumerate(envs):
        shared.update({f"GPUCHECK_T{i}_{k}": v for k, v in env.items()})
    return job(ctx, "tasks", lay, ["/bin/sh", "-c", PER_TASK, "per-task", *program], shared, timeout)


def distribute(ctx: ClusterContext, nodes: Sequence[str], script: Path, remote_dir: str,
               timeout: float = 60.0) -> tuple[str, dict[str, Remote]]:
    """`script` and its support files into `remote_dir` on every node, through one srun's stdin. (remote path of
    the script, node -> the failed copy)."""
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in workload_files(script):
                tar.add(path, arcname=path.name)
    except OSError as exc:
        failed = Remote("srun", f"copy {script}", error=f"cannot read {exc.filename}: {exc.strerror}", kind="copy")
        return f"{remote_dir}/{script.name}", {n: failed for n in nodes}
    lay = Layout([(n, 1) for n in nodes])
    quoted = shlex.quote(remote_dir)
    unpack = f"mkdir -p {quoted} && base64 -d | tar -x -o -C {quoted} && echo {COPIED}"
    step = srun.run(srun.Job("copy", tasks(ctx, lay), ["/bin/sh", "-c", unpack], timeout, jobid=ctx.slurm_job),
                    input_text=base64.b64encode(buffer.getvalue()).decode() + "\n")
    done = step.remote
    copied = {task.node for task in step.tasks.values() if task.exit == 0 and COPIED in task.stdout}
    failed = {}
    for node in nodes:
        if slurm_name(ctx, node) not in copied:
            failed[node] = Remote(node, f"copy {script.name} -> {node}:{remote_dir} (srun)", done.stdout, done.stderr,
                                  done.exit, done.error or f"{node}: the copy through srun did not arrive: "
                                  f"{done.describe()}", "copy", done.wall_s)
    return f"{remote_dir}/{script.name}", failed
