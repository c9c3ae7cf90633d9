"""Each check's evaluate() on hand-made facts: a passing case and a failing case per check id.

The subprocess tests in test_node_fake_nvml.py prove the same verdicts end to end through the fake
NVML library; these cover the facts no fake can produce here (NUMA nodes, RAM size, tool output).
"""

from __future__ import annotations

import copy
import re

import pytest

from gpucheck import drain_rule
from gpucheck.model import Status
from gpucheck.node import CollectError, bandwidth, gpu, health, host, infiniband, kernel_log, links, per_gpu
from gpucheck.node.burnin import judge, p2p
from gpucheck.profiles import load

H100 = load("dgx-h100")


def healthy_gpu(index: int) -> dict:
    return {
        "index": index, "lost": False, "errors": {}, "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0", "memory_total_MiB": 81559,
        "compute_capability": "9.0", "persistence_mode": True, "mig_mode": False, "mig_mode_pending": False,
        "ecc_mode": True, "ecc_errors": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0,
                                         "volatile_corrected": 0, "aggregate_corrected": 3},
        "retired_pages": None, "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                                 "failure": False},
        "clocks_event_reasons": ["gpu_idle"], "temperature_C": 34, "temperature_slowdown_C": 87,
        "power_W": 71.5, "power_limit_W": 700.0,
        "pcie": {"gen": 5, "gen_max": 5, "width": 16, "width_max": 16},
        "nvlink": {"links": 18, "up": 18, "down": []}, "numa_node": 0 if index < 4 else 1,
    }


def nvml_facts() -> dict:
    return {"driver_version": "535.183.01", "cuda_driver_version": "12.2",
            "gpus": [healthy_gpu(i) for i in range(8)]}


def broken(mutate) -> dict:
    facts = nvml_facts()
    mutate(facts["gpus"][3])
    return {"nvml": facts}


GPU_CASES = [
    (gpu.count, lambda g: g.update(lost=True), Status.FAIL, "GPU3 is lost"),
    (gpu.model, lambda g: g.update(name="NVIDIA A100-SXM4-80GB"), Status.FAIL, "GPU3"),
    (gpu.compute_capability, lambda g: g.update(compute_capability="8.0"), Status.FAIL, "8.0 < 9.0"),
    (gpu.memory, lambda g: g.update(memory_total_MiB=40536), Status.FAIL, "40536 MiB"),
    (gpu.persistence, lambda g: g.update(persistence_mode=False), Status.FAIL, "persistence mode off"),
    (gpu.mig, lambda g: g.update(mig_mode=True), Status.FAIL, "MIG enabled"),
    (health.ecc_mode, lambda g: g.update(ecc_mode=False), Status.FAIL, "ECC disabled"),
    (health.ecc_errors, lambda g: g["ecc_errors"].update(volatile_uncorrected=2), Status.FAIL, "2 volatile"),
    (health.row_remap, lambda g: g["remapped_rows"].update(pending=True, uncorrectable=4), Status.FAIL, "pending"),
    (health.row_remap, lambda g: g["remapped_rows"].update(failure=True), Status.FAIL, "no spare rows"),
    (health.clocks, lambda g: g.update(clocks_event_reasons=["hw_slowdown"]), Status.FAIL, "hw_slowdown"),
    (health.clocks, lambda g: g.update(clocks_event_reasons=["sw_thermal_slowdown"]), Status.WARN, "thermal"),
    (health.temperature, lambda g: g.update(temperature_C=88), Status.FAIL, "slowdown threshold"),
    (health.temperature, lambda g: g.update(temperature_C=84), Status.WARN, "within 5 °C"),
    (health.power, lambda g: g.update(power_limit_W=500.0), Status.FAIL, "capped at 500 W"),
    (links.pcie, lambda g: g.update(pcie={"gen": 3, "gen_max": 5, "width": 8, "width_max": 16}), Status.FAIL,
     "x8 of x16"),
    (links.pcie, lambda g: g.update(pcie={"gen": 1, "gen_max": 5, "width": 16, "width_max": 16}), Status.WARN,
     "Gen1 of Gen5"),
    (links.nvlink, lambda g: g.update(nvlink={"links": 18, "up": 16, "down": [4, 5]}), Status.FAIL, "down: 4, 5"),
]


@pytest.mark.parametrize("evaluate,mutate,status,words", GPU_CASES,
                         ids=[f"{c[0].__module__.split('.')[-1]}.{c[0].__name__}-{c[2].value}" for c in GPU_CASES])
def test_gpu_check_passes_when_healthy_and_names_the_faulty_gpu(evaluate, mutate, status, words):
    assert evaluate({"nvml": nvml_facts()}, H100).status == Status.PASS
    result = evaluate(broken(mutate), H100)
    assert result.status == status, result
    assert words in result.reason
    if evaluate is not gpu.count:
        assert "GPU3" in result.reason and "GPU2" not in result.reason
    assert result.remediation


def test_driver_older_than_the_stack_needs_fails():
    facts = {"nvml": nvml_facts()}
    assert gpu.driver(facts, H100).status == Status.PASS
    facts["nvml"].update(driver_version="525.147.05", cuda_driver_version="12.0")
    result = gpu.driver(facts, H100)
    assert result.status == Status.FAIL
    assert "525.147.05 older than 535.54.03" in result.reason and "CUDA 12.0" in result.reason


def test_count_fails_with_seven_of_eight():
    facts = {"nvml": nvml_facts()}
    facts["nvml"]["gpus"].pop()
    result = gpu.count(facts, H100)
    assert (result.status, result.measured, result.expected) == (Status.FAIL, 7, 8)


def test_retired_pages_pending_fails_and_unsupported_skips():
    v100 = load("dgx1-v100")
    facts = {"nvml": nvml_facts()}
    assert health.retired_pages(facts, v100).status == Status.SKIP  # H100s use row remapping
    for g in facts["nvml"]["gpus"]:
        g["retired_pages"] = {"single_bit": 1, "double_bit": 0, "pending": False}
    assert health.retired_pages(facts, v100).status == Status.PASS
    facts["nvml"]["gpus"][6]["retired_pages"] = {"single_bit": 2, "double_bit": 1, "pending": True}
    result = health.retired_pages(facts, v100)
    assert result.status == Status.FAIL and "GPU6" in result.reason and "pending" in result.reason
    facts["nvml"]["gpus"][6]["retired_pages"] = {"single_bit": 50, "double_bit": 11, "pending": False}
    assert "61 retired pages > 60" in health.retired_pages(facts, v100).reason


def test_fabric_manager_required_on_nvswitch_only():
    assert links.fabric_manager({"fabric_manager": {"running": True, "pid": 42}}, H100).status == Status.PASS
    result = links.fabric_manager({"fabric_manager": {"running": False, "pid": None}}, H100)
    assert result.status == Status.FAIL and "nv-fabricmanager is not running" in result.reason
    assert links.fabric_manager({"fabric_manager": {"running": False}}, load("dgx1-v100")).status == Status.SKIP


def test_nic_affinity_warns_for_a_gpu_on_a_numa_node_without_nic():
    nics = {"nic_numa": {"nics": {f"mlx5_{i}": 0 if i < 4 else 1 for i in range(8)}}}
    assert links.nic_affinity({"nvml": nvml_facts(), **nics}, H100).status == Status.PASS
    facts = broken(lambda g: g.update(numa_node=3))
    result = links.nic_affinity({**facts, **nics}, H100)
    assert result.status == Status.WARN and "GPU3" in result.reason and "NUMA node 3" in result.reason
    none = links.nic_affinity({"nvml": nvml_facts(), "nic_numa": {"nics": {}}}, H100)
    assert none.status == Status.FAIL and "no RDMA device" in none.reason


def xid_log(events: list[dict], fallen: list[str] | None = None) -> dict:
    return {"kernel_log": {"events": events, "fallen_off_bus": fallen or [], "counts": {}}}


def test_xid_grades_by_severity():
    assert kernel_log.xid(xid_log([]), H100).status == Status.PASS
    app = kernel_log.xid(xid_log([{"xid": 13, "pci": "0000:18:00", "severity": "info"}]), H100)
    assert app.status == Status.PASS and "Xid 13" in app.reason
    fatal = kernel_log.xid(xid_log([{"xid": 79, "pci": "0000:1b:00", "severity": "fatal"}] * 2), H100)
    assert fatal.status == Status.FAIL and "Xid 79 on 0000:1b:00 x2" in fatal.reason
    warn = kernel_log.xid(xid_log([{"xid": 92, "pci": "0000:18:00", "severity": "warn"}]), H100)
    assert warn.status == Status.WARN
    fallen = kernel_log.xid(xid_log([], ["0000:3b:00"]), H100)
    assert fallen.status == Status.FAIL and "0000:3b:00 has fallen off the bus" in fallen.reason


def ibstat_facts(states: list[tuple[str, float]]) -> dict:
    cas = [{"name": f"mlx5_{i}", "ports": [{"port": 1, "state": s, "physical_state": "LinkUp" if s == "Active"
                                             else "Polling", "rate_Gbps": r, "link_layer": "InfiniBand"}]}
           for i, (s, r) in enumerate(states)]
    return {"ib_ports": {"available": True, "complete": True, "cas": cas}}


def test_ib_ports_counts_active_ports_at_rate():
    assert infiniband.ports(ibstat_facts([("Active", 400)] * 8), H100).status == Status.PASS
    result = infiniband.ports(ibstat_facts([("Active", 400)] * 7 + [("Down", 10)]), H100)
    assert result.status == Status.FAIL and "7 of 8" in result.reason and "mlx5_7/1 Down" in result.reason
    slow = infiniband.ports(ibstat_facts([("Active", 400)] * 7 + [("Active", 200)]), H100)
    assert slow.status == Status.FAIL and "mlx5_7/1 at 200 Gb/s" in slow.reason
    missing = infiniband.ports({"ib_ports": {"available": False, "cas": []}}, H100)
    assert missing.status == Status.ERROR
    assert infiniband.ports(ibstat_facts([]), load("pcie-1gpu")).status == Status.SKIP


def test_ib_loopback_against_the_minimum():
    ok = {"ib_loopback": {"available": True, "results": {"mlx5_0/1": {"bw_avg_Gbps": 391.2}}}}
    assert infiniband.loopback(ok, H100).status == Status.PASS
    slow = {"ib_loopback": {"available": True, "results": {"mlx5_0/1": {"bw_avg_Gbps": 192.4}}}}
    result = infiniband.loopback(slow, H100)
    assert result.status == Status.FAIL and "mlx5_0/1 192.4 Gb/s" in result.reason
    assert infiniband.loopback({"ib_loopback": {"available": False}}, H100).status == Status.ERROR


def test_nccl_allreduce_against_the_minimum():
    def facts(busbw, failed=False):
        return {"nvml": nvml_facts(), "nccl_bw": {"available": True, "gpus": 8, "evidence": "",
                                                  "command_failed": None, "parsed": {
                                                      "max_busbw_GBps": busbw, "failed": failed,
                                                      "errors": ["Test NCCL failure"] if failed else [],
                                                      "wrong_total": 0}}}
    assert bandwidth.allreduce(facts(478.2), H100).status == Status.PASS
    slow = bandwidth.allreduce(facts(235.3), H100)
    assert slow.status == Status.FAIL and "235.3 GB/s < 400 GB/s" in slow.reason
    corrupt = bandwidth.allreduce(facts(480.0, failed=True), H100)
    assert corrupt.status == Status.FAIL and "Test NCCL failure" in corrupt.reason
    absent = bandwidth.allreduce({"nvml": None, "nccl_bw": {"available": False}}, H100)
    assert absent.status == Status.ERROR and "not found" in absent.reason


def host_facts(ram=2048.0, cores=224, free=None) -> dict:
    return {"host": {"ram_GiB": ram, "cpu_cores_logical": cores, "cpu_cores_physical": cores // 2,
                     "disk_free_GiB": free or {"/": 400.0, "/tmp": 400.0}}, "nvml": nvml_facts()}


def test_host_checks():
    assert host.memory(host_facts(), H100).status == Status.PASS
    small = host.memory(host_facts(ram=512.0), H100)
    assert small.status == Status.FAIL and "512 GiB RAM < 2 x 637 GiB" in small.reason
    assert host.cpu(host_facts(), H100).status == Status.PASS
    assert host.cpu(host_facts(cores=64), H100).status == Status.FAIL
    assert host.disk(host_facts(), H100).status == Status.PASS
    full = host.disk(host_facts(free={"/": 3.2, "/tmp": 400.0}), H100)
    assert full.status == Status.FAIL and "/ has 3.2 GiB free < 50 GiB" in full.reason


def test_read_throughput_against_the_minimum():
    profile = copy.deepcopy(H100)
    profile.data["host"]["read_throughput_MBps_min"] = 1000
    assert host.read_throughput({"host_read": {"path": "/data", "MBps": 2100.4}}, profile).status == Status.PASS
    slow = host.read_throughput({"host_read": {"path": "/data", "MBps": 180.0}}, profile)
    assert slow.status == Status.FAIL and "180 MB/s from /data < 1000 MB/s" in slow.reason


def test_nic_affinity_uses_sysfs_numa_when_nvml_has_none():
    facts = nvml_facts()
    for g in facts["gpus"]:
        g["numa_node"] = None  # NVML answers NotSupported on x86 hosts
    sysfs = {"nics": {"mlx5_0": 0}, "gpus": {i: 0 for i in range(8)}}
    assert links.nic_affinity({"nvml": facts, "nic_numa": sysfs}, H100).status == Status.PASS
    sysfs["gpus"][5] = 1
    result = links.nic_affinity({"nvml": facts, "nic_numa": sysfs}, H100)
    assert result.status == Status.WARN and "GPU5" in result.reason


def test_sysfs_address_from_nvml_bus_id():
    assert links.sysfs_pci_address("00000000:1B:00.0") == "0000:1b:00.0"
    assert links.sysfs_pci_address("00000009:01:00.0") == "0009:01:00.0"


# ---- fields NVML could not read: never a pass, never a made-up value (per_gpu.read_finding)

UNKNOWN = {"call": "nvmlDeviceGetX", "error": "NVML_ERROR_UNKNOWN", "text": "Unknown Error"}
POWER = {"call": "nvmlDeviceGetX", "error": "NVML_ERROR_INSUFFICIENT_POWER", "text": "Insufficient External Power"}
HUNG = {"call": "nvmlDeviceGetX", "error": "hung", "text": "did not return within 3 s"}


UNREAD = [  # (check, field key, the values the collector leaves None)
    (health.ecc_mode, "ecc_mode", {"ecc_mode": None}),
    (health.ecc_errors, "ecc_volatile_uncorrected", {"ecc_errors": {"volatile_uncorrected": None}}),
    (health.ecc_errors, "ecc_aggregate_uncorrected", {"ecc_errors": {"aggregate_uncorrected": None}}),
    (health.row_remap, "remapped_rows", {"remapped_rows": None}),
    (health.clocks, "clocks_event_reasons", {"clocks_event_reasons": None}),
    (health.temperature, "temperature", {"temperature_C": None}),
    (health.temperature, "temperature_slowdown", {"temperature_slowdown_C": None}),
    (health.power, "power", {"power_W": None}),
    (health.power, "power_limit", {"power_limit_W": None}),
    (gpu.model, "name", {"name": None}),
    (gpu.compute_capability, "compute_capability", {"compute_capability": None}),
    (gpu.memory, "memory", {"memory_total_MiB": None}),
    (gpu.persistence, "persistence_mode", {"persistence_mode": None}),
    (gpu.mig, "mig_mode", {"mig_mode": None, "mig_mode_pending": None}),
    (links.pcie, "pcie_width", {"pcie": {"width": None}}),
    (links.nvlink, "nvlink", {"nvlink": None}),
]


def with_unread(key: str, values: dict, record: dict) -> dict:
    facts = nvml_facts()
    g = facts["gpus"][3]
    for name, value in values.items():
        g[name] = {**g[name], **value} if isinstance(value, dict) else value
    g["errors"][key] = dict(record)
    return {"nvml": facts}


@pytest.mark.parametrize("evaluate,key,values", UNREAD, ids=[f"{c[0].__name__}-{c[1]}" for c in UNREAD])
def test_a_field_that_was_not_read_is_an_error_naming_gpu_field_and_nvml_error(evaluate, key, values):
    result = evaluate(with_unread(key, values, UNKNOWN), H100)
    assert result.status == Status.ERROR, result
    assert result.reason == (f"GPU3 (00000000:1B:00.0): {key} not read: nvmlDeviceGetX answered "
                             "NVML_ERROR_UNKNOWN (Unknown Error)")
    assert "dmesg" in result.remediation
    hardware = evaluate(with_unread(key, values, POWER), H100)
    assert hardware.status == Status.FAIL
    assert "NVML_ERROR_INSUFFICIENT_POWER (a device's external power cables are not properly attached)" in \
        hardware.reason
    hung = evaluate(with_unread(key, values, HUNG), H100)
    assert (hung.status, hung.reason.split(": ", 1)[1]) == (Status.ERROR, f"{key} not read: nvmlDeviceGetX hung "
                                                                          "(did not return within 3 s)")


def test_a_field_error_beside_a_real_fault_on_the_same_gpu_keeps_the_fault():
    facts = with_unread("ecc_aggregate_uncorrected", {"ecc_errors": {"aggregate_uncorrected": None}}, UNKNOWN)
    facts["nvml"]["gpus"][3]["ecc_errors"]["volatile_uncorrected"] = 2
    result = health.ecc_errors(facts, H100)
    assert result.status == Status.FAIL
    assert "2 volatile uncorrected" in result.reason and "ecc_aggregate_uncorrected not read" in result.reason


def test_a_field_error_is_reported_even_when_the_profile_skips_the_check():
    generic = load("generic")
    for evaluate, key, values in ((health.power, "power", {"power_W": None}),
                                  (health.ecc_mode, "ecc_mode", {"ecc_mode": None}),
                                  (links.nvlink, "nvlink", {"nvlink": None}),
                                  (gpu.memory, "memory", {"memory_total_MiB": None})):
        assert evaluate({"nvml": nvml_facts()}, generic).status == Status.SKIP
        assert evaluate(with_unread(key, values, UNKNOWN), generic).status == Status.ERROR
    facts = nvml_facts()  # Hopper: page retirement unsupported everywhere but one GPU failed to say
    facts["gpus"][3]["errors"]["retired_pages"] = dict(UNKNOWN)
    assert health.retired_pages({"nvml": facts}, H100).status == Status.ERROR


# ---- a remediation names the GPUs it is about and says each action once (per_gpu.for_gpus, distinct_actions)

def test_the_remediation_names_the_faulty_gpu_by_its_index():
    result = health.ecc_errors(broken(lambda g: g["ecc_errors"].update(volatile_uncorrected=2)), H100)
    assert result.remediation == ("keep the evidence first (gpucheck rma 3): a reset or reboot clears what an RMA "
                                  "needs; drain the node and reset the GPU (nvidia-smi -r -i 3) or reboot; if errors "
                                  "return, open an RMA for the GPU")
    assert result.remediation.count("drain the node") == 1


def test_each_gpu_found_gets_its_own_command_and_each_action_is_said_once():
    facts = with_unread("ecc_aggregate_uncorrected", {"ecc_errors": {"aggregate_uncorrected": None}}, UNKNOWN)
    facts["nvml"]["gpus"][3]["ecc_errors"]["volatile_uncorrected"] = 2
    facts["nvml"]["gpus"][5]["ecc_errors"]["volatile_uncorrected"] = 1
    text = health.ecc_errors(facts, H100).remediation
    assert "reset the GPU (nvidia-smi -r -i 3, nvidia-smi -r -i 5) or reboot" in text
    assert text.count(") or reboot") == 1  # the read error's own reset is the same action: said once
    assert "`nvidia-smi -q -i 3`;" in text and "-q -i 5" not in text  # only GPU3 was not read
    assert "-i N" not in text


# ---- evidence first: a reset clears the volatile ECC counters and a reboot the kernel log's Xids (docs/rma.md)

RESETS = re.compile(r"\b(reset|reboot|reseat|RMA)\b", re.IGNORECASE)


def keeps_the_evidence_first(remediation: str) -> bool:
    before, evidence, _ = remediation.partition("keep the evidence first (gpucheck rma")
    return bool(evidence) and not RESETS.search(before)


def test_every_action_list_that_resets_reboots_reseats_or_returns_a_gpu_keeps_its_evidence_first():
    # the GPU's own faults (a setting such as ECC off, MIG or persistence needs no evidence kept)
    faults = {gpu.count, gpu.memory, health.ecc_errors, health.row_remap, links.nvlink}
    results = [evaluate(broken(mutate), H100) for evaluate, mutate, status, _ in GPU_CASES
               if evaluate in faults and status == Status.FAIL]
    assert len(results) == 6
    results += [health.retired_pages(broken(lambda g: g.update(retired_pages={"single_bit": 1, "double_bit": 1,
                                                                            "pending": True})), H100),
                kernel_log.xid(xid_log([{"xid": 79, "pci": "0000:1b:00", "severity": "fatal"}]), H100),
                kernel_log.xid(xid_log([], ["0000:3b:00"]), H100)]
    texts = [r.remediation for r in results] + [per_gpu.READ_ERROR_HINT, judge.UNREACHED_HINT, p2p.REMEDIATION]
    assert [text for text in texts if not keeps_the_evidence_first(text)] == []
    assert "gpucheck rma 3" in health.ecc_errors(broken(lambda g: g["ecc_errors"].update(volatile_uncorrected=2)),
                                                 H100).remediation  # the GPU's own archive where it is known


def test_every_check_that_gives_a_command_for_the_gpu_names_it():
    assert "(nvidia-smi -i 3 -e 1) and reset the GPU (nvidia-smi -r -i 3)" in health.ecc_mode(
        broken(lambda g: g.update(ecc_mode=False)), H100).remediation
    assert gpu.mig(broken(lambda g: g.update(mig_mode=True)), H100).remediation.startswith("nvidia-smi -i 3 -mig 0")
    remap = health.row_remap(broken(lambda g: g["remapped_rows"].update(failure=True)), H100).remediation
    assert remap == ("keep the evidence first (gpucheck rma 3): a reset or reboot clears what an RMA needs; drain the "
                     "node; pending: reset the GPU (nvidia-smi -r -i 3) or reboot; failure: open an RMA for the GPU")
    unread = health.temperature(with_unread("temperature", {"temperature_C": None}, UNKNOWN), H100).remediation
    assert "`nvidia-smi -q -i 3`" in unread and "(nvidia-smi -r -i 3)" in unread
    no_bus = with_unread("pci_bus_id", {"pci_bus_id": None}, UNKNOWN)
    no_bus["pci_gpus"] = {"gpus": [{"address": f"0000:{0x18 + i:02x}:00.0", "driver": "nvidia"} for i in range(8)]}
    counted = gpu.count(no_bus, load("generic")).remediation  # its bus id unread: NVML and the bus cannot be matched
    assert "`nvidia-smi -q -i 3`" in counted and "(nvidia-smi -r -i 3)" in counted and "-i N" not in counted


def test_a_hint_without_a_gpu_to_name_is_left_as_it_is_and_repeats_are_dropped():
    assert per_gpu.for_gpus("reset it (nvidia-smi -r -i N)", []) == "reset it (nvidia-smi -r -i N)"
    assert per_gpu.for_gpus("`nvidia-smi -q -i N`", [0, 2]) == "`nvidia-smi -q -i 0`, `nvidia-smi -q -i 2`"
    assert per_gpu.for_gpus("set it (nvidia-smi -pl 700)", [1]) == "set it (nvidia-smi -pl 700)"
    assert per_gpu.distinct_actions([("a; b (nvidia-smi -i N)", [1]), ("b (nvidia-smi -i N); c", [2])]) == (
        "a; b (nvidia-smi -i 1, nvidia-smi -i 2); c")


# ---- a finding several GPUs share is said once, with the GPUs it is about (per_gpu.shared_findings)

def test_a_finding_every_gpu_shares_is_one_part_with_the_range_of_its_figure():
    facts = nvml_facts()
    for g in facts["gpus"]:
        g.update(temperature_C=95 if g["index"] == 3 else 94, temperature_slowdown_C=89)
    result = health.temperature({"nvml": facts}, H100)
    assert result.status == Status.FAIL
    assert result.reason == "all 8 GPUs: 94-95 °C at or above its slowdown threshold 89 °C"
    # what Slurm shows of the drain: the cause first, whole
    reason = drain_rule.drain_reason([f"gpu.temperature {result.reason}"])
    assert reason == "gpucheck: gpu.temperature all 8 GPUs: 94-95 °C at or above its slowdown threshold 89 °C"


def test_shared_findings_keep_apart_what_would_lose_a_pairing_or_an_address():
    gpus = [healthy_gpu(i) for i in range(8)]
    said = per_gpu.shared_findings([(gpus[0], "power capped at 200 W < 350 W"),
                                    (gpus[3], "power capped at 140 W < 150 W"),
                                    (gpus[1], "persistence mode off"), (gpus[2], "persistence mode off"),
                                    (gpus[5], "persistence mode off"), (gpus[6], "Gen4 x8 (max Gen5 x16)")], 8)
    assert said == ("GPU0 (00000000:18:00.0): power capped at 200 W < 350 W; "  # two figures that differ: apart
                    "GPU3 (00000000:1B:00.0): power capped at 140 W < 150 W; "
                    "3 GPUs (GPU1-2, GPU5): persistence mode off; "
                    "GPU6 (00000000:1E:00.0): Gen4 x8 (max Gen5 x16)")  # its own: its address, for the RMA
    assert per_gpu.gpu_names([0, 1, 2, 4, 6, 7], 8) == "6 GPUs (GPU0-2, GPU4, GPU6-7)"
    twice = per_gpu.shared_findings([(gpus[7], "link 1 down"), (gpus[7], "link 2 down")], 8)  # one GPU: not "2 GPUs"
    assert twice == "GPU7 (00000000:1F:00.0): link 1 down; GPU7 (00000000:1F:00.0): link 2 down"


def test_not_supported_is_no_error():
    facts = nvml_facts()
    for g in facts["gpus"]:
        g.update(nvlink=None, mig_mode=None, mig_mode_pending=None, remapped_rows=None)
    assert gpu.mig({"nvml": facts}, H100).status == Status.PASS
    assert health.row_remap({"nvml": facts}, H100).status == Status.SKIP
    assert links.nvlink({"nvml": facts}, load("h100-1gpu")).status == Status.SKIP


def test_count_names_lost_unresponsive_and_pci_only_gpus():
    facts = nvml_facts()
    facts["gpus"][6].update(lost=True, lost_reason="no NVML call about it answered (nvmlDeviceGetName: X)")
    facts["gpus"][2]["stopped_answering"] = "nvmlDeviceGetTemperature and nvmlDeviceGetPowerUsage hung"
    result = gpu.count({"nvml": facts}, H100)
    assert result.status == Status.FAIL
    assert result.reason == ("7 of 8 GPUs respond; GPU6 is lost (no NVML call about it answered (nvmlDeviceGetName: "
                             "X)); GPU2 (00000000:1A:00.0) stopped answering NVML (nvmlDeviceGetTemperature and "
                             "nvmlDeviceGetPowerUsage hung)")
    seven = nvml_facts()
    seven["gpus"].pop()
    bus = {"gpus": [{"address": f"0000:{0x18 + i:02x}:00.0", "driver": "nvidia"} for i in range(8)]}
    generic = gpu.count({"nvml": seven, "pci_gpus": bus}, load("generic"))
    assert (generic.status, generic.reason) == (
        Status.FAIL, "1 of 8 GPUs on the PCI bus not visible to NVML: 0000:1f:00.0 (driver nvidia)")
    assert gpu.count({"nvml": nvml_facts(), "pci_gpus": bus}, load("generic")).status == Status.PASS
    assert gpu.count({"nvml": seven, "pci_gpus": None}, load("generic")).status == Status.PASS  # no bus to compare


def test_profile_is_chosen_as_if_every_gpu_on_the_bus_answered():
    from gpucheck.node.pipeline import selection_names

    seven = nvml_facts()
    seven["gpus"].pop()
    seven["gpus"][4].update(lost=True, name=None)
    bus = {"gpus": [{"address": f"0000:{0x18 + i:02x}:00.0"} for i in range(8)]}
    assert selection_names(seven, bus) == ["NVIDIA H100 80GB HBM3"] * 8
    assert selection_names(seven, {}) == ["NVIDIA H100 80GB HBM3"] * 7
    assert selection_names({"gpus": [{"index": 0, "lost": True}]}, bus) == []


def test_pci_collector_lists_nvidia_gpus_and_nvswitches_only(tmp_path, monkeypatch):
    from gpucheck.node import Context
    from lab.fakenvml import write_pci_tree

    root = write_pci_tree(tmp_path, ["00000000:18:00.0"], [
        ("0000:05:00.0", "0x10de", "0x068000"),  # NVSwitch (bridge)
        ("0000:18:00.1", "0x10de", "0x040300"),  # HDMI audio function
        ("0000:03:00.0", "0x1a03", "0x030000"),  # the BMC's VGA
    ])
    write_pci_tree(root, ["0000:65:00.0"], device="0x1eb8", gpu_class="0x030000", driver=None)
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(root))
    assert links.collect_pci_gpus(Context()) == {"gpus": [
        {"address": "0000:18:00.0", "device": "0x2330", "class": "0x030200", "driver": "nvidia"},
        {"address": "0000:65:00.0", "device": "0x1eb8", "class": "0x030000", "driver": None}],
        "nvswitches": [{"address": "0000:05:00.0", "device": "0x0000"}]}
    monkeypatch.setenv("GPUCHECK_SYSFS_ROOT", str(tmp_path / "nothing"))
    with pytest.raises(CollectError):
        links.collect_pci_gpus(Context())


def test_a_downtrained_link_still_fails_when_another_part_of_the_link_was_not_read():
    facts = with_unread("pcie_gen_max", {"pcie": {"width": 8, "gen_max": None}}, UNKNOWN)
    result = links.pcie(facts, H100)
    assert result.status == Status.FAIL
    assert "link trained to x8 of x16" in result.reason and "pcie_gen_max not read" in result.reason
