"""Bad input fails at argument validation, naming the option, before any task of the role runs."""

from __future__ import annotations

import re

import yaml

ROLES = [
    "preflight",
    "nvidia_repo",
    "nvidia_driver",
    "cuda",
    "fabric_manager",
    "dcgm",
    "infiniband",
    "openmpi",
    "cluster_ssh",
    "nccl_tests",
    "frameworks",
    "gpucheck_agent",
    "gpucheck_validate",
    "gpu_upgrade",
    "gpucheck_kubernetes",
]


# One ansible-playbook run for a table of cases: each host of the inventory includes one role with its variables.
PLAY = [{"name": "Each host runs its role", "hosts": "all", "gather_facts": False,
         "tasks": [{"ansible.builtin.include_role": {"name": "{{ role_under_test }}"}}]}]
SECTION = re.compile(r"^TASK \[([^\]]*)\] \**\n(.*?)(?=^TASK \[|^PLAY RECAP)", re.S | re.M)


def run_roles(ansible_repo, cases: dict[str, tuple[str, dict]], with_stacks: bool = True) -> dict[str, list]:
    """`ansible-playbook --check` of PLAY on one local host per case ({host: (role, its variables)}): every host
    fails; {role: [(task, what the run printed for it)]}."""
    playbook = ansible_repo.tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY))
    hosts = {host: {"ansible_connection": "local", "role_under_test": role, **role_vars}
             for host, (role, role_vars) in cases.items()}
    inventory = ansible_repo.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    stacks = ["-e", "@inventory/prod/group_vars/all/versions.yml"] if with_stacks else []
    result = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), *stacks, str(playbook))
    output = result.stdout + result.stderr
    recap = ansible_repo.recap(output)
    assert set(recap) == set(cases) and all(counts["failed"] == 1 for counts in recap.values()), output[-4000:]
    tasks: dict[str, list] = {}
    for name, body in SECTION.findall(output):
        role, _, task = name.partition(" : ")
        tasks.setdefault(role, []).append((task, body))
    return tasks


def stopped_at_validation(tasks: dict[str, list], role: str, host: str) -> str:
    """Why `host` failed validating `role`'s arguments, after checking that no task of the role ran after it
    (validation is the role's first task)."""
    ran = tasks.get(role, [])
    assert [task for task, _ in ran if not task.startswith("Validating arguments against arg spec 'main'")] == [], ran
    (body,) = [body for _, body in ran]
    assert f"fatal: [{host}]: FAILED!" in body, body
    return body.split(f"fatal: [{host}]: FAILED!", 1)[1]


WRONG_TYPES = {
    "preflight": ({"preflight_gpu_count": "eight"}, "preflight_gpu_count"),
    "nvidia_driver": ({"nvidia_driver_source": "nvdia", "nvidia_driver_branch": "535",
                       "nvidia_driver_version": "535.*"}, "nvidia_driver_source"),
    "openmpi": ({"openmpi_cluster_network": "10.0.0.0/24", "openmpi_mca_params": ["btl", "tcp"]},
                "openmpi_mca_params"),
    "frameworks": ({"frameworks_catalog": {}, "frameworks_selected": "tf-horovod",
                    "frameworks_horovod_build_timeout": "soon"}, "frameworks_horovod_build_timeout"),
    "dcgm": ({"dcgm_cuda_major": "14"}, "dcgm_cuda_major"),
    "nccl_tests": ({"nccl_tests_build_jobs": "many"}, "nccl_tests_build_jobs"),
    "gpucheck_agent": ({"gpucheck_agent_gpu_extra": "cupy-cuda11x"}, "gpucheck_agent_gpu_extra"),
    "gpu_upgrade": ({"gpu_upgrade_job_wait": "four hours"}, "gpu_upgrade_job_wait"),
    "gpucheck_kubernetes": ({"gpucheck_kubernetes_interval_s": "5 min"}, "gpucheck_kubernetes_interval_s"),
}


def test_a_wrong_type_fails_validation_naming_the_option_in_every_role(ansible_repo) -> None:
    tasks = run_roles(ansible_repo, {f"wrong-{role}": (role, role_vars)
                                     for role, (role_vars, _) in WRONG_TYPES.items()})
    for role, (_, option) in WRONG_TYPES.items():
        why = stopped_at_validation(tasks, role, f"wrong-{role}")
        assert "Validation of arguments failed" in why and option in why.split("Validation of arguments failed")[1], why


def test_missing_pins_fail_validation(ansible_repo) -> None:
    """The driver has no pin of its own: without a stack it stops at validation. DCGM and nccl-tests have no pins of
    their own either: without versions.yml's gpu_burnin_versions they stop at validation, naming it."""
    missing = {"nvidia_driver": "gpu_stack_versions", "dcgm": "gpu_burnin_versions",
               "nccl_tests": "gpu_burnin_versions"}
    tasks = run_roles(ansible_repo, {f"bare-{role}": (role, {}) for role in missing}, with_stacks=False)
    for role, pins in missing.items():
        assert pins in stopped_at_validation(tasks, role, f"bare-{role}"), role


def test_every_role_documents_and_types_every_default(ansible_repo) -> None:
    for role in ROLES:
        base = ansible_repo.repo / "roles" / role
        specs = yaml.safe_load((base / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
        options = specs["options"]
        defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {}
        assert set(defaults) <= set(options), f"{role}: defaults without a spec: {set(defaults) - set(options)}"
        for name, spec in options.items():
            assert name.startswith(f"{role}_"), f"{role}: option {name} lacks the role prefix"
            assert "type" in spec and spec.get("description"), f"{role}: {name} needs a type and a description"
