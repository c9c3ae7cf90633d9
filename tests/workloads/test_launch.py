"""launch.py: the command lines and TF_CONFIGs that start the workloads (pure; run for real elsewhere)."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpucheck.cluster import jobs, launchers
from gpucheck.cluster.ssh.result import Remote
from gpucheck.workloads import launch
from gpucheck.workloads.launch import (
    SUPPORT_FILES,
    files_for,
    horovodrun_command,
    mpirun_command,
    plan_ps_cluster,
    remote_command,
    script_path,
    tf_config,
    torchrun_command,
)


def test_plan_ps_cluster_on_three_hosts():
    tasks = plan_ps_cluster(["n1", "n2", "n3"], 2222, num_ps=2, workers_per_host=2)
    assert [(t.role, t.index, t.address) for t in tasks] == [
        ("chief", 0, "n1:2222"),
        ("worker", 0, "n1:2223"), ("worker", 1, "n1:2224"),
        ("worker", 2, "n2:2222"), ("worker", 3, "n2:2223"),
        ("worker", 4, "n3:2222"), ("worker", 5, "n3:2223"),
        ("ps", 0, "n1:2225"), ("ps", 1, "n2:2224"),
    ]
    configs = [json.loads(t.tf_config) for t in tasks]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)  # one cluster, seen alike by all
    assert configs[0]["cluster"]["ps"] == ["n1:2225", "n2:2224"]
    assert [c["task"] for c in configs[:2]] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0}]
    ps = tasks[-1]
    assert ps.env({"PATH": "/bin"}) == {"PATH": "/bin", "TF_CONFIG": ps.tf_config, "CUDA_VISIBLE_DEVICES": ""}
    assert "CUDA_VISIBLE_DEVICES" not in tasks[1].env()


def test_plan_ps_cluster_all_on_one_address_never_reuses_a_port():
    tasks = plan_ps_cluster(["127.0.0.1", "127.0.0.1"], 40000)
    assert [t.role for t in tasks] == ["chief", "worker", "worker", "ps"]
    addresses = [t.address for t in tasks]
    assert len(set(addresses)) == 4 and addresses[0] == "127.0.0.1:40000"


@pytest.mark.parametrize("kwargs", [{"hosts": []}, {"hosts": ["a"], "num_ps": 0}, {"hosts": ["a"], "base_port": 0},
                                    {"hosts": ["a"], "workers_per_host": 0}])
def test_plan_ps_cluster_rejects_bad_input(kwargs):
    hosts = kwargs.pop("hosts")
    with pytest.raises(ValueError):
        plan_ps_cluster(hosts, **kwargs)


def test_tf_config_validates_role_and_index():
    cluster = {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"], "evaluator": []}
    assert json.loads(tf_config(cluster, "ps", 0)) == {
        "cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]}, "task": {"type": "ps", "index": 0}}
    with pytest.raises(ValueError):
        tf_config(cluster, "worker", 1)
    with pytest.raises(ValueError):
        tf_config(cluster, "master", 0)


def test_mpirun_command():
    cmd = mpirun_command(["/venv/bin/python", "smoke.py", "--steps", "5"], [("n1", 4), ("n2", 4)], as_root=True,
                         oversubscribe=True, env_names=["PATH", "NCCL_DEBUG"], tcp_if="ib0")
    assert cmd == ["mpirun", "-np", "8", "-H", "n1:4,n2:4", "--bind-to", "none", "--map-by", "slot",
                   "--allow-run-as-root", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0",
                   "--mca", "oob_tcp_if_include", "ib0", "-x", "PATH", "-x", "NCCL_DEBUG",
                   "/venv/bin/python", "smoke.py", "--steps", "5"]
    with pytest.raises(ValueError):
        mpirun_command(["x"], [("n1,n2", 1)])  # a comma would smuggle another host into -H
    with pytest.raises(ValueError):
        mpirun_command(["x"], [("n1", 0)])


def test_horovodrun_and_torchrun_commands():
    assert horovodrun_command(["py", "s.py"], [("localhost", 2)], gloo=True, start_timeout_s=60) == [
        "horovodrun", "--gloo", "-np", "2", "-H", "localhost:2", "--start-timeout", "60", "py", "s.py"]
    assert horovodrun_command(["py"], [("a", 1), ("b", 1)])[:2] == ["horovodrun", "--mpi"]
    assert torchrun_command("s.py", ["--steps", "3"], nnodes=2, node_rank=1, nproc_per_node=8,
                            master_addr="n1", master_port=29400) == [
        "torchrun", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "8", "--master-addr", "n1",
        "--master-port", "29400", "s.py", "--steps", "3"]
    with pytest.raises(ValueError):
        torchrun_command("s.py", [], nnodes=2, node_rank=2, nproc_per_node=1, master_addr="n1")


def test_remote_command_quotes_every_word():
    task = plan_ps_cluster(["n1"], 2222)[0]
    line = remote_command(["/opt/stacks/tf horovod/bin/python", str(script_path("tf-ps"))], task.env())
    words = shlex.split(line)
    assert words[0] == "env" and words[1] == f"TF_CONFIG={task.tf_config}"
    assert words[2] == "/opt/stacks/tf horovod/bin/python"
    assert remote_command(["echo", "$(reboot)"]) == "echo '$(reboot)'"


def test_script_paths_exist_and_unknown_kind_is_refused():
    for kind in ("horovod", "torch", "tf-ps", "allreduce"):
        assert script_path(kind).is_file()
    with pytest.raises(ValueError):
        script_path("mxnet")


def test_files_for_a_workload_are_its_script_and_the_support_modules():
    for kind in ("horovod", "torch", "tf-ps", "allreduce"):
        files = files_for(kind)
        assert files[0] == script_path(kind) and files[1:] == list(SUPPORT_FILES)
        assert all(f.is_file() and f.parent == files[0].parent for f in files)  # one folder, as on the nodes
    assert [f.name for f in SUPPORT_FILES] == ["rank_io.py"]


class FakeCopies:
    """RemoteHosts.put only: records the copies; `broken` names (node, file) pairs whose copy fails."""

    def __init__(self, broken: set[tuple[str, str]] = frozenset()):
        self.copies: list[tuple[str, str]] = []
        self.broken = broken

    def put(self, node: str, local, remote_dir: str, timeout: float = 60.0) -> Remote:
        self.copies.append((node, f"{remote_dir}/{Path(local).name}"))
        if (node, Path(local).name) in self.broken:
            return Remote(node, "copy", error="disk full", kind="copy")
        return Remote(node, "copy", exit=0)


def test_distribute_copies_the_script_with_its_support_modules():
    ctx = SimpleNamespace(options=SimpleNamespace(forks=4, launcher="ssh"))
    fake = FakeCopies(broken={("n2", "rank_io.py")})
    path, failed = launchers.named("ssh").distribute(ctx, fake, ["n1", "n2"], script_path("torch"))
    assert path == f"{jobs.REMOTE_DIR}/smoke_torch_ddp.py"
    assert sorted(fake.copies) == [(n, f"{jobs.REMOTE_DIR}/{name}") for n in ("n1", "n2")
                                   for name in ("rank_io.py", "smoke_torch_ddp.py")]
    assert list(failed) == ["n2"] and failed["n2"].error == "disk full"  # a node without rank_io.py failed


def test_launch_imports_only_the_standard_library():
    tree = ast.parse(Path(launch.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "shlex", "collections", "dataclasses", "pathlib"}, names
