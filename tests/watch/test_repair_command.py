"""gpucheck watch's repair, run as the systemd unit runs the watcher, against the fake NVML, the lab's stand-in
`nvidia-smi -r` (lab/nvidia_repo: it writes the reset layer the scenario includes), the fake CuPy for the proof's
burn-in, and a real Slurm (tests/slurmkit.py): a reset that clears the fault returns the node after its proof, with
every transition in the history store; one the fault survives, or a fault back soon after a repair, hands the node
to a person with an RMA archive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import slurmkit
from gpucheck.history.store import Store
from lab.fakenvml import write_pci_tree_for
from support import run_gpucheck, wait_for
from watchkit import ECC_ON_GPU3, REPAIR_PROFILE, Watch, fault, repairable

ORDER = ["detected", "drained", "waiting", "repairing", "proving", "returned", "needs-hands"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture
def node(tmp_path, slurm):
    """A watcher whose node's GPUs reset through the stand-in nvidia-smi, proven on the fake CuPy."""
    if "DRAIN" in slurm.state()[0]:
        slurm.set(state="resume")
    w = repairable(tmp_path, slurm.env)
    yield w
    w.stop()


def transitions(w: Watch) -> list[tuple[str, str]]:
    """The node's transitions as the history store keeps them, from its kept reports."""
    store = w.tmp / "history.sqlite"
    done = run_gpucheck(["history", "import", "--store", str(store), *map(str, w.reports())], env=w.env)
    assert done.returncode == 0, done.stderr
    rows = Store(store).query("SELECT at, state, path FROM transitions")
    # a second holds several of them: within one, in the order a node goes through them
    rows.sort(key=lambda row: (row["at"], ORDER.index(row["state"])))
    return [(row["state"], row["path"]) for row in rows]


def repair_facts(w: Watch) -> dict:
    """The last attempt's steps, from the report that ends it (kept just after its last step is said)."""
    found = wait_for(lambda: [doc["facts"]["repair"] for doc in (json.loads(p.read_text()) for p in w.reports())
                              if "repair" in doc["facts"]], 10, "the report that ends the attempt")
    return found[-1]


def test_a_reset_that_clears_the_fault_returns_the_node_after_its_proof(node, slurm):
    node.start()
    fault(node, ECC_ON_GPU3)
    said = node.wait("repair: returned", timeout=180)
    assert "slurm: drained gpu-a: gpucheck: watch: gpu.ecc_errors" in said
    assert "repair: repairing: reset-gpu GPU3 after gpu.ecc_errors" in said and "GPU3 reset" in said
    proof = said[said.index("repair: proof:"):].splitlines()[0]
    assert "gpu.ecc_errors pass" not in proof and "gpu.burn pass" in proof and "gpu.gemm pass" in proof
    assert f"resumed {slurmkit.NODE}" in said
    state, reason = slurm.state()
    assert "DRAIN" not in state and reason == ""
    assert "gpu.3.ecc_uncorrected_volatile = 0" in (node.tmp / "reset.scn").read_text()
    steps = repair_facts(node)["steps"]
    assert [s["state"] for s in steps] == ["repairing", "proving", "returned"]
    assert transitions(node) == [("detected", "watch"), ("drained", "watch"), ("repairing", "repair"),
                                 ("proving", "repair"), ("returned", "repair")]
    mttr = run_gpucheck(["history", "mttr", "--store", str(node.tmp / "history.sqlite"), "--format", "json"],
                        env=node.env)
    [row] = json.loads(mttr.stdout)
    assert row["returned"] == 1 and row["repaired"] == 1 and row["out_since"] is None

    # the same fault again within the window: no second reset, a person looks at it (once the watcher has its new
    # baseline, taken as the repair ended: what the reset cleared)
    node.wait_baseline(lambda sample: sample["gpus"]["3"]["ecc_uncorrected"] == 0)
    fault(node, ECC_ON_GPU3.replace("2", "5"))
    said = node.wait("repair: needs-hands:", timeout=120)
    assert "gpu.ecc_errors failed again" in said and "after reset-gpu returned the node" in said
    state, reason = slurm.state()
    assert "DRAIN" in state and reason.startswith("gpucheck: needs-hands: gpu.ecc_errors failed again")
    assert said.count("GPU3 reset") == 1


def test_a_fault_the_reset_does_not_clear_needs_hands_and_an_rma_archive(node, slurm):
    node.start()
    fault(node, ECC_ON_GPU3 + "gpu.3.survives_reset = yes\n")
    said = node.wait("repair: needs-hands:", timeout=120)
    assert "GPU3 reset" in said and "reset-gpu GPU3 did not mend it: gpu.ecc_errors" in said
    assert "gpu.burn" not in said[said.index("repair: proof:"):]  # a fault still seen idle needs no load
    state, reason = slurm.state()
    assert "DRAIN" in state and reason.startswith("gpucheck: needs-hands: reset-gpu GPU3 did not mend it")
    facts = repair_facts(node)
    archive = Path(facts["rma"])
    assert archive.name.startswith("rma-") and "GPU3" in archive.name and archive.stat().st_size > 0
    assert [s["state"] for s in facts["steps"]] == ["repairing", "proving", "needs-hands"]
    assert [state for state, _ in transitions(node)][-1] == "needs-hands"
    # the health check's pass cannot return it: a passive run never undoes a repair's hold
    done = run_gpucheck(["node", "--slurm", "--slurm-node", slurmkit.NODE, "--only", "gpu.count"], env=node.env)
    assert "left gpu-a as it is" in done.stderr and "DRAIN" in slurm.state()[0]


def test_a_reboot_is_asked_for_only_where_allowed_and_proven_on_the_next_boot(node, slurm):
    """A reboot as the repair, node.yaml allowing it: `systemctl reboot` (a stand-in recording it) is asked for, the
    plan survives in repairs.json, and the watcher started on the next boot (another boot id) proves the node and
    returns it. The machine is two GPUs, so the whole node's proof stays short."""
    fake = node.tmp / "fake"
    (fake / "proc" / "sys" / "kernel" / "random").mkdir(parents=True)
    (fake / "proc" / "uptime").write_text("5000.00 9000.00\n")
    boot_id = fake / "proc" / "sys" / "kernel" / "random" / "boot_id"
    boot_id.write_text("boot-one\n")
    asked = node.tmp / "systemctl.log"
    systemctl = node.tmp / "bin" / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$@" >> {asked}\n[ "$1" = reboot ]\n')  # no unit runs here
    systemctl.chmod(0o755)
    (node.tmp / "lab-repair.yaml").write_text(REPAIR_PROFILE.replace("reset-gpu", "reboot") + "gpu: {count: 2}\n")
    node.env["GPUCHECK_PROC_ROOT"] = str(fake / "proc")
    fault(node, "gpu_count = 2\npci_gpu_count = 2\n")
    write_pci_tree_for(node.scenario, node.tmp / "sys")
    site = node.tmp / "node.yaml"
    site.write_text(site.read_text().replace("burn_s: 3,", "burn_s: 3, allow_reboot: false,"))
    node.start()
    fault(node, "gpu_count = 2\npci_gpu_count = 2\n" + ECC_ON_GPU3.replace("3", "1"))
    said = node.wait("repair: needs-hands:", timeout=120)
    assert "reboot did not work: a reboot is the profile's repair, but node.yaml does not allow one" in said
    assert "reboot" not in (asked.read_text() if asked.exists() else "")
    node.stop()

    slurm.set(state="resume")
    site.write_text(site.read_text().replace("allow_reboot: false", "allow_reboot: true"))
    for left in ("repairs.json", "watch.json"):  # a node where no repair was tried, its watcher starting afresh
        (node.tmp / "state" / left).unlink(missing_ok=True)
    fault(node, "gpu_count = 2\npci_gpu_count = 2\n")
    node.start()
    fault(node, "gpu_count = 2\npci_gpu_count = 2\n" + ECC_ON_GPU3.replace("3", "1"))
    node.wait("repair: reboot asked for", timeout=120)
    assert asked.read_text().splitlines()[-1] == "reboot"
    assert json.loads((node.tmp / "state" / "repairs.json").read_text())["rebooting"]["plan"]["action"] == "reboot"
    node.stop()  # systemd stops it for the reboot

    boot_id.write_text("boot-two\n")  # the next boot: its counters start at zero
    fault(node, "gpu_count = 2\npci_gpu_count = 2\n")
    node.start(saving=False)
    said = node.wait("repair: returned", timeout=180)
    assert "the node rebooted (reboot); proving it" in said
    proof = said[said.index("repair: proof:"):].splitlines()[0]
    assert "gpu.burn pass" in proof
    assert "DRAIN" not in slurm.state()[0]
    assert "rebooting" not in json.loads((node.tmp / "state" / "repairs.json").read_text())


def test_a_restart_that_does_not_mend_and_a_busy_gpu_that_is_not_reset_both_need_hands(node, slurm):
    """restart-dcgm: `systemctl restart nvidia-dcgm` (a stand-in recording it), then the proof, which still sees the
    ECC errors a restart cannot clear. A reset of a GPU another program uses is refused before nvidia-smi is asked."""
    asked = node.tmp / "systemctl.log"
    systemctl = node.tmp / "bin" / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')  # every unit active, every restart done
    systemctl.chmod(0o755)
    (node.tmp / "lab-repair.yaml").write_text(REPAIR_PROFILE.replace("reset-gpu", "restart-dcgm"))
    node.start()
    fault(node, ECC_ON_GPU3)
    said = node.wait("repair: needs-hands:", timeout=120)
    assert "repair: nvidia-dcgm restarted" in said and "restart-dcgm did not mend it: gpu.ecc_errors GPU3" in said
    assert "restart nvidia-dcgm" in asked.read_text().splitlines()
    node.stop()

    slurm.set(state="resume")
    (node.tmp / "lab-repair.yaml").write_text(REPAIR_PROFILE)
    (node.tmp / "state" / "watch.json").unlink()
    fault(node, "")
    node.start()
    fault(node, ECC_ON_GPU3 + "gpu.3.compute_processes = 576:75971428352\n")  # a job's process on GPU3
    said = node.wait("repair: needs-hands:", timeout=120)
    assert "reset-gpu GPU3 did not work: not reset: GPU3 is used by pid 576" in said
    assert not (node.tmp / "reset.scn").exists()  # nvidia-smi -r never ran
    calls = asked.read_text().splitlines()  # what was stopped for the reset is started again, refused or not
    assert calls[-4:] == ["stop nvidia-dcgm", "stop nvidia-persistenced", "start nvidia-dcgm",
                          "start nvidia-persistenced"]
