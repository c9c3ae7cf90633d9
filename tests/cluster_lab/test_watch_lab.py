"""gpucheck watch on the lab's nodes, for real: turned on by site.yml's agent stage, its watch part alone
(`--tags watch`: gpucheck_agent_watch, its systemd unit under each node's own systemd, the breaker's fleet share set
to a half), it drains node01 in admin01's slurmctld as an Xid line is logged (the lab's kernel log file:
lab/kernel_log.py) and as the node's simulated GPU steps its ECC counter (`lab fault ... scenario`, which a running
NVML sees); a thermal slowdown and Fabric Manager stopping drain theirs; with three of the four nodes failing at
once, the breaker holds the third drain; a GPU reset returns a node after its proof and hands one whose fault
survives it to a person; turned off again by the same stage, it leaves no watcher behind. The latency is
bench/watch_latency.py's own measurement (a few plants here; its 20 are the issue's figure)."""

from __future__ import annotations

import shlex
import statistics
import sys

import pytest
from cluster_lab_helpers import FAULTY, ROOT, ansible_playbook, lab

from gpucheck.history.store import Store
from support import run_gpucheck, wait_for

pytestmark = pytest.mark.lab
NODE = "node01"
NODES = ("node01", "node02", "node03", FAULTY)


def agent_stage(watch: bool) -> None:
    """The agent stage's watch part on every GPU node (the agent is the lab's, `lab4`): the watcher on or off. While
    it is on, the nodes are judged as the DGX H100s they simulate (checks/lab.yaml leaves Fabric Manager out, which
    the watcher's test needs in)."""
    profile = ["-e", "gpucheck_agent_profile=dgx-h100"] if watch else []
    done = ansible_playbook("site.yml", "--tags", "watch", "--limit", "gpu_nodes", "-e",
                            f"gpucheck_agent_watch={watch}", "-e", "gpucheck_agent_breaker_fleet_fraction=0.5",
                            *profile, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def unit_state(node: str = NODE) -> str:
    return lab("ssh", node, "--", "systemctl", "is-active", "gpucheck-watch", check=False, timeout=60).stdout.strip()


def journal(node: str) -> str:
    return lab("ssh", node, "--", "journalctl", "-u", "gpucheck-watch", "--no-pager", "-q", check=False,
               timeout=60).stdout


@pytest.fixture(scope="module")
def watching(slurm):
    sys.path.insert(0, str(ROOT / "bench"))
    import watch_latency

    agent_stage(True)
    try:
        yield watch_latency
    finally:
        lab("fault", NODE, "scenario", "dgx-h100", timeout=120)
        if unit_state() == "active":
            agent_stage(False)
        for node in NODES[:3]:
            watch_latency.resume(node, slurm)


def test_an_xid_line_drains_the_node_in_slurm_within_seconds(watching, slurm, lab4):
    assert unit_state() == "active"
    latencies = watching.xid_to_drain(NODE, slurm, plants=3)
    lab4.figures["watch_xid_to_sinfo_s"] = [round(s, 2) for s in latencies]
    said = journal(NODE)
    assert f"drained {NODE}: gpucheck: watch: gpu.xid fatal: Xid 79 on 0000:18:00" in said, said[-3000:]
    lab4.figures["watch_xid_to_sinfo_median_s"] = round(statistics.median(latencies), 2)


def test_an_ecc_counter_stepping_under_a_running_nvml_drains_it(watching, slurm):
    lab("fault", NODE, "scenario", "ecc-uncorrected", timeout=120)
    reason = wait_for(lambda: (r := watching.sinfo_reason(NODE, slurm)).startswith("gpucheck: watch:") and r, 60,
                      "the watcher's drain in sinfo -R")
    assert reason.startswith("gpucheck: watch: gpu.ecc_errors GPU3"), reason


def in_service(watching, slurm) -> None:
    """Every node resumed: none counts as drained by gpucheck within the breaker's window (node01 from the tests
    before, node04's ECC fault from an earlier module)."""
    for node in NODES:
        watching.resume(node, slurm)


def test_a_thermal_slowdown_and_fabric_manager_stopping_drain_their_nodes(watching, slurm):
    in_service(watching, slurm)  # two of four may go: the breaker lets both through
    lab("fault", "node02", "scenario", "throttling", timeout=120)  # GPU7 held down by HW thermal slowdown
    lab("ssh", "node03", "--", "systemctl", "stop", "nvidia-fabricmanager", timeout=120)
    try:
        for node, check in (("node02", "gpu.clocks GPU7"), ("node03", "gpu.fabric_manager")):
            reason = wait_for(lambda n=node: (r := watching.sinfo_reason(n, slurm)).startswith("gpucheck: watch:")
                              and r, 60, f"{node}'s drain in sinfo -R")
            assert reason.startswith(f"gpucheck: watch: {check}"), reason
    finally:
        lab("fault", "node02", "scenario", "dgx-h100", timeout=120)
        lab("ssh", "node03", "--", "systemctl", "start", "nvidia-fabricmanager", timeout=120)


def test_with_three_of_four_nodes_failing_at_once_the_breaker_holds_the_third_drain(watching, slurm):
    """Two of four may go within the window (fleet share 0.5); the watchers order the drains alike, as Slurm stamped
    them and then by name: whichever came third holds its drain (or takes it back) and says why."""
    in_service(watching, slurm)
    failing = NODES[:3]
    before = {node: len(journal(node)) for node in failing}
    for node in failing:
        lab("fault", node, "xid", "79", timeout=60)

    def outcomes() -> dict[str, str]:
        new = {node: journal(node)[before[node]:] for node in failing}
        return new if all(f"drained {n}" in said or f"did NOT drain {n}" in said for n, said in new.items()) else {}

    said = wait_for(outcomes, 120, "each failing node's watcher drained or held")
    drained = [n for n in failing if watching.sinfo_reason(n, slurm).startswith("gpucheck: watch: gpu.xid")]
    held = [n for n in failing if "held by breaker: 3 of 4 nodes drained by gpucheck" in said[n]]
    assert len(drained) == 2 and len(held) == 1 and set(drained) | set(held) == set(failing), (drained, said)


# A site profile on a node: the lab's checks, a GPU reset for an ECC error (none by default).
REPAIR_PROFILE = "name: lab-repair\ninherits: lab\nrepair:\n  gpu.ecc_errors: reset-gpu\n"
FAST_COMPUTE = "FAKECUPY_TFLOPS=0.002"  # the proof's one GPU at 10x the lab's modelled rate (lab/compute.py)


def repairing(node: str) -> str:
    """Turn `node`'s repairs on (its node.yaml's profile set to REPAIR_PROFILE, its simulated GEMMs faster) and
    restart its watcher; the /etc/default/gpucheck it had, to put back."""
    env = lab("ssh", node, "--", "cat", "/etc/default/gpucheck", timeout=60).stdout
    script = (f"printf %s {shlex.quote(REPAIR_PROFILE)} > /etc/gpucheck/checks/lab-repair.yaml && "
              "sed -i 's/^profile: .*/profile: lab-repair/' /etc/gpucheck/node.yaml && "
              f"sed -i 's/^FAKECUPY_TFLOPS=.*/{FAST_COMPUTE}/' /etc/default/gpucheck && "
              "systemctl restart gpucheck-watch")
    lab("ssh", node, "--", script, timeout=120)  # ssh hands the remote shell one command line
    wait_for(lambda: "watching" in journal(node).rsplit("stopped", 1)[-1], 60, f"{node}'s watcher restarted")
    return env


def test_a_reset_returns_its_node_after_the_proof_and_one_the_fault_survives_needs_hands(watching, slurm, tmp_path):
    """Two nodes at once, each through its own systemd and the real slurmctld: on node01 the stand-in `nvidia-smi
    -r` clears GPU3's ECC errors and the node returns once the GPU checks and GPU3's burn-in pass, five transitions
    in the store; on node02 the fault survives the reset (survives_reset), and the node waits for hands with an
    RMA archive."""
    in_service(watching, slurm)
    for node in ("node01", "node02"):  # healthy GPUs first (node01 kept the ECC fault of the test above)
        lab("fault", node, "scenario", "dgx-h100", timeout=120)
    kept = {node: repairing(node) for node in ("node01", "node02")}
    try:
        lab("fault", "node01", "scenario", "ecc-uncorrected", timeout=120)
        lab("fault", "node02", "scenario", "ecc-uncorrected-persistent", timeout=120)
        try:
            wait_for(lambda: "repair: returned" in journal("node01") and "repair: needs-hands:" in journal("node02"),
                     300, "node01 returned and node02 handed over")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{journal('node01')[-3000:]}\n{journal('node02')[-3000:]}") from None
        assert watching.sinfo_reason("node01", slurm) == ""
        said = journal("node01")
        assert "reset-gpu GPU3 after gpu.ecc_errors" in said, said[-3000:]
        reset = said[said.rindex("repair: GPU3 reset"):].splitlines()[0]
        assert "nvidia-persistenced" in reset and "stopped for it and started again" in reset, reset  # the driver's
        assert lab("ssh", "node01", "--", "systemctl", "is-active", "nvidia-persistenced", check=False,
                   timeout=60).stdout.strip() == "active"  # and running again
        assert "gpu.burn pass" in said[said.rindex("repair: proof:"):]
        reason = watching.sinfo_reason("node02", slurm)
        assert reason.startswith("gpucheck: needs-hands: reset-gpu GPU3 did not mend it: gpu.ecc_errors"), reason
        archives = lab("ssh", "node02", "--", "ls", "/var/lib/gpucheck/rma", timeout=60).stdout.split()
        assert len(archives) == 1 and archives[0].startswith("rma-node02-GPU3-") and reason.endswith(
            f"evidence: {archives[0]}")

        reports = tmp_path / "reports"
        reports.mkdir()
        for name in lab("ssh", "node01", "--", "ls", "/var/lib/gpucheck/reports", timeout=60).stdout.split():
            text = lab("ssh", "node01", "--", "cat", f"/var/lib/gpucheck/reports/{name}", timeout=60).stdout
            (reports / name).write_text(text)
        store = tmp_path / "history.sqlite"
        done = run_gpucheck(["history", "import", "--store", str(store), str(reports)])
        assert done.returncode == 0, done.stderr
        rows = Store(store).query("SELECT state FROM transitions WHERE at >= (SELECT max(at) FROM transitions "
                                  "WHERE state = 'detected')")
        assert sorted(r["state"] for r in rows) == sorted(["detected", "drained", "repairing", "proving",
                                                           "returned"])
    finally:
        for node, env in kept.items():
            lab("ssh", node, "--", f"printf %s {shlex.quote(env)} > /etc/default/gpucheck", timeout=60)
            lab("fault", node, "scenario", "dgx-h100", timeout=120)
            watching.resume(node, slurm)


def test_turning_it_off_stops_and_disables_the_unit(watching):
    agent_stage(False)
    assert unit_state() == "inactive"
    enabled = lab("ssh", NODE, "--", "systemctl", "is-enabled", "gpucheck-watch", check=False, timeout=60)
    assert enabled.stdout.strip() == "disabled"
