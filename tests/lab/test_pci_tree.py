"""Lab hosts get a PCI bus that matches their scenario, and their agent reads it (no root, no lab needed).

The agent fails gpu.count when the PCI bus lists more NVIDIA GPUs than NVML sees. A lab host's /sys
is the build machine's (no NVIDIA device), so the lab writes the scenario's bus beside the scenario
(/etc/fakenvml/sys inside the host) and the host's sshd points GPUCHECK_SYSFS_ROOT at it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

import lab.fakenvml as fakenvml
from lab import config, gpus, host, images
from lab.errors import LabError
from lab.fakenvml import pci
from support import ROOT, by_check, run_gpucheck

DGX_H100_BUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                "0000:ba:00.0", "0000:db:00.0"]


def agent_bus(root: Path) -> list[tuple[str, str, str | None]]:
    """(address, device id, driver) of every NVIDIA GPU in a tree, read as the agent's collector reads
    sysfs (vendor 0x10de, class 0x0300xx/0x0302xx, the driver link's name); the agent itself reads the
    lab's trees in test_the_agent_on_a_lab_host_judges_nvml_against_the_hosts_bus."""
    found = []
    for dev in sorted((root / "bus" / "pci" / "devices").iterdir()):
        vendor, pci_class = ((dev / name).read_text().strip() for name in ("vendor", "class"))
        if vendor == "0x10de" and pci_class.startswith(("0x0300", "0x0302")):
            driver = os.path.basename(os.readlink(dev / "driver")) if (dev / "driver").is_symlink() else None
            found.append((dev.name, (dev / "device").read_text().strip(), driver))
    return found


# ------------------------------------------------------------------------------------ the writer
def test_tree_writer_is_what_the_agent_reads(tmp_path: Path) -> None:
    root = pci.write_pci_tree(tmp_path / "sys", ["00000000:18:00.0", "0000:2A:00.0"],
                              [("0000:05:00.0", "0x10de", "0x068000")])  # an NVSwitch: not a GPU
    pci.write_pci_tree(root, ["0000:e0:00.0"], driver="vfio-pci")
    pci.write_pci_tree(root, ["0000:65:00.0"], device="0x1eb8", gpu_class="0x030000", driver=None)
    node = root / "bus" / "pci" / "devices" / "0000:18:00.0"
    assert {p.name for p in node.iterdir()} == {"vendor", "device", "class", "driver"}
    assert (node / "vendor").read_text() == "0x10de\n" and (node / "class").read_text() == "0x030200\n"
    assert os.readlink(node / "driver") == "../../drivers/nvidia" and (node / "driver").is_dir()
    assert agent_bus(root) == [
        ("0000:18:00.0", "0x2330", "nvidia"), ("0000:2a:00.0", "0x2330", "nvidia"),
        ("0000:65:00.0", "0x1eb8", None), ("0000:e0:00.0", "0x2330", "vfio-pci")]


def test_tests_and_lab_share_one_writer() -> None:
    assert fakenvml.write_pci_tree is pci.write_pci_tree  # tests keep `from lab.fakenvml import write_pci_tree`
    assert fakenvml.write_pci_tree_for is pci.write_pci_tree_for


# --------------------------------------------------------------------------- scenario -> bus
@pytest.mark.parametrize(("scenario", "bus", "device"), [
    ("dgx-h100", DGX_H100_BUS, "0x2330"),
    ("lab", DGX_H100_BUS[:2], "0x2330"),                  # two of the DGX's GPUs: a 2-GPU machine
    ("seven-of-eight", DGX_H100_BUS, "0x2330"),           # NVML shows 7, the bus still has 8 (pci_gpu_count)
    ("gpu-lost", DGX_H100_BUS, "0x2330"),                 # a lost GPU is still on the bus
    ("h100-1gpu", ["0000:00:06.0"], "0x2330"),
    ("t4", ["0000:00:1e.0"], "0x1eb8"),
])
def test_a_scenarios_bus_is_its_machines(scenario: str, bus: list[str], device: str) -> None:
    assert pci.scenario_pci_gpus(fakenvml.scenario_path(scenario)) == [(b, device) for b in bus]


def test_every_scenario_has_a_bus_with_at_least_nvmls_gpus() -> None:
    for path in sorted(fakenvml.SCENARIOS_DIR.glob("*.scn")):
        bus = pci.scenario_pci_gpus(path)
        count = [int(v) for k, v in pci.assignments(path) if k == "gpu_count"][-1]
        assert len(bus) >= count, path.name
        assert len(set(bus)) == len(bus), path.name


def test_last_assignment_wins_as_in_the_library(tmp_path: Path) -> None:
    scenario = tmp_path / "x.scn"
    scenario.write_text(f'include = {fakenvml.scenario_path("dgx-h100")}\ngpu_count = 3\n'
                        'gpu.*.pci_device_id = 0x20B010DE   # A100\n'
                        'gpu.1.pci_bus_id = "00000000:07:00.0"\n'
                        'gpu.2.pci_bus_id = unsupported\n')
    assert pci.scenario_pci_gpus(scenario) == [("0000:18:00.0", "0x20b0"), ("0000:07:00.0", "0x20b0")]


@pytest.mark.parametrize(("text", "error"), [
    ("gpu.0.pci_bus_id = 00000000:18:00.0\n", "'gpu_count' is required"),
    ("gpu_count = 2\npci_gpu_count = 1\n", "less than gpu_count"),
    ("gpu_count = 2\npci_gpu_count = 99\n", "out of range"),
    ("gpu_count = two\n", "not a number"),
    ("include = nowhere.scn\ngpu_count = 1\n", "cannot read scenario"),
])
def test_a_bad_scenario_is_one_clear_error(tmp_path: Path, text: str, error: str) -> None:
    scenario = tmp_path / "bad.scn"
    scenario.write_text(text)
    with pytest.raises(pci.ScenarioError, match=error):
        pci.scenario_pci_gpus(scenario)


def test_the_library_accepts_pci_gpu_count_and_refuses_one_below_gpu_count(tmp_path: Path) -> None:
    from lab.fakenvml.__main__ import check

    libdir = fakenvml.build_library()
    bad = tmp_path / "bad.scn"
    bad.write_text(f"include = {fakenvml.scenario_path('dgx-h100')}\npci_gpu_count = 4\n")
    assert check(libdir, fakenvml.scenario_path("seven-of-eight"))
    assert not check(libdir, bad)


# ------------------------------------------------------------------------------ lab hosts
def test_install_puts_the_scenarios_bus_where_the_host_sees_it(tmp_path: Path) -> None:
    dest = tmp_path / "fakenvml"  # bind-mounted at config.FAKENVML_DIR inside the host
    assert f"{config.FAKENVML_DIR}/sys" == config.FAKE_SYSFS_DIR
    gpus.install("seven-of-eight", dest)
    assert sorted(p.name for p in dest.iterdir()) == ["dev", "dgx-h100.scn", "scenario", "sys"]
    assert [a for a, _, _ in agent_bus(dest / "sys")] == DGX_H100_BUS
    # one driver device node per GPU on the bus (Slurm's gres.conf File=), character 195:N as the driver makes
    nodes = sorted((dest / "dev").iterdir())
    assert [p.name for p in nodes] == [f"nvidia{i}" for i in range(8)]
    assert all(stat.S_ISCHR(p.stat().st_mode) and os.major(p.stat().st_rdev) == 195 for p in nodes)
    assert [os.minor(p.stat().st_rdev) for p in nodes] == list(range(8))
    gpus.add_hang(dest)  # a hang changes the answers, not the bus
    assert len(agent_bus(dest / "sys")) == 8
    gpus.install("lab", dest)  # `fault HOST scenario NAME`: the bus follows the scenario
    assert agent_bus(dest / "sys") == [(a, "0x2330", "nvidia") for a in DGX_H100_BUS[:2]]
    gpus.install("t4", dest)
    assert agent_bus(dest / "sys") == [("0000:00:1e.0", "0x1eb8", "nvidia")]
    assert [p.name for p in (dest / "dev").iterdir()] == ["nvidia0"]  # the device nodes follow the bus too
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_a_scenario_without_a_readable_bus_is_a_lab_error(tmp_path: Path) -> None:
    dest = tmp_path / "fakenvml"
    dest.mkdir()
    (dest / "scenario").write_text("gpu.0.name = x\n")
    with pytest.raises(LabError, match="cannot build the simulated PCI bus: .*'gpu_count' is required"):
        gpus.write_pci_bus(dest)


@pytest.mark.parametrize(("scenario", "status", "reason"), [
    ("lab", "pass", "2 GPU(s) visible to NVML"),
    ("seven-of-eight", "fail", "1 of 8 GPUs on the PCI bus not visible to NVML: 0000:db:00.0 (driver nvidia)"),
])
def test_the_agent_on_a_lab_host_judges_nvml_against_the_hosts_bus(tmp_path: Path, scenario, status, reason) -> None:
    """What `gpucheck node` on a lab host sees: the scenario through the fake library, the bus through
    GPUCHECK_SYSFS_ROOT (here pointed at the directory the lab bind-mounts as /etc/fakenvml)."""
    dest = tmp_path / "fakenvml"
    gpus.install(scenario, dest)
    env = fakenvml.env_for(dest / "scenario", fakenvml.build_library())
    (tmp_path / "node.yaml").write_text("profile: auto\n")
    env.update(GPUCHECK_CONFIG=str(tmp_path / "node.yaml"), GPUCHECK_SYSFS_ROOT=str(dest / "sys"))
    done = run_gpucheck(["node", "--profile", "generic", "--format", "json", "--only", "gpu.count"], env)
    result = by_check(json.loads(done.stdout))["gpu.count"]
    assert (result["status"], reason in result["reason"]) == (status, True), result


def test_lab_hosts_sshd_points_every_session_at_the_bus(tmp_path: Path) -> None:
    text = host.sshd_config("127.0.0.9")
    assert f"\nSetEnv GPUCHECK_SYSFS_ROOT={config.FAKE_SYSFS_DIR}\n" in text
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK):
        pytest.skip("no sshd here to read the configuration")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    (tmp_path / "sshd_config").write_text(text)
    done = subprocess.run([sshd, "-T", "-f", str(tmp_path / "sshd_config"), "-h", str(key)], capture_output=True,
                          text=True, timeout=30, check=False)
    if "privilege separation directory" in done.stderr:
        pytest.skip(f"sshd cannot run here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert f"setenv GPUCHECK_SYSFS_ROOT={config.FAKE_SYSFS_DIR}" in done.stdout.splitlines()


def test_the_agent_knows_no_lab_path() -> None:
    for path in (ROOT / "agent" / "gpucheck").rglob("*.py"):
        text = path.read_text()
        assert config.FAKENVML_DIR not in text and "gpucheck-lab" not in text, path


def test_lab_changes_do_not_change_the_golden_image(tmp_path: Path) -> None:
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "main.yml").write_text("- name: x\n")
    (tmp_path / "lab" / "fakenvml").mkdir(parents=True)
    (tmp_path / "lab" / "fakenvml" / "pci.py").write_text("A = 1\n")
    before = images.tree_hash(tmp_path)
    (tmp_path / "lab" / "fakenvml" / "pci.py").write_text("A = 2\n")
    (tmp_path / "lab" / "host.py").write_text("SetEnv = 1\n")
    assert images.tree_hash(tmp_path) == before
