"""The example site and the lab name the same stacks, with every pin in versions.yml."""

from __future__ import annotations

import ipaddress
import re

import pytest
import yaml

STACK_KEYS = {
    "description",
    "driver_branch",
    "driver_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "openmpi",
    "python_min",
    "python_max",
    "frameworks",
    "pip_packages",
    "pip_index_url",
}


def load(ansible_repo, *parts: str):
    return yaml.safe_load(ansible_repo.repo.joinpath(*parts).read_text())


def test_prod_site_has_an_admin_node_and_26_gpu_nodes(ansible_repo) -> None:
    children = load(ansible_repo, "inventory", "prod", "hosts.yml")["all"]["children"]
    assert list(children["admin"]["hosts"]) == ["admin01"]
    nodes = children["gpu_nodes"]["hosts"]
    assert list(nodes) == [f"node{i:02d}" for i in range(1, 27)]
    for name, host in {**children["admin"]["hosts"], **nodes}.items():
        for key in ("ansible_host", "ib_address", "ipmi_address"):
            ipaddress.ip_address(host[key])  # raises on a missing or malformed address
        assert len({host["ansible_host"], host["ib_address"], host["ipmi_address"]}) == 3, name


@pytest.mark.parametrize("site", ["prod", "lab"])
def test_stacks_are_complete_and_selected(ansible_repo, site) -> None:
    versions = load(ansible_repo, "inventory", site, "group_vars", "all", "versions.yml")
    catalog = versions["gpu_stack_catalog"]
    # both offer the tf-horovod stack on the R550 driver: prod for H200 nodes (hgx-h200 needs R550), the lab for
    # a driver upgrade (the stand-in NVIDIA repository carries both branches)
    assert set(catalog) == {"tf-horovod", "tf-horovod-r550", "torch"}
    assert versions["gpu_stack"] == "tf-horovod"
    assert set(versions["gpu_stacks"]) <= set(catalog)
    for name, stack in catalog.items():
        assert set(stack) >= STACK_KEYS, f"{site}/{name} lacks {STACK_KEYS - set(stack)}"
        assert all("==" in pin for pin in stack["pip_packages"]), f"{site}/{name}: unpinned package"
        if "horovod" in stack["frameworks"]:
            assert stack["horovod"]["version"] == "0.28.1"
            assert set(stack["horovod"]["check_build"]) == {"frameworks", "controllers", "tensor_operations"}
    tf = catalog["tf-horovod"]
    # TF 2.16+ (Keras 3) breaks Horovod's Keras and tape APIs: the stack stays on 2.15.
    assert any(pin.split("==")[1] == "2.15.1" for pin in tf["pip_packages"] if pin.startswith("tensorflow"))
    assert tf["python_max"] == "3.11"


def test_only_versions_yml_holds_pins(ansible_repo) -> None:
    """Roles carry no version of their own: every pin option reads the selected stack."""
    pins = {
        "nvidia_driver": ["nvidia_driver_branch", "nvidia_driver_version"],
        "cuda": ["cuda_version", "cuda_cudnn_version", "cuda_nccl_version"],
        "fabric_manager": ["fabric_manager_branch", "fabric_manager_version"],
    }
    for role, options in pins.items():
        defaults = load(ansible_repo, "roles", role, "defaults", "main.yml")
        for option in options:
            assert defaults[option].startswith("{{ gpu_stack_versions."), f"{role}: {option} = {defaults[option]}"
    # The burn-in's tools: the same for every stack, pinned beside the stacks.
    burnin = {"dcgm": ["dcgm_version"], "nccl_tests": ["nccl_tests_version", "nccl_tests_sha256"]}
    for role, options in burnin.items():
        defaults = load(ansible_repo, "roles", role, "defaults", "main.yml")
        for option in options:
            assert defaults[option].startswith("{{ gpu_burnin_versions."), f"{role}: {option} = {defaults[option]}"


@pytest.mark.parametrize("site", ["prod", "lab"])
def test_burnin_tools_are_pinned_with_a_checksum(ansible_repo, site) -> None:
    """DCGM's version and nccl-tests' release and tarball sha256 (64 hex digits, never empty: the role refuses
    an unchecked download) are in versions.yml; the lab pins them too, installs DCGM from its stand-in NVIDIA
    repository and builds no nccl-tests (its GitHub tarball is out of reach, the stand-in nvcc compiles nothing)."""
    versions = load(ansible_repo, "inventory", site, "group_vars", "all", "versions.yml")["gpu_burnin_versions"]
    assert re.fullmatch(r"4\.\d+\.\d+", versions["dcgm_version"]), versions
    assert re.fullmatch(r"2\.\d+\.\d+", versions["nccl_tests_version"]), versions
    assert re.fullmatch(r"[0-9a-f]{64}", versions["nccl_tests_sha256"]), versions
    if site == "lab":
        lab = load(ansible_repo, "inventory", "lab", "group_vars", "all", "lab.yml")
        assert lab["dcgm_enabled"] is True and lab["nccl_tests_enabled"] is False


def test_lab_builds_horovod_without_nccl_and_prod_with_it(ansible_repo) -> None:
    prod = load(ansible_repo, "inventory", "prod", "group_vars", "all", "versions.yml")["gpu_stack_catalog"]
    lab = load(ansible_repo, "inventory", "lab", "group_vars", "all", "versions.yml")["gpu_stack_catalog"]
    assert prod["tf-horovod"]["horovod"]["build_env"]["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert "NCCL" in prod["tf-horovod"]["horovod"]["check_build"]["tensor_operations"]
    assert "HOROVOD_GPU_OPERATIONS" not in lab["tf-horovod"]["horovod"]["build_env"]
    assert lab["tf-horovod"]["pip_packages"][0] == "tensorflow-cpu==2.15.1"
