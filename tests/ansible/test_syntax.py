"""site.yml parses with the production inventory and with a lab-shaped inventory."""

from __future__ import annotations

import json

STAGES = ["preflight", "gpu", "network", "mpi", "frameworks", "agent", "validate"]
LAB_HOSTS = {
    f"lab{i}": {
        "ansible_host": f"10.77.0.{10 + i}",
        "ansible_user": "root",
        "ib_address": None,
        "ipmi_address": None,
        "lab_scenario": "healthy",
    }
    for i in (1, 2)
}


def test_syntax_check_with_prod_inventory(ansible_repo) -> None:
    result = ansible_repo.run("ansible-playbook", "--syntax-check", "site.yml", "-i", "inventory/prod")
    assert result.returncode == 0, result.stdout + result.stderr


def test_syntax_check_with_lab_shaped_inventory(ansible_repo) -> None:
    inventory = ansible_repo.lab_inventory(LAB_HOSTS)
    result = ansible_repo.run("ansible-playbook", "--syntax-check", "site.yml", "-i", str(inventory))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_stage_is_imported_in_order_and_tagged(ansible_repo) -> None:
    site = (ansible_repo.repo / "site.yml").read_text()
    positions = [site.index(f"playbooks/{stage}.yml") for stage in STAGES]
    assert positions == sorted(positions)
    result = ansible_repo.run("ansible-playbook", "--list-tags", "site.yml", "-i", "inventory/prod")
    assert result.returncode == 0, result.stdout + result.stderr
    for stage in STAGES:
        assert f"TAGS: [{stage}]" in result.stdout, f"the play of stage {stage} is not tagged {stage}"


def test_lab_group_vars_derive_proxy_network_and_stack(ansible_repo) -> None:
    """The lab's group_vars turn lab_proxy_url / lab_cluster_network into the plays' settings."""
    inventory = ansible_repo.lab_inventory(LAB_HOSTS)
    expression = (
        "{{ {'env': proxy_environment, 'net': cluster_network, 'stacks': gpu_stacks,"
        " 'driver': gpu_stack_versions.driver_version, 'become': ansible_become} | to_json }}"
    )
    # debug runs on the controller: nothing connects to the (made-up) lab addresses.
    result = ansible_repo.run(
        "ansible", "lab1", "-i", str(inventory), "-m", "ansible.builtin.debug", "-a", f"msg={expression}", "-o"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    reply = json.loads(result.stdout.split("=>", 1)[1])["msg"]
    values = json.loads(reply) if isinstance(reply, str) else reply
    assert values["env"] == {
        "http_proxy": "http://10.77.0.1:3128",
        "https_proxy": "http://10.77.0.1:3128",
        "no_proxy": "localhost,127.0.0.1,10.77.0.1",  # the bridge (the stand-in NVIDIA repository): direct
    }
    assert values["net"] == "10.77.0.0/24"
    assert values["stacks"] == ["tf-horovod"]
    assert values["driver"] == "535.261.03"
    assert values["become"] is False
