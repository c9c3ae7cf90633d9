"""What makes a lab host a Kubernetes node, without booting one (lab/kubernetes/node_host.py, image_archive.py and
hostinit's part): the host's capabilities, the kubelet's identity and confinement, the images' archives. The
kubelet really running in hosts: tests/kubernetes/test_lab_nodes.py."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from lab import config, host, hostinit
from lab.kubernetes import image_archive, node_host
from lab.state import HostState

JOIN = node_host.Join("https://10.213.7.1:6443", "-----BEGIN CERTIFICATE-----\nx\n", "secret")


def node_spec(name: str = "node01", address: str = "10.213.7.11", node: bool = True) -> dict:
    h = HostState(name, address, f"gclab-{name}", f"gclabv-{name}", "lab")
    parts = node_host.parts(name, address, config.cgroup_name(name), Path("/cache/kit"), JOIN,
                            Path("/cache/gpucheck.tar")) if node else None
    return host.spec(h, [h], ["/base"], host.HostIdentity("k", "p", "ck", "cp"), "", "http://10.213.7.1:3128",
                     Path("/lib/fake.so"), parts)


def files(spec: dict) -> dict[str, str]:
    return {f["path"]: f["content"] for f in spec["files"]}


def test_a_node_host_gets_net_admin_the_kit_and_its_units_and_a_plain_host_none_of_it(monkeypatch) -> None:
    spec, plain = node_spec(), node_spec(node=False)
    for one, caps in ((spec, ["--capability=CAP_SYSLOG", "--capability=CAP_NET_ADMIN"]),
                      (plain, ["--capability=CAP_SYSLOG"])):
        monkeypatch.setattr(hostinit, "SPEC", one)
        assert [a for a in hostinit.nspawn_argv() if a.startswith("--capability")] == caps
    monkeypatch.setattr(hostinit, "SPEC", spec)
    assert "--bind-ro=/cache/kit:/opt/gpucheck-lab/kubernetes" in hostinit.nspawn_argv()
    assert "--bind-ro=/cache/gpucheck.tar:/opt/gpucheck-lab/images/gpucheck.tar" in hostinit.nspawn_argv()
    assert f"{node_host.UNITS}/multi-user.target.wants/{node_host.KUBELET}.service" in {
        link["path"] for link in spec["links"]}
    assert spec["pod_cgroup"] == f"{config.cgroup_name('node01')}-pods" and plain["pod_cgroup"] == ""
    assert not any(path.startswith(node_host.CONF) for path in files(plain))


def test_the_kubelet_is_the_node_itself_and_kept_off_the_machines_kernel_settings_and_cgroups() -> None:
    written = files(node_spec())
    kubeconfig = json.loads(written[f"{node_host.CONF}/kubeconfig"])
    assert kubeconfig["users"] == [{"name": "system:node:node01", "user": {"token": "secret"}}]
    assert kubeconfig["clusters"][0]["cluster"]["server"] == JOIN.server
    kubelet = json.loads(written[f"{node_host.CONF}/kubelet.yaml"])
    root = f"{config.cgroup_name('node01')}-pods"  # gclab-node01-pods in lab instance 0
    assert kubelet["cgroupRoot"] == f"/{root}" and kubelet["address"] == "10.213.7.11"
    prepare = written[f"{node_host.CONF}/prepare.sh"]
    binds = [line.split()[1:] for line in prepare.splitlines() if line.startswith("bind ")]
    assert ["/dev/null", "/dev/kmsg"] in binds
    for key, value in node_host.SYSCTLS.items():  # each setting the kubelet wants, read from a file of the host
        source = f"{node_host.CONF}/sysctl/{key.replace('/', '.')}"
        assert [source, f"/proc/sys/{key}"] in binds and written[source] == value + "\n"
    # no mount namespace of its own: the volumes it mounts for a pod must be where containerd and runc look
    assert "Paths=" not in written[f"{node_host.UNITS}/{node_host.KUBELET}.service"]
    assert f'mkdir -p "${{dir}}{root}"' in prepare
    other = json.loads(files(node_spec("node02", "10.213.7.12"))["/etc/cni/net.d/10-gpucheck-lab.conflist"])
    assert other["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.12.0/24"}]]


def test_a_node_kubeconfig_without_a_ca_skips_verification() -> None:
    config_ = json.loads(node_host.kubeconfig("node01", node_host.Join("https://10.213.7.1:6443", "", "t")))
    assert config_["clusters"][0]["cluster"] == {"server": "https://10.213.7.1:6443", "insecure-skip-tls-verify": True}


def test_the_ending_host_removes_its_pods_cgroups_from_the_v1_controllers_it_booted_in(monkeypatch,
                                                                                         tmp_path: Path) -> None:
    own = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"  # as a tool's sandbox places the lab
    pods = "gclab-node01-pods/kubepods/besteffort"
    for place in ("memory/process_api/abc", "cpu", "systemd", "unified"):
        (tmp_path / place / pods).mkdir(parents=True)
    (tmp_path / "memory/process_api/abc/gclab-node02-pods").mkdir()
    monkeypatch.setattr(hostinit, "CGROUP_FS", str(tmp_path))
    assert hostinit.controller_places(own) == [str(tmp_path / "memory/process_api/abc"), str(tmp_path / "cpu")]
    for place in hostinit.controller_places(own):
        hostinit.remove_cgroup(f"{place}/gclab-node01-pods")
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*-pods"))
    assert left == ["memory/process_api/abc/gclab-node02-pods", "systemd/gclab-node01-pods",
                    "unified/gclab-node01-pods"]


def test_an_image_archive_is_what_ctr_imports_and_the_same_files_give_the_same_layer(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_bytes(b"\x7fELF pretend")
    tool.chmod(0o755)
    digest = image_archive.pack(tmp_path / "a.tar", "lab.local/tool:1", {"/bin/tool": tool}, {"/bin/sh": "tool"},
                                cmd=["/bin/sh"])
    assert image_archive.pack(tmp_path / "b.tar", "lab.local/tool:1", {"/bin/tool": tool}, {"/bin/sh": "tool"},
                              cmd=["/bin/sh"]) == digest
    with tarfile.open(tmp_path / "a.tar") as tar:
        [manifest] = json.loads(tar.extractfile("manifest.json").read())
        assert manifest["RepoTags"] == ["lab.local/tool:1"]
        layer = tar.extractfile(manifest["Layers"][0]).read()
        image_config = json.loads(tar.extractfile(manifest["Config"]).read())
    assert "sha256:" + hashlib.sha256(layer).hexdigest() == digest == image_config["rootfs"]["diff_ids"][0]
    assert image_config["config"]["Cmd"] == ["/bin/sh"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        members = {m.name: m for m in inner.getmembers()}
    assert members["bin/tool"].mode == 0o755 and members["bin/sh"].linkname == "tool"
    assert members["tmp"].mode == 0o1777 and members["proc"].isdir()
