"""playbooks/upgrade.yml before it touches a node (the rollout itself runs on the lab:
tests/cluster_lab/test_z_rolling_upgrade.py): it parses with the production inventory, refuses check mode and a
Slurm cluster without a controller, each with one message, before the preflight role or any node's turn."""

from __future__ import annotations

import sys

import yaml


def local_inventory(ansible_repo, **extra: object) -> str:
    path = ansible_repo.tmp_path / "hosts.yml"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    path.write_text(yaml.safe_dump({"all": {"vars": extra, "children": {"gpu_nodes": {"hosts": {
        "localhost": localhost}}}}}))
    return str(path)


def upgrade(ansible_repo, *args: str) -> str:
    done = ansible_repo.run("ansible-playbook", "playbooks/upgrade.yml", "-e",
                            "@inventory/prod/group_vars/all/versions.yml", "-e", "gpu_stack=tf-horovod-r550", *args)
    assert done.returncode != 0, done.stdout
    return " ".join((done.stdout + done.stderr).split())


def test_syntax_check_with_prod_inventory(ansible_repo) -> None:
    done = ansible_repo.run("ansible-playbook", "--syntax-check", "playbooks/upgrade.yml", "-i", "inventory/prod")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_mode_is_refused_with_how_to_preview(ansible_repo) -> None:
    output = upgrade(ansible_repo, "--check", "-i", local_inventory(ansible_repo))
    assert "check mode cannot show that" in output
    assert "site.yml --tags gpu --check -e gpu_stack=tf-horovod-r550" in output
    assert "TASK [preflight" not in output  # refused before anything else ran


def test_slurm_without_a_controller_is_refused(ansible_repo) -> None:
    output = upgrade(ansible_repo, "-i", local_inventory(ansible_repo, slurm_enabled=True))
    assert "there is no controller to drain nodes on" in output and "gpu_upgrade_slurm=false" in output
    assert "TASK [preflight" not in output


def test_a_slurm_name_that_is_a_hostlist_stops_the_plan_before_any_node(ansible_repo) -> None:
    """slurm_node_name gpu-[01-26] would make `scontrol update nodename=...` drain 26 nodes: the plan asks `gpucheck
    slurm show` for every node first, which refuses it in one line before Slurm is asked anything."""
    agent = ansible_repo.tmp_path / "gpucheck"
    agent.write_text(f"#!/bin/sh\nPYTHONPATH='{ansible_repo.repo / 'agent'}' exec '{sys.executable}' -m gpucheck "
                     "\"$@\"\n")
    agent.chmod(0o755)
    inventory = ansible_repo.tmp_path / "hosts.yml"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "slurm_node_name": "gpu-[01-26]"}
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"slurm_enabled": True, "gpu_upgrade_command": str(agent)},
        "children": {"admin": {"hosts": {"localhost": {}}}, "gpu_nodes": {"hosts": {"localhost": localhost}}}}}))
    output = upgrade(ansible_repo, "-i", str(inventory))
    assert "TASK [gpu_upgrade : Check each node's Slurm name]" in output, output[-3000:]
    assert "gpu-[01-26]'' is not one Slurm node name" in output  # YAML's quoting of gpucheck's line
    assert "TASK [preflight" not in output
