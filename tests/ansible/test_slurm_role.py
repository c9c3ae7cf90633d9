"""roles/slurm in check mode against this machine (local connection, nothing changed): the slurm.conf and
gres.conf it would write from the inventory (controller, nodes with CPUs, memory and GPUs as GRES, PMIx, gpucheck
as HealthCheckProgram), and that switched off it only says so. The real runs (daemons started, idempotency,
drains) are the lab's: tests/cluster_lab."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_burnin_roles import flat, play, role_play, tasks_run


def hosts() -> dict[str, dict]:
    common = {"slurm_enabled": True, "slurm_service_manager": "direct", "preflight_gpu_count": 8}
    return {"ctl": {**common, "group": "admin", "ansible_host": "10.0.0.10"},
            "n1": {**common, "ansible_host": "10.0.0.11"}, "n2": {**common, "ansible_host": "10.0.0.12"}}


def test_check_mode_writes_the_cluster_from_the_inventory(ansible_repo) -> None:
    conf = Path("/etc/slurm/slurm.conf")
    existed = conf.exists()
    code, output = play(ansible_repo, "slurm", role_play("slurm"), hosts(), "--diff")
    assert code == 0, output[-4000:]
    assert "SlurmctldHost=ctl(10.0.0.10)" in output and "MpiDefault=pmix" in output
    assert "HealthCheckProgram=/usr/local/sbin/gpucheck-slurm-health" in output and "GresTypes=gpu" in output
    for node, address in (("n1", "10.0.0.11"), ("n2", "10.0.0.12")):
        assert f"NodeName={node} " in output and f"NodeAddr={address} " in output
    assert "Gres=gpu:8 State=UNKNOWN" in output
    assert "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in output
    assert "Name=gpu File=/dev/nvidia[0-7]" in output  # gres.conf on the nodes
    assert "exec /usr/local/bin/gpucheck node --slurm" in output  # the health-check wrapper
    assert conf.exists() == existed  # check mode: nothing written


@pytest.fixture(scope="module")
def scheduled_elsewhere(shared_ansible_repo) -> str:
    """One run for three settings that do not meet: scheduled checks on, the GPU device files elsewhere, and a
    second admin host (a run of the role costs ~20 CPU-seconds)."""
    variables = hosts()
    for host in variables.values():
        host.update(slurm_scheduled_checks=True, slurm_gpu_device_prefix="/etc/fakenvml/dev/nvidia")
    variables["n2"]["group"] = "admin"  # a second admin host is no node
    code, output = play(shared_ansible_repo, "slurm-scheduled", role_play("slurm"), variables, "--diff")
    assert code == 0, output[-4000:]
    return output


def test_scheduled_checks_add_their_partition_under_every_user_partition_and_queue_nothing_in_check_mode(
        scheduled_elsewhere) -> None:
    """slurm_scheduled_checks: the checks' partition at the lowest tier, requeued when preempted; user partitions
    above it and never preempted. The lab runs the real preemption (tests/cluster_lab/test_schedule_lab.py)."""
    output = scheduled_elsewhere
    assert "PreemptType=preempt/partition_prio" in output and "PreemptMode=REQUEUE" in output
    assert "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE PriorityTier=10 PreemptMode=OFF State=UP" in output
    assert ("PartitionName=gpucheck Nodes=ALL Default=NO MaxTime=4:00:00 PriorityTier=1 PreemptMode=REQUEUE "
            "State=UP") in output
    assert "skipping: [ctl]" in output.split("Queue the scheduled active checks", 1)[1].split("TASK", 1)[0]


def test_the_gpu_device_files_can_be_elsewhere_and_a_second_admin_host_is_no_node(scheduled_elsewhere) -> None:
    output = scheduled_elsewhere
    assert "Name=gpu File=/etc/fakenvml/dev/nvidia[0-7]" in output
    assert "NodeName=n1 " in output and "NodeName=n2 " not in output


def test_no_gpus_is_no_gres(ansible_repo) -> None:
    variables = {name: spec for name, spec in hosts().items() if name != "n2"}  # a controller and one node suffice
    for host in variables.values():
        host["preflight_gpu_count"] = 0
    code, output = play(ansible_repo, "slurm-nogpu", role_play("slurm"), variables, "--diff")
    assert code == 0, output[-4000:]
    assert "GresTypes" not in output and "Gres=gpu" not in output and "Name=gpu File" not in output


def test_switched_off_it_only_says_so(ansible_repo) -> None:
    code, output = play(ansible_repo, "slurm-off", role_play("slurm", facts=False), {"node": {}})
    assert code == 0, output[-4000:]
    assert "slurm_enabled is false: this site brings its own Slurm" in flat(output)
    assert tasks_run(output, "slurm") == ["Say that Slurm is not managed here"]


def test_an_inventory_without_a_controller_is_one_clear_failure(ansible_repo) -> None:
    variables = {name: spec for name, spec in hosts().items() if name != "ctl"}
    code, output = play(ansible_repo, "slurm-noctl", role_play("slurm"), variables)
    assert code != 0
    assert "Slurm needs a controller (the first host of group 'admin')" in flat(output), output[-3000:]
