"""Unit tests of the lab's pieces that need neither root nor namespaces."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from lab import config, gpus, host, hostinit, images, inventory, proxy, rootfs, state
from lab.state import HostState, LabState

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------- apt sources
def test_debian_sources_keep_debian_and_drop_third_party_repositories() -> None:
    files = {
        "debian.sources": (
            "Types: deb\n# a comment\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
            "Components: main\n\n"
            "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"
        ),
        "nodesource.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n"
                              "Components: main\n",
        "google.list": "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n",
        "mirror.list": "deb [arch=amd64] http://mirror.example.org/debian bookworm main contrib # site mirror\n",
    }
    assert rootfs.parse_debian_sources(files) == [
        "deb http://deb.debian.org/debian bookworm main",
        "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
        "deb http://mirror.example.org/debian bookworm main contrib",
    ]


def test_archive_hosts_are_the_sources_hosts_plus_pypi() -> None:
    hosts = rootfs.archive_hosts(["deb http://deb.debian.org/debian bookworm main",
                                  "deb http://mirror.example.org/debian-security bookworm-security main"])
    assert hosts == ["deb.debian.org", "mirror.example.org", "pypi.org", "files.pythonhosted.org"]


# ------------------------------------------------------------------------------------- proxy
def test_proxy_allows_only_exact_names_on_web_ports() -> None:
    allowed = frozenset({"deb.debian.org", "pypi.org"})
    assert proxy.is_allowed("deb.debian.org", 80, allowed)
    assert proxy.is_allowed("PyPI.org.", 443, allowed)
    assert not proxy.is_allowed("deb.debian.org", 22, allowed)
    assert not proxy.is_allowed("evil.deb.debian.org", 80, allowed)
    assert not proxy.is_allowed("203.0.113.80", 80, allowed)
    assert proxy.split_authority("pypi.org:443", 80) == ("pypi.org", 443)
    assert proxy.split_authority("[::1]:8080", 80) == ("::1", 8080)
    assert proxy.split_authority("pypi.org", 443) == ("pypi.org", 443)


@pytest.fixture
def local_proxy():
    """The real proxy server on loopback, allowing one name that these tests never contact."""
    server = proxy.ProxyServer(("127.0.0.1", 0), type("H", (proxy.ProxyHandler,), {}))
    server.RequestHandlerClass.allowed = frozenset({"deb.debian.org"})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method,target", [
    ("GET", "http://example.com/"),
    ("GET", "http://127.0.0.1:22/"),
    ("CONNECT", "example.com:443"),
    ("CONNECT", "deb.debian.org:22"),  # allowed name, wrong port
])
def test_proxy_refuses_everything_else_with_403(local_proxy: int, method: str, target: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", local_proxy, timeout=10)
    conn.request(method, target)
    resp = conn.getresponse()
    body = resp.read().decode()
    assert resp.status == 403
    assert "not allowed" in body and "deb.debian.org" in body


def test_proxy_rejects_origin_form_requests(local_proxy: int) -> None:
    with socket.create_connection(("127.0.0.1", local_proxy), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: deb.debian.org\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # the proxy closes after a 400
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400")


# ---------------------------------------------------------------------------------- scenarios
def test_scenario_is_copied_with_its_includes_and_hang_appends_a_rule(tmp_path: Path) -> None:
    dest = tmp_path / "fakenvml"
    gpus.install("lab", dest)
    assert sorted(p.name for p in dest.iterdir()) == ["dev", "dgx-h100.scn", "scenario", "sys"]  # its PCI bus, devices
    assert "include = dgx-h100.scn" in (dest / "scenario").read_text()
    gpus.add_hang(dest)
    assert (dest / "scenario").read_text().rstrip().endswith(f"hang = {gpus.HANG_CALL}")
    gpus.install("t4", dest)  # replacing drops the old files and the hang
    assert sorted(p.name for p in dest.iterdir()) == ["dev", "scenario", "sys"]
    assert "hang" not in (dest / "scenario").read_text()


def test_installed_scenario_and_hang_rule_load_through_the_fake_library(tmp_path: Path) -> None:
    from lab.fakenvml import build_library

    libdir = build_library()
    dest = tmp_path / "fakenvml"
    gpus.install("lab", dest)
    snippet = ("import ctypes, sys; l = ctypes.CDLL('libnvidia-ml.so.1'); rc = l.nvmlInit_v2(); c = ctypes.c_uint();"
               " l.nvmlDeviceGetCount_v2(ctypes.byref(c)); print(rc, c.value)")
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), FAKENVML_SCENARIO=str(dest / "scenario"))
    out = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["0", "2"], out.stderr
    gpus.add_hang(dest)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, timeout=3)


def test_unknown_scenario_is_one_clear_error() -> None:
    from lab.errors import LabError

    with pytest.raises(LabError, match="unknown scenario 'nope' .*available: .*dgx-h100"):
        gpus.scenario_file("nope")


# ---------------------------------------------------------------------------------- inventory
def _state() -> LabState:
    st = LabState(subnet="10.213.7.0/24", bridge="gclab0", bridge_address="10.213.7.1",
                  proxy_url="http://10.213.7.1:3128")
    st.hosts = [HostState("node01", "10.213.7.11", "gclab-node01", "gclabv-node01", "lab"),
                HostState("node02", "10.213.7.12", "gclab-node02", "gclabv-node02", "ecc-uncorrected")]
    return st


def test_inventory_has_the_production_groups_and_what_ansible_needs(tmp_path: Path) -> None:
    path = inventory.write(_state(), tmp_path / "hosts.yml")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(proc.stdout)
    assert data["gpu_nodes"]["hosts"] == ["node01", "node02"]
    assert "admin" in data["all"]["children"]
    node02 = data["_meta"]["hostvars"]["node02"]
    assert node02["ansible_host"] == "10.213.7.12"
    assert node02["ansible_user"] == "root"
    assert node02["ansible_ssh_private_key_file"] == str(config.KEY_FILE)  # /run/gpucheck-lab/id_ed25519
    assert "-o StrictHostKeyChecking=yes" in node02["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={config.KNOWN_HOSTS}" in node02["ansible_ssh_common_args"]
    assert node02["ib_address"] is None and node02["ipmi_address"] is None
    assert node02["lab_proxy_url"] == "http://10.213.7.1:3128"
    assert node02["lab_scenario"] == "ecc-uncorrected"
    # racks of two, a leaf switch each: the lab's shape for stages shape and burn
    assert (node02["rack"], node02["leaf_switch"]) == ("A", "leaf-A")


def test_an_admin_node_is_the_admin_group_without_simulated_gpus(tmp_path: Path) -> None:
    st = _state()
    st.hosts.insert(0, HostState("admin01", "10.213.7.10", "gclab-admin01", "gclabv-admin01", "", role="admin"))
    st.hosts.append(HostState("node03", "10.213.7.13", "gclab-node03", "gclabv-node03", "lab"))
    path = inventory.write(st, tmp_path / "hosts.yml")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    racks = {n: v.get("rack") for n, v in yaml.safe_load(proc.stdout)["_meta"]["hostvars"].items()}
    assert racks == {"admin01": None, "node01": "A", "node02": "A", "node03": "B"}  # the admin node in none
    data = yaml.safe_load(proc.stdout)
    assert data["admin"]["hosts"] == ["admin01"] and data["gpu_nodes"]["hosts"] == ["node01", "node02", "node03"]
    assert data["_meta"]["hostvars"]["admin01"]["ansible_host"] == "10.213.7.10"
    identity = host.HostIdentity("k", "p", "ck", "cp")
    admin_spec = host.spec(st.hosts[0], st.hosts, ["/base"], identity, "", st.proxy_url, None)
    node_spec = host.spec(st.hosts[1], st.hosts, ["/base"], identity, "", st.proxy_url, Path("/lib/fake.so"))
    # every host shares the machine's compiled module_utils (lab/module_bytecode), Debian's python3 finds its hook
    bytecode = {"source": "/var/cache/gpucheck-lab/module-bytecode",
                "target": "/var/cache/gpucheck-lab-module-bytecode", "writable": True}
    assert admin_spec["binds"] == [bytecode]  # no fake NVML, no scenario, no fake CuPy: an admin node has no GPUs
    assert admin_spec["links"] == [] and admin_spec["kernel"] is None
    hook = "/usr/local/lib/python3.11/dist-packages/usercustomize.py"
    assert hook in {f["path"] for f in admin_spec["files"]} and hook in {f["path"] for f in node_spec["files"]}
    assert [b["target"] for b in node_spec["binds"]] == [bytecode["target"], "/etc/fakenvml",
                                                         "/usr/lib/gpucheck-lab/libnvidia-ml.so.1",
                                                         "/etc/gpucheck-lab/kernel", "/usr/lib/gpucheck-lab/python",
                                                         "/var/log/gpucheck-lab", "/var/lib/fakenvml"]
    # only the kernel log the lab plants lines into, the reset layer the host's nvidia-smi -r writes and the compiled
    # module_utils are writable from inside the host
    writable = {b["target"]: b["source"] for b in node_spec["binds"] if b.get("writable")}
    assert list(writable) == [bytecode["target"], "/var/log/gpucheck-lab", "/var/lib/fakenvml"]
    assert writable["/var/lib/fakenvml"] == str(gpus.reset_dir("node01")) == str(gpus.reset_layer("node01").parent)
    assert "/usr/local/sbin/gpucheck" in {f["path"] for f in node_spec["files"]}  # the agent with the fake CuPy
    assert "/usr/local/sbin/gpucheck" not in {f["path"] for f in admin_spec["files"]}
    # the NVML path is a link the driver package's alternative may take over, never a file mounted over it
    assert node_spec["links"] == [{"path": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                                   "target": "/usr/lib/gpucheck-lab/libnvidia-ml.so.1"}]


def test_state_round_trips(tmp_path: Path) -> None:
    st = _state()
    st.hosts[1].faults.append("down")
    state.save(st, tmp_path / "state.json")
    again = state.load(tmp_path / "state.json")
    assert again == st
    assert again.host("10.213.7.12").name == "node02"


# ------------------------------------------------------------------------------ golden image key
def test_golden_key_follows_the_playbook_tree_but_not_docs_packaging_or_generated_inventory(tmp_path: Path) -> None:
    (tmp_path / "roles/x/tasks").mkdir(parents=True)
    (tmp_path / "roles/x/tasks/main.yml").write_text("- debug: msg=a\n")
    (tmp_path / "inventory/lab").mkdir(parents=True)
    first = images.tree_hash(tmp_path)
    (tmp_path / "README.md").write_text("docs")
    (tmp_path / "inventory/lab/hosts.yml").write_text("generated")
    (tmp_path / "pyproject.toml").write_text("[project.optional-dependencies]\ntest = ['pytest-xdist']\n")
    (tmp_path / "Makefile").write_text("check:\n\tpytest\n")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text("make test\n")
    assert images.tree_hash(tmp_path) == first
    (tmp_path / "roles/x/tasks/main.yml").write_text("- debug: msg=b\n")
    assert images.tree_hash(tmp_path) != first


def test_golden_key_leaves_out_the_playbooks_and_roles_the_playbook_never_runs(tmp_path: Path, monkeypatch) -> None:
    """site.yml imports playbooks/gpu.yml (role driver, which depends on role repo); playbooks/upgrade.yml (role
    upgrade) is not imported: a change to upgrade.yml or to its role makes no new image; one to any file site.yml
    reaches does, and so does importing upgrade.yml."""
    monkeypatch.setattr(images, "current_base_key", lambda: "base")
    files = {"site.yml": "- name: GPU\n  ansible.builtin.import_playbook: playbooks/gpu.yml\n",
             "playbooks/gpu.yml": "- hosts: all\n  roles:\n    - role: driver\n",
             "playbooks/upgrade.yml": "- hosts: all\n  roles: [upgrade]\n",
             "roles/driver/tasks/main.yml": "- ansible.builtin.debug: msg=driver\n",
             "roles/driver/meta/main.yml": "dependencies:\n  - role: repo\n",
             "roles/repo/tasks/main.yml": "- ansible.builtin.debug: msg=repo\n",
             "roles/upgrade/tasks/main.yml": "- ansible.builtin.debug: msg=upgrade\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    site = tmp_path / "site.yml"
    assert images.unreached(tmp_path, site) == {"playbooks/upgrade.yml", "roles/upgrade"}
    first = images.golden_key(site)
    (tmp_path / "roles/upgrade/tasks/main.yml").write_text("- ansible.builtin.debug: msg=changed\n")
    (tmp_path / "playbooks/upgrade.yml").write_text("- hosts: gpu\n  roles: [upgrade]\n")
    assert images.golden_key(site) == first
    for rel in ("roles/repo/tasks/main.yml", "playbooks/gpu.yml"):  # a dependency's file, an imported playbook
        (tmp_path / rel).write_text((tmp_path / rel).read_text() + "# changed\n")
        assert images.golden_key(site) != first, rel
        first = images.golden_key(site)
    site.write_text(site.read_text() + "- ansible.builtin.import_playbook: playbooks/upgrade.yml\n")
    assert images.unreached(tmp_path, site) == frozenset() and images.golden_key(site) != first


def test_golden_key_follows_the_fake_nvml_the_driver_package_carries(tmp_path: Path, monkeypatch) -> None:
    """libnvidia-ml1's stand-in is the fake NVML: a new NVML function in it must make a new golden image, or the
    hosts keep the old library and the agent's call is not found there."""
    fake = tmp_path / "fakenvml"
    fake.mkdir()
    (fake / "fakenvml.c").write_text("int nvmlInit_v2(void) { return 0; }\n")
    (tmp_path / "site.yml").write_text("- hosts: all\n")
    monkeypatch.setattr(images, "FAKE_NVML_TREE", fake)
    monkeypatch.setattr(images, "current_base_key", lambda: "base")
    first = images.golden_key(tmp_path / "site.yml")
    (fake / "fakenvml.c").write_text("int nvmlInit_v2(void) { return 0; }\nint nvmlDeviceGetVbiosVersion;\n")
    assert images.golden_key(tmp_path / "site.yml") != first


# ------------------------------------------------------------------------------------------- cli
def _cli(*args: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(user or []), sys.executable, "-m", "lab", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_help_teaches_the_commands() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    for word in ("up --hosts 3", "status", "fault", "down", "ssh", "build", "Exit codes"):
        assert word in out.stdout
    fault = _cli("fault", "--help")
    assert fault.returncode == 0
    for kind in ("down", "hang", "scenario NAME", "drift PKG==VER"):
        assert kind in fault.stdout


@pytest.mark.parametrize("args", [("bogus",), ("up", "--hosts", "many"), ()])
def test_bad_usage_exits_3_without_traceback(args: tuple[str, ...]) -> None:
    out = _cli(*args)
    assert out.returncode == 3
    assert "Traceback" not in out.stderr


NAMES = ("import json; from lab import config; print(json.dumps([config.PREFIX, config.BRIDGE, config.TAG, "
         "str(config.RUN_DIR), str(config.DATA_DIR), str(config.INVENTORY.relative_to(config.REPO_ROOT)), "
         "config.DEFAULT_SUBNET, str(config.CACHE_DIR), config.veth_name('admin01')]))")


def names_of(instance: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != config.INSTANCE_ENV}
    if instance is not None:
        env[config.INSTANCE_ENV] = instance
    done = subprocess.run([sys.executable, "-c", NAMES], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=env, check=True)
    return yaml.safe_load(done.stdout)


def test_each_lab_instance_has_names_and_places_of_its_own_and_shares_the_cache() -> None:
    assert names_of(None) == names_of("0") == [
        "gclab", "gclab0", "--gpucheck-lab", "/run/gpucheck-lab", "/var/lib/gpucheck-lab", "inventory/lab/hosts.yml",
        "10.213.7.0/24", "/var/cache/gpucheck-lab", "gclabv-admin01"]
    assert names_of("3") == [
        "gc3lab", "gc3lab0", "--gpucheck-lab=3", "/run/gpucheck-lab-3", "/var/lib/gpucheck-lab-3",
        "inventory/lab-3/hosts.yml", "10.213.10.0/24", "/var/cache/gpucheck-lab", "gc3labv-admin01"]
    # `down` removes the links and namespaces that start with its prefix: no instance's starts another's
    prefixes = [names_of(str(i))[0] for i in range(config.MAX_INSTANCE + 1)]
    assert not [(a, b) for a in prefixes for b in prefixes if a != b and b.startswith(a)], prefixes


@pytest.mark.parametrize("value", ["x", "10", "-1"])
def test_a_lab_instance_out_of_range_is_refused_in_one_line(value: str) -> None:
    env = {**os.environ, config.INSTANCE_ENV: value}
    out = subprocess.run([sys.executable, "-m", "lab", "status"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, env=env)
    assert (out.returncode, out.stderr.strip().splitlines()) == (3, [
        f"lab: error: GPUCHECK_LAB_INSTANCE must be a number from 0 to 9, not {value!r}"]), out.stderr


def test_another_instances_inventory_reads_the_labs_group_vars_and_goes_whole(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(config, "LAB_INVENTORY_DIR", tmp_path / "lab")
    shutil.copytree(REPO / "inventory" / "lab" / "group_vars", tmp_path / "lab" / "group_vars")
    path = inventory.write(_state(), tmp_path / "lab-2" / "hosts.yml")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path.parent), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["_meta"]["hostvars"]["node01"]["cluster_name"] == "lab"  # group_vars/all
    inventory.remove(path)
    assert not path.parent.exists() and (tmp_path / "lab" / "group_vars").is_dir()


def test_up_refuses_without_root_in_one_line() -> None:
    if os.geteuid() != 0:
        out = _cli("up", "--hosts", "1")
    else:  # run it as nobody
        out = _cli("up", "--hosts", "1", user=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    assert out.returncode == 3
    assert out.stderr.strip().splitlines() == [
        "lab: error: the lab needs root (network namespaces, mounts, a bridge): run it as root"
    ]


def test_a_boot_loads_the_installed_driver_and_keeps_a_packages_link(tmp_path: Path, monkeypatch) -> None:
    """hostinit.py before each boot: the "loaded module" is the installed driver package's version, none without
    one; the lab's NVML link is made only where nothing is, so the driver's alternative keeps its own."""
    root, kernel = tmp_path / "root", tmp_path / "kernel"
    kernel.mkdir()
    spec = {"root": str(root), "links": [{"path": config.NVML_PATH, "target": config.LAB_NVML_PATH}],
            "kernel": {"dir": str(kernel), "file": config.MODULE_VERSION_FILE,
                       "scenario": config.MODULE_SCENARIO_FILE, "driver_scenario": config.DRIVER_SCENARIO}}
    monkeypatch.setattr(hostinit, "SPEC", spec)
    module = kernel / config.MODULE_VERSION_FILE
    hostinit.make_links()
    hostinit.load_module()
    link = root / config.NVML_PATH.lstrip("/")
    assert str(link.readlink()) == config.LAB_NVML_PATH and not module.exists()
    scn = root / config.DRIVER_SCENARIO.lstrip("/")  # what the stand-in libnvidia-ml1 installs
    scn.parent.mkdir(parents=True)
    scn.write_text("# the driver\ndriver_version = 535.261.03\nnvml_version = 12.535.261.03\n")
    link.unlink()
    link.symlink_to("/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu")
    hostinit.make_links()
    hostinit.load_module()
    assert str(link.readlink()).startswith("/etc/alternatives/")
    assert module.read_text().startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  ")
    loaded = kernel / config.MODULE_SCENARIO_FILE
    assert "\nkernel_module_version = 535.261.03\n" in loaded.read_text()
    scn.write_text("driver_version = 550.163.01\n")  # upgraded: the module stays 535 until the next boot
    assert "535.261.03" in loaded.read_text()
    hostinit.load_module()
    assert "\nkernel_module_version = 550.163.01\n" in loaded.read_text()
    scn.unlink()  # the driver removed: no module at the next boot
    hostinit.load_module()
    assert not module.exists() and not loaded.exists()
