"""`gpucheck node` end to end, as a separate process, against the fake NVML library.

The agent runs unmodified: LD_LIBRARY_PATH puts the fake libnvidia-ml.so.1 first, the scenario file
says what the GPUs report, and tools without hardware here (ibstat, dmesg) are replayed from real
recorded outputs by executables on PATH.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree
from support import REAL, TEST_PROFILES, by_check, report_of, run_gpucheck

CI_PROFILE = str(TEST_PROFILES / "dgx-h100-ci.yaml")
# the PCI bus of the DGX H100 the dgx-h100 scenario simulates: 8 GPUs (3D controllers) and 4 NVSwitches
DGX_H100_BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
                "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
NVSWITCHES = [(f"0000:{bus}:00.0", "0x10de", "0x068000") for bus in ("05", "06", "07", "08")]
IBSTAT_H100 = (REAL / "ibstat" / "ibstat-h100-12hca-8xNDR400-active-3eth-down.txt").read_text()
QUIET_DMESG = "[    0.000000] Linux version 6.1.0-18-amd64\n[    2.114000] nvidia: loading out-of-tree module\n"


@pytest.fixture(scope="module")
def libdir(tmp_path_factory) -> Path:
    return build_library()


@pytest.fixture
def node(libdir, fake_bin, fabric_manager, tmp_path):
    """Run `gpucheck node --format json` against a scenario; returns (exit code, report, stderr)."""
    fake_bin.add("ibstat", IBSTAT_H100)
    fake_bin.add("dmesg", QUIET_DMESG)
    config = tmp_path / "node.yaml"
    config.write_text("profile: auto\n")
    sysfs = write_pci_tree(tmp_path / "sys", DGX_H100_BUS, NVSWITCHES)

    def run(scenario: str, *args: str, profile: str = CI_PROFILE, dmesg: str | None = None):
        if dmesg is not None:
            fake_bin.add("dmesg", dmesg)
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config), GPUCHECK_SYSFS_ROOT=str(sysfs))
        done = run_gpucheck(["node", "--profile", profile, "--format", "json", *args], env)
        return done.returncode, report_of(done), done.stderr

    return run


def test_healthy_dgx_h100_passes_every_check(node):
    code, report, _ = node("dgx-h100")
    failing = {r["check"]: r["reason"] for r in report["results"] if r["status"] not in ("pass", "skip")}
    assert failing == {}
    assert code == 0
    checks = by_check(report)
    assert checks["gpu.count"]["measured"] == 8
    assert checks["ib.ports"]["measured"]["active"] == 8
    assert report["facts"]["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert report["facts"]["driver_version"] == "535.183.01"
    assert report["facts"]["cuda_driver_version"] == "12.2"


FAULTS = [
    ("ecc-uncorrected", "gpu.ecc_errors", "GPU3", "volatile uncorrected"),
    ("row-remap-pending", "gpu.row_remap", "GPU5", "row remap pending"),
    ("row-remap-failure", "gpu.row_remap", "GPU2", "no spare rows"),
    ("pcie-downtrained", "gpu.pcie", "GPU6", "x8 of x16"),
    ("nvlink-down", "gpu.nvlink", "GPU1", "16 of 18 NVLinks up (down: 4, 5)"),
    ("throttling", "gpu.clocks", "GPU7", "hw_slowdown"),
    ("overheat", "gpu.temperature", "GPU0", "slowdown threshold"),
    ("persistence-off", "gpu.persistence", "all 8 GPUs", "persistence mode off"),
    ("seven-of-eight", "gpu.count", "7 GPUs visible, 8 expected", "0000:db:00.0 (driver nvidia)"),
    ("gpu-lost", "gpu.count", "GPU4 is lost", "7 of 8 GPUs respond"),
    ("mig-enabled", "gpu.mig", "GPU0", "MIG enabled"),
]


@pytest.mark.parametrize("scenario,check,gpu,words", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_scenario_fails_naming_gpu_and_check(node, scenario, check, gpu, words):
    code, report, _ = node(scenario)
    assert code == 2
    failed = {r["check"]: r for r in report["results"] if r["status"] == "fail"}
    assert check in failed, failed
    assert gpu in failed[check]["reason"] and words in failed[check]["reason"]
    assert failed[check]["remediation"]
    others = set(failed) - {check}
    assert not others, f"only {check} should fail, also: {others}"


def test_driver_library_mismatch_fails_the_gpu_checks_and_runs_host_checks(node):
    code, report, _ = node("driver-mismatch")
    checks = by_check(report)
    assert code == 2
    assert checks["gpu.count"]["status"] == "fail"
    assert "driver/library version mismatch" in checks["gpu.count"]["reason"]
    assert "reboot" in checks["gpu.count"]["remediation"]
    assert checks["host.disk"]["status"] == "pass"


def test_hung_nvml_call_costs_only_the_check_that_needs_it(node):
    began = time.monotonic()
    code, report, _ = node("hang", "--timeout", "3")
    elapsed = time.monotonic() - began
    checks = by_check(report)
    assert code == 3
    assert checks["gpu.temperature"]["status"] == "error"
    assert checks["gpu.temperature"]["reason"] == (
        "GPU2 (00000000:3A:00.0): temperature not read: nvmlDeviceGetTemperature hung (did not return within 3 s)")
    not_passing = {c: r["status"] for c, r in checks.items() if r["status"] not in ("pass", "skip")}
    assert not_passing == {"gpu.temperature": "error"}
    assert checks["gpu.count"]["measured"] == 8 and checks["gpu.nvlink"]["status"] == "pass"
    assert elapsed < 60, "the hung call must not hold the agent past its timeout"


def test_no_nvml_library_fails_gpu_checks_without_a_crash(fake_bin, tmp_path):
    fake_bin.add("dmesg", QUIET_DMESG)
    empty = tmp_path / "nolib"
    empty.mkdir()
    env = dict(os.environ, LD_LIBRARY_PATH=str(empty), PATH=fake_bin.path(),
               GPUCHECK_CONFIG=str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}\n")
    done = run_gpucheck(["node", "--format", "json"], env)
    report = report_of(done)
    checks = by_check(report)
    assert done.returncode == 2, done.stderr
    assert report["profile"] == "generic"
    assert checks["gpu.count"]["status"] == "fail"
    assert "libnvidia-ml.so.1" in checks["gpu.count"]["reason"]
    assert checks["host.disk"]["status"] == "pass"
    assert "Traceback" not in done.stderr


def test_xid_in_kernel_log_fails_with_the_pci_id(node):
    xid_log = (REAL / "xid" / "a100-xid63-row-remapper-stas00.txt").read_text()
    fallen = (REAL / "xid" / "fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt").read_text()
    code, report, _ = node("dgx-h100", "--only", "gpu.xid", "--xid-since", "boot",  # old stamps: judged all the same
                           dmesg=QUIET_DMESG + fallen + xid_log)
    result = by_check(report)["gpu.xid"]
    assert code == 2 and result["status"] == "fail"
    assert "fallen off the bus" in result["reason"]
    assert "NVRM" in result["evidence"]


def test_profile_is_chosen_from_what_nvml_reports(libdir, fake_bin, tmp_path):
    (tmp_path / "none.yaml").write_text("{}\n")
    unknown = tmp_path / "unknown.scn"  # a GPU the SKU table does not know
    unknown.write_text(f"include = {scenario_path('t4')}\ngpu.0.name = NVIDIA Hypothetical X1\n"
                       "gpu.0.pci_device_id = 0x999910DE\n")
    dgx_bus = write_pci_tree(tmp_path / "dgx", DGX_H100_BUS, NVSWITCHES)
    no_bus = write_pci_tree(tmp_path / "none", [])
    for scenario, sysfs, expected in (("dgx-h100", dgx_bus, "dgx-h100"), ("dgx-a100", no_bus, "dgx-a100"),
                                      ("t4", no_bus, "pcie-1gpu"), ("p100", no_bus, "legacy-kepler-pascal"),
                                      ("h100-1gpu", no_bus, "h100-1gpu"),
                                      # fewer GPUs in NVML than on the bus: judged as what the bus holds
                                      ("seven-of-eight", dgx_bus, "dgx-h100"), ("gpu-lost", no_bus, "dgx-h100"),
                                      # no profile matches: derived from the GPUs' SKU entry, else generic
                                      ("seven-of-eight", no_bus, "derived-h100-sxm5-80gb"),
                                      (unknown, no_bus, "generic")):
        env = env_for(scenario if isinstance(scenario, Path) else scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(tmp_path / "none.yaml"), GPUCHECK_SYSFS_ROOT=str(sysfs))
        done = run_gpucheck(["profiles"], env)
        assert done.returncode == 0, done.stderr
        chosen = [line for line in done.stdout.splitlines() if line.startswith("* ")]
        assert chosen and chosen[0].split()[1] == expected, (scenario, done.stdout)


def test_profiles_says_how_the_profile_was_chosen_and_never_credits_nvml_without_it(libdir, fake_bin, tmp_path):
    auto = tmp_path / "auto.yaml"
    auto.write_text("profile: auto\n")
    named = tmp_path / "named.yaml"
    named.write_text("profile: pcie-1gpu\n")
    dgx_bus = write_pci_tree(tmp_path / "dgx", DGX_H100_BUS, NVSWITCHES)
    no_bus = write_pci_tree(tmp_path / "none", [])
    for scenario, sysfs, config, expected in (
            ("dgx-h100", dgx_bus, auto, "dgx-h100, matched by the GPUs NVML reports: 8 x NVIDIA H100 80GB HBM3"),
            ("seven-of-eight", no_bus, auto, "derived-h100-sxm5-80gb, derived from the GPU SKU table: no profile "
                                             "matches the GPUs NVML reports, 7 x NVIDIA H100 80GB HBM3"),
            ("driver-mismatch", dgx_bus, auto, "generic, the default: NVML could not be read ("),
            ("dgx-h100", dgx_bus, named, f"pcie-1gpu, named in {named}")):
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config), GPUCHECK_SYSFS_ROOT=str(sysfs))
        done = run_gpucheck(["profiles"], env)
        assert done.returncode == 0, done.stderr
        footer = next(line for line in done.stdout.splitlines() if line.startswith("* = "))
        assert footer.startswith(f"* = the profile this node gets: {expected}"), (scenario, footer)
        marked = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("* ") and line[2] != "="]
        assert marked == [expected.split(",")[0]], (scenario, done.stdout)
        if scenario == "driver-mismatch":
            assert footer.endswith("so no GPU was matched") and "NVML reports" not in footer, footer
