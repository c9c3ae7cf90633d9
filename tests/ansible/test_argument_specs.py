"""Bad input fails at argument validation, naming the option, before any task of the role runs."""

from __future__ import annotations

import pytest
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
]


def run_role(ansible_repo, role: str, role_vars: dict, with_stacks: bool = True) -> str:
    playbook = ansible_repo.tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Run one role",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "roles": [{"role": role, "vars": role_vars}],
                }
            ]
        )
    )
    inventory = ansible_repo.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    stacks = ["-e", "@inventory/prod/group_vars/all/versions.yml"] if with_stacks else []
    result = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), *stacks, str(playbook))
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


@pytest.mark.parametrize(
    ("role", "role_vars", "option"),
    [
        ("preflight", {"preflight_gpu_count": "eight"}, "preflight_gpu_count"),
        (
            "nvidia_driver",
            {"nvidia_driver_source": "nvdia", "nvidia_driver_branch": "535", "nvidia_driver_version": "535.*"},
            "nvidia_driver_source",
        ),
        (
            "openmpi",
            {"openmpi_cluster_network": "10.0.0.0/24", "openmpi_mca_params": ["btl", "tcp"]},
            "openmpi_mca_params",
        ),
        (
            "frameworks",
            {"frameworks_catalog": {}, "frameworks_selected": "tf-horovod", "frameworks_horovod_build_timeout": "soon"},
            "frameworks_horovod_build_timeout",
        ),
        ("dcgm", {"dcgm_cuda_major": "14"}, "dcgm_cuda_major"),
        ("nccl_tests", {"nccl_tests_build_jobs": "many"}, "nccl_tests_build_jobs"),
        ("gpucheck_agent", {"gpucheck_agent_gpu_extra": "cupy-cuda11x"}, "gpucheck_agent_gpu_extra"),
        ("gpu_upgrade", {"gpu_upgrade_job_wait": "four hours"}, "gpu_upgrade_job_wait"),
    ],
)
def test_wrong_type_fails_validation_naming_the_option(ansible_repo, role, role_vars, option) -> None:
    output = run_role(ansible_repo, role, role_vars)
    assert "Validating arguments against arg spec 'main'" in output
    assert "Validation of arguments failed" in output
    assert option in output.split("Validation of arguments failed", 1)[1]
    # Validation is the role's first task: nothing after it ran.
    assert f"TASK [{role} : " not in output.split("Validating arguments", 1)[1].split("PLAY RECAP")[0].replace(
        f"TASK [{role} : Validating", ""
    )


def test_missing_stack_pin_fails_validation(ansible_repo) -> None:
    """The driver has no pin of its own: without a stack it stops at validation."""
    output = run_role(ansible_repo, "nvidia_driver", {}, with_stacks=False)
    assert "gpu_stack_versions" in output


def test_missing_burnin_pins_fail_validation(ansible_repo) -> None:
    """DCGM and nccl-tests have no pins of their own either: without versions.yml's gpu_burnin_versions they stop
    at validation, naming it."""
    for role in ("dcgm", "nccl_tests"):
        output = run_role(ansible_repo, role, {}, with_stacks=False)
        assert "Validation of arguments failed" in output or "gpu_burnin_versions" in output, output[-2000:]
        assert "gpu_burnin_versions" in output, output[-2000:]


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
