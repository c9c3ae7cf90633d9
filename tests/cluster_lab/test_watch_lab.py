"""gpucheck watch on a lab node, for real: turned on by site.yml's agent stage (gpucheck_agent_watch, its systemd
unit under the node's own systemd), it drains node01 in admin01's slurmctld as an Xid line is logged (the lab's
kernel log file: lab/kernel_log.py) and as the node's simulated GPU steps its ECC counter (`lab fault ...
scenario`, which a running NVML sees); turned off again by the same stage, it leaves no watcher behind. The
latency is bench/watch_latency.py's own measurement (a few plants here; its 20 are the issue's figure)."""

from __future__ import annotations

import statistics
import sys

import pytest
from cluster_lab_helpers import ROOT, ansible_playbook, lab

from support import wait_for

pytestmark = pytest.mark.lab
NODE = "node01"


def agent_stage(watch: bool) -> None:
    done = ansible_playbook("site.yml", "--tags", "agent", "--limit", NODE, "-e", f"gpucheck_agent_watch={watch}",
                            timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def unit_state() -> str:
    return lab("ssh", NODE, "--", "systemctl", "is-active", "gpucheck-watch", check=False, timeout=60).stdout.strip()


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
        watch_latency.resume(NODE, slurm)


def test_an_xid_line_drains_the_node_in_slurm_within_seconds(watching, slurm, lab4):
    assert unit_state() == "active"
    latencies = watching.xid_to_drain(NODE, slurm, plants=3)
    lab4.figures["watch_xid_to_sinfo_s"] = [round(s, 2) for s in latencies]
    journal = lab("ssh", NODE, "--", "journalctl", "-u", "gpucheck-watch", "--no-pager", "-q", check=False,
                  timeout=60).stdout
    assert f"drained {NODE}: gpucheck: watch: gpu.xid GPU 0000:18:00 has fallen off the bus" in journal, journal[-3000:]
    lab4.figures["watch_xid_to_sinfo_median_s"] = round(statistics.median(latencies), 2)


def test_an_ecc_counter_stepping_under_a_running_nvml_drains_it(watching, slurm):
    lab("fault", NODE, "scenario", "ecc-uncorrected", timeout=120)
    reason = wait_for(lambda: (r := watching.sinfo_reason(NODE, slurm)).startswith("gpucheck: watch:") and r, 60,
                      "the watcher's drain in sinfo -R")
    assert reason.startswith("gpucheck: watch: gpu.ecc_errors GPU3"), reason


def test_turning_it_off_stops_and_disables_the_unit(watching):
    agent_stage(False)
    assert unit_state() == "inactive"
    enabled = lab("ssh", NODE, "--", "systemctl", "is-enabled", "gpucheck-watch", check=False, timeout=60)
    assert enabled.stdout.strip() == "disabled"
