"""`gpucheck node` under NVML faults: each case injects one fault through a scenario for the fake
libnvidia-ml.so.1 (a `fail`/`hang` rule, a lost GPU, a PCI tree that disagrees with NVML) and runs the
real agent as a separate process. Each asserts the verdict of the check that needs the faulty field,
the GPU it names, that every other GPU check still passes, the exit code, and no traceback.

The rule under test (node/per_gpu.py): a field NVML could not read is never a pass and never a made-up
value; it is `error` naming the GPU, the field, the call and the NVML error, `fail` for the errors NVIDIA
documents as hardware trouble; a GPU that is lost or answers nothing right fails gpu.count; a hung call
costs only the checks that need it; a GPU on the PCI bus that NVML does not show fails gpu.count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree
from support import TEST_PROFILES, by_check, report_of, run_gpucheck

CI_PROFILE = str(TEST_PROFILES / "dgx-h100-ci.yaml")
BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
       "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
NVSWITCHES = [(f"0000:{bus}:00.0", "0x10de", "0x068000") for bus in ("05", "06", "07", "08")]
QUIET_DMESG = "[    0.000000] Linux version 6.1.0-18-amd64\n"
UNKNOWN = "NVML_ERROR_UNKNOWN (Unknown Error)"


def label(gpu: int) -> str:
    return f"GPU{gpu} ({BUS[gpu]})"


@dataclass
class Case:
    id: str
    scenario: str | list[str]  # a scenario's name, or lines added to the healthy dgx-h100 scenario
    verdicts: dict[str, tuple[str, str]]  # check -> (status, exact reason)
    exit: int
    args: list[str] = field(default_factory=list)
    profile: str | None = CI_PROFILE  # None: chosen automatically (node.yaml says auto)
    bus: list[str] = field(default_factory=lambda: list(BUS))
    vfio_bus: list[str] = field(default_factory=list)  # GPUs on the bus bound to vfio-pci (given to VMs)
    extra_pci: list[tuple[str, str, str]] = field(default_factory=lambda: list(NVSWITCHES))
    chosen: str | None = None  # the profile the report must name


def read_error(gpu: int, field_name: str, call: str, error: str = UNKNOWN) -> str:
    return f"{label(gpu)}: {field_name} not read: {call} answered {error}"


def fail_rule(call: str, gpu: int, code: str = "UNKNOWN") -> list[str]:
    return [f"fail = {call}@gpu{gpu} {code}"]


POWER = "NVML_ERROR_INSUFFICIENT_POWER (a device's external power cables are not properly attached)"
LOST = "7 of 8 GPUs respond; GPU{} is lost (NVML: GPU is lost)"
ECC = "nvmlDeviceGetTotalEccErrors"
CASES = [
    # ---- every health field, read errors of each kind
    Case("ecc-counters-unknown", "ecc-read-error", {"gpu.ecc_errors": ("error", "; ".join(
        read_error(3, f"ecc_{scope}_uncorrected", ECC) for scope in ("volatile", "aggregate")))}, 3),
    Case("ecc-counters-insufficient-power", fail_rule(ECC, 3, "INSUFFICIENT_POWER"), {"gpu.ecc_errors": (
        "fail", "; ".join(read_error(3, f"ecc_{scope}_uncorrected", ECC, POWER)
                          for scope in ("volatile", "aggregate")))}, 2),
    Case("ecc-counters-gpu-lost", fail_rule(ECC, 3, "GPU_IS_LOST"), {"gpu.count": ("fail", LOST.format(3))}, 2),
    Case("ecc-mode-unknown", fail_rule("nvmlDeviceGetEccMode", 3),
         {"gpu.ecc_mode": ("error", read_error(3, "ecc_mode", "nvmlDeviceGetEccMode"))}, 3),
    Case("ecc-mode-no-permission", fail_rule("nvmlDeviceGetEccMode", 3, "NO_PERMISSION"), {"gpu.ecc_mode": (
        "error", read_error(3, "ecc_mode", "nvmlDeviceGetEccMode",
                            "NVML_ERROR_NO_PERMISSION (Insufficient Permissions)"))}, 3),
    Case("row-remap-unknown", fail_rule("nvmlDeviceGetRemappedRows", 5),
         {"gpu.row_remap": ("error", read_error(5, "remapped_rows", "nvmlDeviceGetRemappedRows"))}, 3),
    Case("row-remap-reset-required", fail_rule("nvmlDeviceGetRemappedRows", 5, "RESET_REQUIRED"), {"gpu.row_remap": (
        "fail", f"{label(5)}: remapped_rows not read: nvmlDeviceGetRemappedRows answered NVML_ERROR_RESET_REQUIRED "
                "(the GPU requires a reset before it can be used again)")}, 2),
    Case("row-remap-gpu-lost", fail_rule("nvmlDeviceGetRemappedRows", 5, "GPU_IS_LOST"),
         {"gpu.count": ("fail", LOST.format(5))}, 2),
    Case("clocks-unknown", fail_rule("nvmlDeviceGetCurrentClocksEventReasons", 7), {"gpu.clocks": (
        "error", read_error(7, "clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons"))}, 3),
    Case("clocks-corrupted-inforom", fail_rule("nvmlDeviceGetCurrentClocksEventReasons", 7, "CORRUPTED_INFOROM"),
         {"gpu.clocks": ("fail", f"{label(7)}: clocks_event_reasons not read: nvmlDeviceGetCurrentClocksEventReasons "
                                 "answered NVML_ERROR_CORRUPTED_INFOROM (infoROM is corrupted)")}, 2),
    Case("mig-unknown", fail_rule("nvmlDeviceGetMigMode", 0),
         {"gpu.mig": ("error", read_error(0, "mig_mode", "nvmlDeviceGetMigMode"))}, 3),
    Case("mig-insufficient-power", fail_rule("nvmlDeviceGetMigMode", 0, "INSUFFICIENT_POWER"), {"gpu.mig": (
        "fail", f"{label(0)}: mig_mode not read: nvmlDeviceGetMigMode answered NVML_ERROR_INSUFFICIENT_POWER "
                "(a device's external power cables are not properly attached)")}, 2),
    Case("power-usage-unknown", fail_rule("nvmlDeviceGetPowerUsage", 1),
         {"gpu.power": ("error", read_error(1, "power", "nvmlDeviceGetPowerUsage"))}, 3),
    Case("power-limit-irq-issue", fail_rule("nvmlDeviceGetEnforcedPowerLimit", 1, "IRQ_ISSUE"), {"gpu.power": (
        "fail", f"{label(1)}: power_limit not read: nvmlDeviceGetEnforcedPowerLimit answered NVML_ERROR_IRQ_ISSUE "
                "(NVIDIA kernel detected an interrupt issue with a GPU)")}, 2),
    Case("temperature-unknown", fail_rule("nvmlDeviceGetTemperature", 2),
         {"gpu.temperature": ("error", read_error(2, "temperature", "nvmlDeviceGetTemperature"))}, 3),
    Case("memory-unknown", fail_rule("nvmlDeviceGetMemoryInfo", 4),
         {"gpu.memory": ("error", read_error(4, "memory", "nvmlDeviceGetMemoryInfo"))}, 3),
    Case("nvlink-unknown", fail_rule("nvmlDeviceGetNvLinkState", 1),
         {"gpu.nvlink": ("error", read_error(1, "nvlink", "nvmlDeviceGetNvLinkState(link 0)"))}, 3),
    Case("pcie-width-unknown", fail_rule("nvmlDeviceGetCurrPcieLinkWidth", 6),
         {"gpu.pcie": ("error", read_error(6, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"))}, 3),
    Case("persistence-unknown", fail_rule("nvmlDeviceGetPersistenceMode", 0),
         {"gpu.persistence": ("error", read_error(0, "persistence_mode", "nvmlDeviceGetPersistenceMode"))}, 3),
    Case("name-unknown", fail_rule("nvmlDeviceGetName", 0),
         {"gpu.model": ("error", read_error(0, "name", "nvmlDeviceGetName"))}, 3),
    Case("pci-info-unknown", fail_rule("nvmlDeviceGetPciInfo_v3", 4),
         {"gpu.count": ("error", "GPU4: pci_bus_id not read: nvmlDeviceGetPciInfo answered " + UNKNOWN)}, 3),
    Case("driver-version-unknown", ["fail = nvmlSystemGetDriverVersion UNKNOWN"], {"gpu.driver": (
        "error", "driver_version not read: nvmlSystemGetDriverVersion answered " + UNKNOWN)}, 3),
    Case("power-error-when-the-profile-skips-power", fail_rule("nvmlDeviceGetPowerUsage", 1),
         {"gpu.power": ("error", read_error(1, "power", "nvmlDeviceGetPowerUsage"))}, 3, profile="generic"),
    # ---- GPUs that answer nothing right
    Case("gpu-unresponsive", "gpu-unresponsive", {"gpu.count": (
        "fail", "7 of 8 GPUs respond; GPU6 is lost (no NVML call about it answered (nvmlDeviceGetName: "
                "NVML_ERROR_UNKNOWN))")}, 2),
    Case("handle-unknown", fail_rule("nvmlDeviceGetHandleByIndex_v2", 6), {"gpu.count": (
        "fail", "7 of 8 GPUs respond; GPU6 is lost (nvmlDeviceGetHandleByIndex answered NVML_ERROR_UNKNOWN)")}, 2),
    Case("handle-insufficient-power", fail_rule("nvmlDeviceGetHandleByIndex_v2", 6, "INSUFFICIENT_POWER"),
         {"gpu.count": ("fail", "7 of 8 GPUs respond; GPU6 is lost (nvmlDeviceGetHandleByIndex answered "
                                "NVML_ERROR_INSUFFICIENT_POWER)")}, 2),
    Case("gpu-lost", "gpu-lost", {"gpu.count": ("fail", LOST.format(4))}, 2),
    # ---- hangs: each costs only what needs the field
    Case("hang-temperature", "hang", {"gpu.temperature": (
        "error", f"{label(2)}: temperature not read: nvmlDeviceGetTemperature hung (did not return within 2 s)")}, 3),
    Case("hang-temperature-and-ecc-errors-elsewhere",
         ["hang = nvmlDeviceGetTemperature@gpu2", "gpu.3.ecc_uncorrected_volatile = 2"], {
             "gpu.temperature": ("error", f"{label(2)}: temperature not read: nvmlDeviceGetTemperature hung "
                                          "(did not return within 2 s)"),
             "gpu.ecc_errors": ("fail", f"{label(3)}: 2 volatile uncorrected ECC error(s) since the last reset")}, 2),
    Case("hang-ecc-counters", [f"hang = {ECC}@gpu3"], {"gpu.ecc_errors": (
        "error", f"{label(3)}: ecc_volatile_uncorrected not read: {ECC} hung (did not return within 2 s); "
                 f"{label(3)}: ecc_aggregate_uncorrected not read: not asked: {ECC} hung on GPU3 before")}, 3),
    Case("hang-row-remap", ["hang = nvmlDeviceGetRemappedRows@gpu5"], {"gpu.row_remap": (
        "error", f"{label(5)}: remapped_rows not read: nvmlDeviceGetRemappedRows hung (did not return within 2 s)")},
        3),
    Case("hang-nvlink", ["hang = nvmlDeviceGetNvLinkState@gpu1"], {"gpu.nvlink": (
        "error", f"{label(1)}: nvlink not read: nvmlDeviceGetNvLinkState(link 0) hung (did not return within 2 s)")},
        3),
    Case("hang-handle", ["hang = nvmlDeviceGetHandleByIndex_v2@gpu4"], {"gpu.count": (
        "fail", "7 of 8 GPUs respond; GPU4 is lost (nvmlDeviceGetHandleByIndex did not return within 2 s)")}, 2),
    Case("hang-every-call-of-one-gpu", ["hang = *@gpu2"], {"gpu.count": (
        "fail", "7 of 8 GPUs respond; GPU2 is lost (nvmlDeviceGetHandleByIndex did not return within 2 s)")}, 2),
    Case("hang-shutdown", "hang-shutdown", {"gpu.driver": (
        "warn", "nvmlShutdown hung (did not return within 2 s) after every GPU was read: the driver may be wedged")},
        1),
    # ---- the PCI bus against NVML
    Case("seven-of-eight-generic-profile", "seven-of-eight", {"gpu.count": (
        "fail", "1 of 8 GPUs on the PCI bus not visible to NVML: 0000:db:00.0 (driver nvidia)")}, 2, profile="generic"),
    Case("seven-of-eight-auto-profile", "seven-of-eight", {"gpu.count": (
        "fail", "7 GPUs visible, 8 expected; 1 of 8 GPUs on the PCI bus not visible to NVML: "
                "0000:db:00.0 (driver nvidia)")}, 2, args=["--only", "gpu.count"], profile=None, chosen="dgx-h100"),
    Case("gpu-lost-auto-profile", "gpu-lost", {"gpu.count": ("fail", LOST.format(4))}, 2,
         args=["--only", "gpu.count"], profile=None, bus=[], chosen="dgx-h100"),
    Case("extra-gpu-on-the-bus", "dgx-h100", {"gpu.count": (
        "fail", "1 of 9 GPUs on the PCI bus not visible to NVML: 0000:e0:00.0 (driver vfio-pci)")}, 2,
         vfio_bus=["0000:e0:00.0"]),
    Case("non-gpu-devices-on-the-bus", "dgx-h100", {}, 0,
         extra_pci=[*NVSWITCHES, ("0000:18:00.1", "0x10de", "0x040300"),  # an NVIDIA HDMI audio function
                    ("0000:03:00.0", "0x1a03", "0x030000")]),  # the BMC's ASPEED VGA
    Case("single-h100-auto-profile", "h100-1gpu", {}, 0, args=["--only", "gpu"], profile=None, bus=["0000:00:06.0"],
         extra_pci=[], chosen="h100-1gpu"),
]


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_library()


def scenario_file(case: Case, tmp_path: Path) -> Path:
    if isinstance(case.scenario, str):
        return scenario_path(case.scenario)
    path = tmp_path / f"{case.id}.scn"
    path.write_text(f"include = {scenario_path('dgx-h100')}\n" + "\n".join(case.scenario) + "\n")
    return path


def run_case(case: Case, libdir: Path, fake_bin, tmp_path: Path) -> tuple[int, dict, str]:
    fake_bin.add("dmesg", QUIET_DMESG)
    sysfs = write_pci_tree(tmp_path / "sys", case.bus, case.extra_pci)
    write_pci_tree(sysfs, case.vfio_bus, driver="vfio-pci")
    (tmp_path / "node.yaml").write_text("profile: auto\n")
    env = env_for(scenario_file(case, tmp_path), libdir)
    env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(tmp_path / "node.yaml"), GPUCHECK_SYSFS_ROOT=str(sysfs))
    profile = ["--profile", case.profile] if case.profile else []
    done = run_gpucheck(["node", *profile, "--format", "json", "--timeout", "2", *(case.args or ["--only", "gpu"])],
                        env)
    return done.returncode, report_of(done), done.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault_gives_its_verdict_on_its_gpu_only(case: Case, libdir, fake_bin, fabric_manager, tmp_path):
    code, report, stderr = run_case(case, libdir, fake_bin, tmp_path)
    assert "Traceback" not in stderr, stderr
    checks = by_check(report)
    got = {c: (r["status"], r["reason"]) for c, r in checks.items() if r["status"] not in ("pass", "skip")}
    assert got == case.verdicts
    for check, (status, _) in case.verdicts.items():
        assert status in ("pass", "warn") or checks[check]["remediation"], checks[check]
    assert code == case.exit
    if case.chosen:
        assert report["profile"] == case.chosen


def test_hung_calls_on_every_gpu_stop_at_the_budget_and_keep_what_was_read(libdir, fake_bin, fabric_manager,
                                                                          tmp_path):
    """Temperature hangs on all GPUs: after 4 hung calls NVML is asked nothing more; GPUs 0-2 keep every
    other field, GPU3's later fields and GPUs 4-7 are `error` (not asked), nothing passes on made-up values."""
    case = Case("hang-all", ["hang = nvmlDeviceGetTemperature"], {}, 3)
    began = time.monotonic()
    code, report, stderr = run_case(case, libdir, fake_bin, tmp_path)
    assert time.monotonic() - began < 60 and "Traceback" not in stderr
    checks = by_check(report)
    assert code == 3
    temperature = checks["gpu.temperature"]
    assert temperature["status"] == "error"
    # each finding said once, for the GPUs that share it
    assert "4 GPUs (GPU0-3): temperature not read: nvmlDeviceGetTemperature hung" in temperature["reason"]
    assert "4 GPUs (GPU4-7): temperature not read: not asked: NVML stopped answering (4 calls hung)" in \
        temperature["reason"]
    assert checks["gpu.ecc_errors"]["status"] == "error"
    assert "GPU3" not in checks["gpu.ecc_errors"]["reason"] and "GPU4" in checks["gpu.ecc_errors"]["reason"]
    assert checks["gpu.pcie"]["status"] == "error" and "GPU3" in checks["gpu.pcie"]["reason"]
    assert "GPU2" not in checks["gpu.pcie"]["reason"]
    # NVML counted 8; GPUs 4-7 were never asked their bus id, so they cannot be matched with the PCI bus
    assert checks["gpu.count"]["status"] == "error" and checks["gpu.count"]["measured"] == 8
    assert checks["gpu.driver"]["status"] == "pass"  # no nvmlShutdown asked of an NVML that stopped answering


def test_a_gpu_on_which_two_calls_hang_fails_count_and_costs_only_its_later_fields(libdir, fake_bin,
                                                                                   fabric_manager, tmp_path):
    case = Case("hang-two", [f"hang = {ECC}@gpu3", "hang = nvmlDeviceGetTemperature@gpu3"], {}, 2)
    code, report, stderr = run_case(case, libdir, fake_bin, tmp_path)
    assert "Traceback" not in stderr
    checks = by_check(report)
    assert code == 2
    assert checks["gpu.count"]["status"] == "fail"
    assert checks["gpu.count"]["reason"] == (f"{label(3)} stopped answering NVML ({ECC} and "
                                             "nvmlDeviceGetTemperature hung)")
    not_passing = {c for c, r in checks.items() if r["status"] not in ("pass", "skip")}
    # read before the second hang: row remap, clocks; asked after it: nothing more about GPU3 (its NUMA node
    # included, so gpu.nic_affinity says so although this profile does not judge affinity)
    assert not_passing == {"gpu.count", "gpu.ecc_errors", "gpu.temperature", "gpu.power", "gpu.pcie", "gpu.nvlink",
                           "gpu.nic_affinity"}
    for check in not_passing - {"gpu.count"}:
        assert checks[check]["status"] == "error" and label(3) in checks[check]["reason"], checks[check]
        assert all(f"GPU{i}" not in checks[check]["reason"] for i in range(8) if i != 3)
    assert "power not read: not asked: nvmlDeviceGetTotalEccErrors, nvmlDeviceGetTemperature hung on GPU3 before" \
        in checks["gpu.power"]["reason"]


def test_a_hung_gpu_count_is_an_error_within_the_call_limit_not_a_hung_agent(libdir, fake_bin, fabric_manager,
                                                                             tmp_path):
    """Without the count nothing about a GPU can be read: a wedged driver, so every NVML check fails (the node is
    drained) naming the call, and the agent still reports (the cluster's lab test relies on this to tell a hung
    GPU from a hung host)."""
    case = Case("hang-count", ["hang = nvmlDeviceGetCount_v2"], {}, 2)
    began = time.monotonic()
    code, report, stderr = run_case(case, libdir, fake_bin, tmp_path)
    assert time.monotonic() - began < 60 and "Traceback" not in stderr
    assert code == 2
    checks = by_check(report)
    for check in ("gpu.count", "gpu.temperature", "gpu.ecc_errors"):
        assert checks[check]["status"] == "fail", checks[check]
        assert "NVML call nvmlDeviceGetCount did not return within 2 s" in checks[check]["reason"], checks[check]
