"""roles/gpucheck_kubernetes (playbooks/kubernetes.yml) against the real control plane, as a site runs it: the
manifests of deploy/kubernetes applied through a kustomization that sets the image, the interval and the schedule,
a second run changing nothing, check mode asking the server and changing nothing, and no image given stopping the
run in one message before anything is applied."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import ROOT

IMAGE = "registry.example.org/gpu/gpucheck:0.9.1"


def playbook(kube, tmp_path: Path, *args: str, image: str = IMAGE) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"kubernetes_admin": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    variables = {"gpucheck_kubernetes_image": image, "gpucheck_kubernetes_interval_s": 120,
                 "gpucheck_kubernetes_schedule": "--weekly 0",
                 "gpucheck_kubernetes_kubectl": str(kube.bin_dir / "kubectl"),
                 "gpucheck_kubernetes_kubeconfig": str(kube.kubeconfig),
                 "gpucheck_kubernetes_dir": str(tmp_path / "manifests")}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                           "-e", yaml.safe_dump(variables, default_flow_style=True).strip(), *args,
                           "playbooks/kubernetes.yml"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def changed(done: subprocess.CompletedProcess[str]) -> int:
    recap = done.stdout.split("PLAY RECAP", 1)[-1]
    return int(recap.split("changed=", 1)[1].split()[0])


@pytest.fixture(scope="module")
def applied(kube, tmp_path_factory):
    where = tmp_path_factory.mktemp("role")
    first = playbook(kube, where)
    assert first.returncode == 0, first.stdout[-4000:]
    return kube, where, first


def test_the_daemonset_runs_the_sites_image_at_its_interval(applied):
    kube, _, first = applied
    # what kubectl said, shown (configured where test_deploy_manifests applied the plain manifests first)
    assert re.search(r"daemonset\.apps/gpucheck-node (created|configured)", first.stdout), first.stdout[-3000:]
    found = kube.request("GET", "/apis/apps/v1/namespaces/gpucheck/daemonsets/gpucheck-node")
    container, watch = found["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE and watch["name"] == "watch" and watch["image"] == IMAGE
    assert {"name": "INTERVAL_S", "value": "120"} in container["env"], container["env"]
    assert {"name": "SCHEDULE", "value": "--weekly 0"} in container["env"], container["env"]
    assert {e["name"] for e in container["env"]} >= {"NODE_NAME", "NVIDIA_VISIBLE_DEVICES"}  # the rest as written
    role = kube.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpucheck-node")
    assert {tuple(r["resources"]) for r in role["rules"]} == {("nodes",), ("nodes/status",), ("pods",)}


def test_a_second_run_and_check_mode_change_nothing(applied):
    kube, where, _ = applied
    generation = kube.request("GET", "/apis/apps/v1/namespaces/gpucheck/daemonsets/gpucheck-node")["metadata"]
    again = playbook(kube, where)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-4000:]
    check = playbook(kube, where, "--check")
    assert check.returncode == 0 and changed(check) == 0, check.stdout[-4000:]
    assert "(server dry run)" in check.stdout
    after = kube.request("GET", "/apis/apps/v1/namespaces/gpucheck/daemonsets/gpucheck-node")["metadata"]
    assert after["generation"] == generation["generation"]  # no rollout


def test_no_image_stops_the_run_before_anything_is_applied(applied, tmp_path):
    kube = applied[0]
    done = playbook(kube, tmp_path, image="")
    assert done.returncode == 2 and "gpucheck_kubernetes_image is empty" in done.stdout, done.stdout[-3000:]
    assert not (tmp_path / "manifests").exists()
