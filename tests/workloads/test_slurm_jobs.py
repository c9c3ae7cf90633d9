"""The cluster stages' jobs as Slurm jobs (cluster/slurm/jobs.py, `--launcher slurm`) on a real one-node Slurm on
this machine (tests/slurmkit.py) with the real frameworks on CPU: Horovod + TensorFlow under `srun --mpi=pmix`
(Slurm's PMIx wires up Debian's Open MPI, no mpirun), PyTorch DDP with each rank's RANK from SLURM_PROCID (no
torchrun), and the workload files sent through srun's stdin. Two ranks share the node (gpu-a). The same jobs
across the lab's hosts: tests/cluster_lab/test_slurm_lab.py."""

from __future__ import annotations

import pytest

import slurmkit
from gpucheck.cluster import jobs, launchers
from gpucheck.cluster.context import ClusterContext, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.slurm import jobs as slurm_jobs
from gpucheck.workloads import launch
from gpucheck.workloads.results import judge_smoke, parse_results
from workload_helpers import WAIT_S, WATCHDOG_S, free_ports

STEPS = ["--epochs", "2", "--steps", "5", "--timeout-s", str(WATCHDOG_S)]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture
def ctx(slurm, monkeypatch) -> ClusterContext:
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)  # salloc and srun run with the command line's environment
    node = Host(slurmkit.NODE, "127.0.0.1", 22, "root", None, (), True)  # its address: DDP's rendezvous
    return ClusterContext(Options(launcher="slurm", stage_timeout=WAIT_S), Inventory([], "all", None, [node]))


def test_horovod_ranks_started_by_srun_with_pmix_train_in_step(ctx, tf_horovod) -> None:
    lay = jobs.Layout([(slurmkit.NODE, 2)])
    program = [str(tf_horovod.python), str(launch.script_path("horovod")), *STEPS]
    done = launchers.of(ctx).mpi_job(ctx, None, lay, program, jobs.rank_env(False), WAIT_S)  # no SSH used
    assert "--mpi=pmix" in done.command and "mpirun" not in done.command
    verdict = judge_smoke(parse_results(done.stdout), 2, "smoke_horovod_keras")
    assert done.ok and verdict["passed"], done.describe() + done.evidence()[-3000:]
    assert verdict["reported_ranks"] == 2


def test_ddp_ranks_take_their_rank_from_slurm_and_train_in_step(ctx, torch_stack) -> None:
    lay = jobs.Layout([(slurmkit.NODE, 2)])
    done = launchers.of(ctx).torch_job(ctx, None, lay, str(torch_stack.python), str(launch.script_path("torch")),
                                       STEPS, False, free_ports(1), WAIT_S)
    assert "torchrun" not in done.command and "srun" in done.command
    verdict = judge_smoke(parse_results(done.stdout), 2, "smoke_torch_ddp")
    assert done.ok and verdict["passed"], done.describe() + done.evidence()[-3000:]
    assert sorted(row["rank"] for row in parse_results(done.stdout)) == [0, 1]


def test_the_workload_files_reach_the_node_through_srun(ctx, tmp_path) -> None:
    script = launch.script_path("horovod")
    path, failed = slurm_jobs.distribute(ctx, [slurmkit.NODE], script, str(tmp_path / "dest"))
    assert failed == {} and path == f"{tmp_path}/dest/{script.name}"
    for local in (script, *launch.SUPPORT_FILES):
        assert (tmp_path / "dest" / local.name).read_bytes() == local.read_bytes()
    _, failed = slurm_jobs.distribute(ctx, [slurmkit.NODE], script, "/proc/no-such-dir")
    assert set(failed) == {slurmkit.NODE} and "did not arrive" in failed[slurmkit.NODE].error
