"""Issue 19 section 1: a node no profile matches is judged against a profile derived from its GPUs' SKU entries
(agent/gpucheck/node/derived_profile.py): memory, compute capability, ECC, persistence, power, PCIe and NVLink
by form factor, each threshold with its source; a site's own profile still wins; GPUs of two SKUs are said
plainly and judged per GPU. End to end through the fake NVML library, and on the real H100's collected facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucheck import profiles, skus
from gpucheck.node import gpu, health, links
from gpucheck.node.derived_profile import derive, labels
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree_for
from support import MEASURED, ROOT, by_check, report_of, run_gpucheck

TABLE = skus.load(ROOT / "checks" / skus.SKU_TABLE_FILE)
GENERIC = profiles.load(profiles.DEFAULT_PROFILE)
QUIET_DMESG = "[    2.114000] nvidia: loading out-of-tree module\n"
PASSIVE = ["--skip", "libs", "frameworks", "stack", "host", "ib"]  # no stack or IB on this machine to judge

# scenario -> (the SKU it is, the power limit a capped GPU is set to in mW: less than half its rating)
SCENARIOS = {
    "h200-1gpu": ("h200-sxm-141gb", 300_000),
    "l40s-4gpu": ("l40s", 150_000),  # the case: capped at 150 of 350 W
    "a100-pcie-8gpu": ("a100-pcie-80gb", 130_000),
    "h100-pcie-8gpu": ("h100-pcie-80gb", 150_000),
    "h200-nvl-8gpu": ("h200-nvl-141gb", 260_000),
}
JUDGED = ("gpu.memory", "gpu.compute_capability", "gpu.power", "gpu.ecc_mode", "gpu.persistence", "gpu.pcie")


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_library()


@pytest.fixture
def agent_env(libdir, fake_bin, tmp_path):
    """The environment `gpucheck` runs in on the machine a scenario file describes (auto-selection)."""
    fake_bin.add("dmesg", QUIET_DMESG)
    config = tmp_path / "node.yaml"
    config.write_text("profile: auto\n")

    def make(scenario: Path, profiles_dir: Path | None = None) -> dict[str, str]:
        env = env_for(scenario, libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config),
                   GPUCHECK_SYSFS_ROOT=str(write_pci_tree_for(scenario, tmp_path / "sys")))
        if profiles_dir:
            env["GPUCHECK_PROFILES_DIR"] = str(profiles_dir)
        return env

    return make


@pytest.fixture
def node(agent_env):
    """Run `gpucheck node --format json` on a scenario file; returns (exit code, report)."""

    def run(scenario: Path, *args: str, profiles_dir: Path | None = None):
        done = run_gpucheck(["node", "--format", "json", *args], agent_env(scenario, profiles_dir))
        return done.returncode, report_of(done)

    return run


def with_lines(tmp_path: Path, base: str, *lines: str) -> Path:
    """A scenario that is `base` with some GPUs changed (later lines win)."""
    path = tmp_path / f"{base}-changed.scn"
    path.write_text("\n".join([f"include = {scenario_path(base)}", *lines]) + "\n")
    return path


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_healthy_node_no_profile_matches_is_judged_fully_against_its_sku(node, scenario):
    sku_id = SCENARIOS[scenario][0]
    code, report = node(scenario_path(scenario), *PASSIVE)
    checks = by_check(report)
    assert report["profile"] == f"derived-{sku_id}"
    assert {c: checks[c]["status"] for c in JUDGED} == dict.fromkeys(JUDGED, "pass")  # judged, not skipped
    assert checks["gpu.model"]["status"] == "pass" and f"SKU {sku_id}" in checks["gpu.model"]["reason"]
    sku = TABLE.get(sku_id)
    assert checks["gpu.compute_capability"]["expected"] == f">= {sku.compute_capability}"
    assert checks["gpu.power"]["expected"] == f"limit >= {sku.power_limit_W:g} W"
    assert checks["gpu.pcie"]["expected"]["gen_min"] == sku.pcie_gen
    assert report["thresholds"]["sources"]["gpu.power_limit_W_min"].startswith(f"SKU {sku_id}: power_limit_W")
    assert code == 0, {c: r["reason"] for c, r in checks.items() if r["status"] not in ("pass", "skip")}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_persistence_off_ecc_off_and_a_power_cap_each_fail_on_its_own_gpu(node, tmp_path, scenario):
    sku_id, capped_mW = SCENARIOS[scenario]
    count = 1 if scenario == "h200-1gpu" else 4
    off, no_ecc, capped = (0, 0, 0) if count == 1 else (1, 2, 3)
    code, report = node(with_lines(tmp_path, scenario, f"gpu.{off}.persistence_mode = off",
                                   f"gpu.{no_ecc}.ecc_mode = off", f"gpu.{no_ecc}.ecc_mode_pending = off",
                                   f"gpu.{capped}.enforced_power_limit_mW = {capped_mW}"), *PASSIVE)
    checks = by_check(report)
    assert report["profile"] == f"derived-{sku_id}"
    for check, index, words in (("gpu.persistence", off, "persistence mode off"),
                                ("gpu.ecc_mode", no_ecc, "ECC disabled"),
                                ("gpu.power", capped, f"power capped at {capped_mW // 1000} W < "
                                                      f"{TABLE.get(sku_id).power_limit_W:g} W")):
        result = checks[check]
        assert result["status"] == "fail", result
        assert result["reason"].startswith(f"GPU{index} (") and words in result["reason"]
        assert result["reason"].count("GPU") == 1  # no other GPU named
    assert code == 2


def test_gpus_of_two_skus_are_said_plainly_and_each_judged_against_its_own_entry(node, tmp_path):
    a10 = [f"gpu.{i}.{key} = {value}" for i in (2, 3) for key, value in (
        ("name", "NVIDIA A10"), ("pci_device_id", "0x223610DE"), ("compute_capability", "8.6"),
        ("memory_total_bytes", 23028 << 20))]
    # 150 W passes an A10 (its rating) and would fail an L40S; 200 W fails an L40S; 140 W fails an A10
    caps = ["gpu.0.enforced_power_limit_mW = 200000", "gpu.2.enforced_power_limit_mW = 150000",
            "gpu.3.enforced_power_limit_mW = 140000"]
    code, report = node(with_lines(tmp_path, "l40s-4gpu", *a10, *caps), *PASSIVE)
    checks = by_check(report)
    assert report["profile"] == "derived-a10+l40s"
    model = checks["gpu.model"]
    assert model["status"] == "warn"
    assert "GPU0-1 'NVIDIA L40S' (SKU l40s); GPU2-3 'NVIDIA A10' (SKU a10)" in model["reason"]
    power = checks["gpu.power"]
    assert power["status"] == "fail"
    assert power["reason"] == ("GPU0 (00000000:01:00.0): power capped at 200 W < 350 W; "
                               "GPU3 (00000000:C1:00.0): power capped at 140 W < 150 W")
    assert power["expected"]["GPU2"] == "limit >= 150 W" and power["expected"]["GPU0"] == "limit >= 350 W"
    assert checks["gpu.compute_capability"]["status"] == "pass"
    assert checks["gpu.compute_capability"]["expected"]["GPU3"] == ">= 8.6"
    assert report["thresholds"]["per_gpu"]["GPU3"]["power_limit_W_min"] == 150
    assert code == 2


def test_a_site_profile_that_matches_still_wins(node, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "l40s-site.yaml").write_text("name: l40s-site\ninherits: generic\nmatch:\n  gpu_name_regex: L40S\n"
                                         "gpu:\n  power_limit_W_min: 100\n")
    code, report = node(with_lines(tmp_path, "l40s-4gpu", "gpu.3.enforced_power_limit_mW = 150000"), *PASSIVE,
                        profiles_dir=site)
    assert report["profile"] == "l40s-site"
    assert by_check(report)["gpu.power"]["status"] == "pass"  # the site capped its cards at 150 W on purpose
    assert "sources" not in report["thresholds"]
    assert code == 0


def test_a_pcie_card_with_a_bridge_must_have_every_nvlink_up_and_without_one_none(node, tmp_path):
    code, report = node(with_lines(tmp_path, "h100-pcie-8gpu", "gpu.5.nvlink_down = 3 4 5"), "--only", "gpu.nvlink")
    nvlink = by_check(report)["gpu.nvlink"]
    assert nvlink["status"] == "fail" and code == 2
    assert nvlink["reason"].startswith("GPU5 (") and "9 of 12 NVLinks up (down: 3, 4, 5)" in nvlink["reason"]
    assert "a bridge is fitted" in nvlink["reason"]
    code, report = node(scenario_path("h100-pcie-8gpu"), "--only", "gpu.nvlink")  # no bridges: every link inactive
    assert by_check(report)["gpu.nvlink"]["status"] == "pass" and code == 0
    assert by_check(report)["gpu.nvlink"]["measured"] == {f"GPU{i}": 0 for i in range(8)}


def test_profiles_shows_the_derived_thresholds_and_where_each_came_from(agent_env):
    done = run_gpucheck(["profiles"], agent_env(scenario_path("l40s-4gpu")))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "* = the profile this node gets: derived-l40s, derived from the GPU SKU table" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("  gpu.", "  burnin."))}
    memory = rows["gpu.memory_per_gpu_MiB_min"]
    assert "45711" in memory and "SKU l40s: 0.93 x memory_MiB 49152" in memory
    assert "350" in rows["gpu.power_limit_W_min"] and "SKU l40s: power_limit_W" in rows["gpu.power_limit_W_min"]
    assert "PCI bus: 4 NVIDIA GPUs" in rows["gpu.count"]
    assert "the generic profile" in rows["burnin.gemm_fraction_min"]


def test_a_broken_sku_table_is_one_line_and_exit_3(agent_env, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / skus.SKU_TABLE_FILE).write_text("skus: [1, 2]\n")
    done = run_gpucheck(["node"], agent_env(scenario_path("l40s-4gpu"), site))
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "none can be derived" in done.stderr
    assert f"{site / skus.SKU_TABLE_FILE}" in done.stderr and "Traceback" not in done.stderr


# ------------------------------------------------------------------ derivation, from facts

def facts_of(*gpus: tuple[str, int], count: int | None = None, nvswitches: int = 0) -> tuple[dict, dict]:
    """(NVML facts, PCI facts) of GPUs given as (NVML name, PCI device id), one after another on the bus."""
    nvml = {"gpus": [{"index": i, "name": name, "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0"}
                     for i, (name, _) in enumerate(gpus)]}
    pci = {"gpus": [{"address": f"0000:{0x10 + i:02x}:00.0", "device": f"0x{device:04x}"}
                    for i, (_, device) in enumerate(gpus)][:count],
           "nvswitches": [{"address": f"0000:{0x80 + i:02x}:00.0", "device": "0x22a3"} for i in range(nvswitches)]}
    return nvml, pci


def test_one_sku_gives_node_thresholds_and_the_bus_gives_the_count():
    profile = derive(*facts_of(*[("NVIDIA H100 PCIe", 0x2331)] * 8), TABLE, GENERIC)
    gpu_section = profile.data["gpu"]
    assert gpu_section["count"] == 8 and gpu_section["ecc_required"] is True
    assert gpu_section["nvlink_links_per_gpu"] == 12 and gpu_section["nvlink_optional"] is True
    assert "nvswitch" not in gpu_section
    assert profile.data["per_gpu"] == {}
    assert profile.data["burnin"] == GENERIC.data["burnin"]  # what no SKU says: the generic profile's


def test_sxm_modules_need_every_link_and_an_nvswitch_on_the_bus_needs_fabric_manager():
    four = derive(*facts_of(*[("NVIDIA H100 80GB HBM3", 0x2330)] * 4), TABLE, GENERIC)
    assert four.data["gpu"]["nvlink_links_per_gpu"] == 18 and "nvlink_optional" not in four.data["gpu"]
    assert "nvswitch" not in four.data["gpu"]  # an HGX 4-GPU board: links straight between the modules
    eight = derive(*facts_of(*[("NVIDIA H100 80GB HBM3", 0x2330)] * 8, nvswitches=4), TABLE, GENERIC)
    assert eight.data["gpu"]["nvswitch"] is True
    assert eight.data["sources"]["gpu.nvswitch"] == "PCI bus: 4 NVSwitches (Fabric Manager must run)"
    one = derive(*facts_of(("NVIDIA H200", 0x2335)), TABLE, GENERIC)
    assert one.get("gpu", "nvlink_links_per_gpu") is None
    assert "no NVLink peer" in one.data["sources"]["gpu.nvlink_links_per_gpu"]


def test_a_gpu_the_table_does_not_know_is_judged_for_health_only_and_none_known_is_no_derived_profile():
    assert derive(*facts_of(("NVIDIA Hypothetical X1", 0x9999)), TABLE, GENERIC) is None
    profile = derive(*facts_of(("NVIDIA L40S", 0x26B9), ("NVIDIA Hypothetical X1", 0x9999)), TABLE, GENERIC)
    assert profile.name == "derived-l40s"
    assert profile.data["skus"] == {"GPU0": "l40s", "GPU1": None}
    assert profile.for_gpu({"index": 0}, "power_limit_W_min") == 350
    assert profile.for_gpu({"index": 1}, "power_limit_W_min") is None
    assert "GPU1: no SKU entry: not judged" in profile.data["sources"]["gpu.power_limit_W_min"]


def test_when_nvml_names_no_gpu_the_bus_still_gives_the_profile():
    """NVML gone or every GPU lost: the bus's device ids still say the node is an 8 x H100 SXM5 one, so it is judged
    against that (8 GPUs expected, none answering), never against the generic profile."""
    nvml, pci = facts_of(*[("NVIDIA H100 80GB HBM3", 0x2330)] * 8, nvswitches=4)
    nvml["gpus"] = []
    profile = derive(nvml, pci, TABLE, GENERIC)
    assert profile.name == "derived-h100-sxm5-80gb" and profile.data["gpu"]["count"] == 8
    assert profile.data["skus"]["PCI 0000:10:00.0"] == "h100-sxm5-80gb" and len(profile.data["skus"]) == 8
    result = gpu.count({"nvml": nvml, "pci_gpus": pci}, profile)
    assert result.status.value == "fail", result.reason


def test_without_the_pci_bus_the_count_is_not_judged():
    nvml, _ = facts_of(("NVIDIA L40S", 0x26B9))
    profile = derive(nvml, None, TABLE, GENERIC)
    assert profile.name == "derived-l40s" and "count" not in profile.data["gpu"]
    assert profile.data["sources"]["gpu.count"].startswith("not judged")


def test_labels_are_runs():
    assert labels(["GPU0", "GPU1", "GPU2", "GPU3", "GPU6"]) == "GPU0-3, GPU6"
    assert labels(["GPU7"]) == "GPU7"


def test_the_real_h100_is_judged_against_its_derived_profile():
    """tests/fixtures/measured/h100-sxm-80gb-driver580/nvml-collector-facts.json: what the agent's NVML collector
    read from the real H100 (one SXM5 in a VM). Every SKU-derived threshold passes on it."""
    nvml = json.loads((MEASURED / "h100-sxm-80gb-driver580" / "nvml-collector-facts.json").read_text())
    pci = {"gpus": [{"address": "0000:00:06.0", "device": "0x2330"}]}  # nvidia-smi-q-idle.txt: 0x233010DE
    profile = derive(nvml, pci, TABLE, GENERIC)
    assert profile.name == "derived-h100-sxm5-80gb"
    facts = {"nvml": nvml, "pci_gpus": pci}
    verdicts = {fn.__name__: fn(facts, profile) for fn in (gpu.count, gpu.model, gpu.compute_capability, gpu.memory,
                                                           gpu.persistence, health.ecc_mode, health.power, links.pcie)}
    assert {name: r.status.value for name, r in verdicts.items()} == dict.fromkeys(verdicts, "pass"), \
        {name: r.reason for name, r in verdicts.items()}
    assert verdicts["memory"].expected == ">= 80743 MiB"  # 0.99 x 81559, the table's figure from this GPU


def test_a_gpu_name_nvml_did_not_give_is_an_error_even_when_the_bus_names_its_sku():
    nvml, pci = facts_of(*[("NVIDIA L40S", 0x26B9)] * 2)
    nvml["gpus"][1].update(name=None, errors={"name": {"call": "nvmlDeviceGetName", "error": "NVML_ERROR_UNKNOWN",
                                                        "text": "Unknown Error"}})
    profile = derive(nvml, pci, TABLE, GENERIC)
    assert profile.data["skus"] == {"GPU0": "l40s", "GPU1": "l40s"}  # matched by its PCI device id
    result = gpu.model({"nvml": nvml}, profile)
    assert result.status.value == "error" and result.reason.startswith("GPU1 (") and "name not read" in result.reason


def test_the_real_h200_was_judged_against_the_profile_its_sku_entry_gives():
    """tests/fixtures/measured/h200-141gb-driver580/gpucheck-node-passive-derived.json: `gpucheck node` on a real
    H200 (one SXM module in a VM, PCI device 0x2335 in nvidia-smi-q-idle.txt), 2026-11-27. The profile it derived
    there is the one derive() gives here, and every SKU-derived check passed on that healthy GPU."""
    report = json.loads((MEASURED / "h200-141gb-driver580" / "gpucheck-node-passive-derived.json").read_text())
    nvml, pci = facts_of(("NVIDIA H200", 0x2335))
    profile = derive(nvml, pci, TABLE, GENERIC)
    assert report["profile"] == profile.name == "derived-h200-sxm-141gb"
    assert report["thresholds"]["gpu"] == profile.data["gpu"]
    assert report["thresholds"]["gpu"]["memory_per_gpu_MiB_min"] == 142333  # 0.99 x the table's 143771 MiB
    statuses = {r["check"]: r["status"] for r in report["results"]}
    assert {check: statuses[check] for check in JUDGED} == dict.fromkeys(JUDGED, "pass")
    assert report["exit_code"] == 0
