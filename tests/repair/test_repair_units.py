"""The repair's pure parts: which repair a drained node gets from its profile, what the node remembers of earlier
repairs, node.yaml's `repair:` and the profile's `repair:` refused in one line when wrong, the history's transitions
of a repair, and MTTR's count of the nodes a repair returned or handed to a person."""

from __future__ import annotations

import json

import pytest

from gpucheck import config, profiles
from gpucheck.config import RepairSettings
from gpucheck.history import mttr
from gpucheck.history.records import transitions_of
from gpucheck.repair import ledger
from gpucheck.repair.plan import Gpu, Plan, plan_of
from support import run_gpucheck

GPU3 = {"index": 3, "uuid": "GPU-3333", "pci_bus_id": "00000000:5D:00.0"}
GPU5 = {"index": 5, "uuid": "GPU-5555", "pci_bus_id": "00000000:BB:00.0"}


def drained(results: list[tuple[str, str]], repair: dict | None, observed: tuple[str, ...] = ()) -> dict:
    return {"profile": "site", "thresholds": {"repair": repair} if repair else {},
            "facts": {"gpus": [GPU3, GPU5]},
            "results": [{"check": c, "status": "fail", "reason": why, "observed": c in observed} for c, why in results]}


def test_the_profile_names_the_repair_and_the_gpus_the_failures_name():
    plan, _ = plan_of(drained([("gpu.ecc_errors", "GPU3 (00000000:5D:00.0): 2 volatile uncorrected")],
                              {"gpu.ecc*": "reset-gpu"}))
    assert plan == Plan("reset-gpu", ("gpu.ecc_errors",), ("gpu.ecc_errors GPU3 (00000000:5D:00.0): 2 volatile "
                                                           "uncorrected",), (Gpu(3, "GPU-3333", "00000000:5D:00.0"),))
    assert plan.describe() == "reset-gpu GPU3"


def test_the_kernels_bus_spelling_names_the_gpu_and_the_most_thorough_repair_wins():
    plan, _ = plan_of(drained([("gpu.xid", "Xid 79 on 0000:bb:00"), ("gpu.fabric_manager", "not running")],
                              {"gpu.xid": "reset-gpu", "gpu.fabric_manager": "restart-fabric-manager"}))
    assert plan.action == "reset-gpu" and [g.index for g in plan.gpus] == [5]
    assert set(plan.checks) == {"gpu.xid", "gpu.fabric_manager"}


@pytest.mark.parametrize("results, repair, why", [
    ([("gpu.pcie", "GPU3 x8")], None, "configures no repair"),
    ([("gpu.pcie", "GPU3 x8"), ("gpu.ecc_errors", "GPU3 2")], {"gpu.ecc_errors": "reset-gpu"},
     "no repair for gpu.pcie: a person looks at it"),
    ([("gpu.ecc_errors", "2 volatile uncorrected on some GPU")], {"gpu.ecc_errors": "reset-gpu"},
     "the failures name no GPU to reset"),
    ([], {"gpu.*": "reset-gpu"}, "nothing failed"),
])
def test_no_repair_where_one_would_not_return_the_node(results, repair, why):
    plan, said = plan_of(drained(results, repair))
    assert plan is None and why in said


def test_an_observed_check_asks_for_no_repair():
    plan, said = plan_of(drained([("gpu.temperature", "observed only (would drain): 95 C")],
                                 {"gpu.*": "reset-gpu"}, observed=("gpu.temperature",)))
    assert plan is None and said == "nothing failed"


def test_a_fault_back_within_the_window_is_remembered_by_check_and_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCHECK_STATE_DIR", str(tmp_path))
    plan = Plan("reset-gpu", ("gpu.ecc_errors",), (), (Gpu(3, "GPU-3333", None),))
    assert ledger.returned_within(plan, 3600, now=1000.0) is None
    assert ledger.record_return(plan, now=1000.0) is None
    assert ledger.returned_within(plan, 3600, now=2000.0)["action"] == "reset-gpu"
    assert ledger.returned_within(plan, 600, now=2000.0) is None  # past the window
    other_gpu = Plan("reset-gpu", ("gpu.ecc_errors",), (), (Gpu(5, "GPU-5555", None),))
    assert ledger.returned_within(other_gpu, 3600, now=2000.0) is None
    other_check = Plan("reset-gpu", ("gpu.xid",), (), (Gpu(3, "GPU-3333", None),))
    assert ledger.returned_within(other_check, 3600, now=2000.0) is None
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan  # a reboot's plan survives the boot


@pytest.mark.parametrize("text, says", [
    ("repair: yes", "'repair' must be a mapping"),
    ("repair: {allow_reboot: 1}", "'repair.allow_reboot' is 1: true or false"),
    ("repair: {burn_s: 0}", "'repair.burn_s' is 0: a number more than 0"),
    ("repair: {reboot: true}", "'repair' has unknown key(s) reboot"),
])
def test_a_wrong_repair_setting_is_one_line_naming_the_key(tmp_path, text, says):
    path = tmp_path / "node.yaml"
    path.write_text(text + "\n")
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_node_yaml_sets_what_the_owner_allows(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("repair: {allow_reboot: true, burn_s: 30}\n")
    assert config.load(path).repair == RepairSettings(allow_reboot=True, burn_s=30.0)


@pytest.mark.parametrize("value", ["{gpu.xid: power-cycle}", "[gpu.xid]", "{gpu.xid: null}"])
def test_a_profile_repair_that_is_no_repair_is_refused(tmp_path, value):
    path = tmp_path / "site.yaml"
    path.write_text(f"name: site\ninherits: lab\nrepair: {value}\n")
    with pytest.raises(profiles.ProfileError) as caught:
        profiles.load(str(path))
    assert "'repair' must map check ids or globs to a repair (restart-dcgm, restart-fabric-manager, reset-gpu, " \
           "reboot)" in str(caught.value)


def test_a_repairs_steps_are_its_transitions_with_the_gpus_it_repaired():
    steps = [{"state": s, "at": f"2026-11-29T10:00:0{i}+00:00", "reason": s} for i, s in
             enumerate(["repairing", "proving", "needs-hands"])]
    facts = {"repair": {"gpus": [{"index": 3, "uuid": "GPU-3333"}], "steps": steps},
             "slurm": {"action": "drain", "path": "repair", "at": "2026-11-29T10:00:02+00:00"}}
    found = transitions_of({"results": []}, facts, "fail")
    assert [(state, path, gpus) for _, state, path, _, gpus in found] == [
        ("repairing", "repair", "GPU-3333"), ("proving", "repair", "GPU-3333"), ("needs-hands", "repair", "GPU-3333")]


def test_mttr_counts_what_a_repair_returned_and_says_who_needs_hands():
    returned = mttr.Episode("gpu07", "2026-11-29T10:00:00Z", "x", "watch", returned="2026-11-29T10:05:00Z",
                            repaired=True)
    waiting = mttr.Episode("gpu08", "2026-11-29T10:00:00Z", "x", "watch", needs_hands="2026-11-29T10:02:00Z")
    rows = mttr.summary([returned, waiting])
    assert [(r["node"], r["repaired"], r["needs_hands"]) for r in rows] == [
        ("gpu07", 1, None), ("gpu08", 0, "2026-11-29T10:02:00Z")]
    text = mttr.render(rows, "since then")
    assert "repaired" in text.splitlines()[1] and "needs hands since 2026-11-29T10:02:00Z" in text


def test_gpus_names_nvml_indexes_and_refuses_anything_else():
    done = run_gpucheck(["node", "--gpus", "x3"])
    assert done.returncode == 3 and "is not a GPU index (0 to 63" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
