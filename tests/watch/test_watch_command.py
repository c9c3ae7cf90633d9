"""`gpucheck watch` run as the systemd unit runs it, against the fake NVML and a real Slurm (tests/slurmkit.py):
a planted Xid line drains the node with the watcher's reason, a stepped ECC counter is judged by gpu.ecc_errors,
a restart never judges an old line again, a hung NVML or a cut log leaves it watching, and the breaker holds a
drain past its share of the fleet."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import psutil
import pytest

import slurmkit
from lab import ib_ports
from support import wait_for
from watchkit import Watch

XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x404490=0x80000002"


OTHERS = ("gpu-b", "gpu-c", "gpu-d")  # no slurmd behind them: drained by hand for the breaker's test


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm"), OTHERS) as cluster:
        yield cluster


@pytest.fixture
def watch(tmp_path, slurm):
    if "DRAIN" in slurm.state()[0]:
        slurm.set(state="resume")
    w = Watch(tmp_path, slurm.env)
    yield w
    w.stop()


def test_an_xid_line_drains_the_node_at_once_and_a_restart_does_not_judge_it_again(watch, slurm):
    watch.start()
    watch.plant(XID79)
    said = watch.wait("slurm: drained")
    assert f"drained {slurmkit.NODE}: gpucheck: watch: gpu.xid GPU 0000:18:00 has fallen off the bus" in said
    state, reason = slurm.state()
    assert "DRAIN" in state and reason.startswith("gpucheck: watch: gpu.xid")
    kept = wait_for(watch.reports, 10, "the kept report")  # kept just after Slurm was told
    assert len(kept) == 1 and kept[0].name.endswith("-fail.json")  # kept as every run is, for the history
    facts = json.loads(kept[0].read_text())["facts"]
    assert facts["watch"]["source"] == "kernel_log" and facts["slurm"]["action"] == "drain"  # its transitions
    metrics = wait_for(lambda: 'action="drain"' in (text := watch.metrics.read_text()) and text, 10, "the metrics")
    host = f'host="{socket.gethostname()}"'
    assert f'gpucheck_watch_check_status{{{host},check="gpu.xid",status="fail"}} 1' in metrics
    assert f'gpucheck_watch_events_total{{{host},source="kernel_log"}} 1' in metrics
    assert f'gpucheck_watch_slurm_actions_total{{{host},action="drain"}} 1' in metrics
    assert not (watch.tmp / "prom" / "gpucheck.prom").exists()  # the node run's file is never the watcher's
    watch.stop()
    watch.start()
    watch.plant(XID13)  # an application's Xid: judged, passes, and the old line is not read again
    said = watch.wait("gpu.xid pass")
    assert "Xid 79" not in said and "fallen off" not in said
    assert slurm.state()[1].startswith("gpucheck: watch: gpu.xid")  # a pass never resumes


def test_a_stepped_ecc_counter_is_judged_by_its_check(watch, slurm):
    watch.start()
    text = watch.scenario.read_text()
    stepped = watch.tmp / "stepped.scn"
    stepped.write_text(text + "\ngpu.0.ecc_uncorrected_volatile = 2\n")
    os.replace(stepped, watch.scenario)  # as `lab fault HOST scenario` replaces it
    said = watch.wait("slurm: drained")
    assert "GPU0 ecc_uncorrected 0 -> 2" in said and "gpu.ecc_errors fail" in said
    assert slurm.state()[1].startswith("gpucheck: watch: gpu.ecc_errors")


def test_a_flapping_infiniband_port_drains_the_node_at_once(watch, slurm):
    """An InfiniBand port's link_downed steps (the lab's simulated ConnectX-7 ports in the node's sysfs): the watcher
    judges ib.counters at its next poll, the flap fails it and drains the node; the judged counts are the next run's
    start (a health check after it does not judge the same flap again)."""
    ib_ports.write(watch.tmp / "sys", 2)
    watch.start()
    state = watch.tmp / "state" / "watch.json"
    wait_for(lambda: json.loads(state.read_text()).get("infiniband") == {"mlx5_0/1": 0, "mlx5_1/1": 0}, 30,
             "the ports' first reading, saved")
    ib_ports.step(watch.tmp / "sys", "mlx5_1/link_downed")
    said = watch.wait("slurm: drained")
    assert "mlx5_1/1 link_downed 0 -> 1" in said and "ib.counters fail" in said, said
    assert slurm.state()[1].startswith("gpucheck: watch: ib.counters")
    counted = json.loads((watch.tmp / "state" / "ib-counters.json").read_text())
    assert counted["ports"]["mlx5_1/1"]["link_downed"] == 1


def test_a_hung_nvml_and_a_cut_log_leave_it_watching(watch, slurm):
    watch.start()
    text = watch.scenario.read_text()
    hung = watch.tmp / "hung.scn"
    hung.write_text(text + "\nhang = nvmlDeviceGetTemperature\n")
    os.replace(hung, watch.scenario)
    said = watch.wait("gpu.temperature error", timeout=60)  # judged once: NVML hung is no finding on the node
    assert "did not answer within 2 s" in said and "slurm: drained" not in said
    watch.log.write_text("")  # cut, as `> kern.log` does
    watch.plant(XID79)
    said = watch.wait("slurm: drained", timeout=60)
    assert "gpu.xid fail" in said and watch.proc.poll() is None


def test_a_thermal_slowdown_and_fabric_manager_stopping_are_each_drained(watch, slurm, tmp_path):
    exe = tmp_path / "nv-fabricmanager"  # the check finds Fabric Manager by its process name, as on a DGX
    shutil.copy(shutil.which("sleep"), exe)
    watch.start(beside=exe)
    throttled = watch.tmp / "throttled.scn"
    throttled.write_text(watch.scenario.read_text() + "\ngpu.7.clocks_event_reasons = hw_thermal_slowdown\n")
    os.replace(throttled, watch.scenario)
    said = watch.wait("slurm: drained")
    assert "GPU7 clock_events 0 -> 64" in said and "gpu.clocks fail" in said
    assert slurm.state()[1].startswith("gpucheck: watch: gpu.clocks")
    slurm.set(state="resume")
    fabric_manager = next(p for p in psutil.process_iter(["exe"]) if p.info["exe"] == str(exe))
    fabric_manager.kill()  # gone, not yet reaped by the namespace's first process: a zombie is not running
    said = watch.wait("gpu.fabric_manager fail")
    assert "fabric_manager True -> False" in said
    watch.wait(f"drained {slurmkit.NODE}: gpucheck: watch: gpu.fabric_manager")


def test_the_breaker_holds_a_drain_past_its_share_of_the_fleet_and_says_so(slurm, tmp_path):
    if "DRAIN" in slurm.state()[0]:
        slurm.set(state="resume")
    for other in OTHERS[:2]:  # two of four nodes drained by gpucheck a moment ago
        slurm.set(other, state="drain", reason=f"gpucheck: watch: gpu.xid Xid 79 on {other}")
    watch = Watch(tmp_path, slurm.env, site="breaker: {fleet_fraction: 0.5}\n")
    try:
        watch.start()
        watch.plant(XID79)
        said = watch.wait("did NOT drain")
        assert (f"did NOT drain {slurmkit.NODE}, held by breaker: 3 of 4 nodes drained by gpucheck within 10 min "
                "(node.yaml breaker: fleet_fraction 0.5, group_fraction 0.5)") in said
        assert "it failed: gpucheck: watch: gpu.xid GPU 0000:18:00 has fallen off the bus" in said
        assert "DRAIN" not in slurm.state()[0]
    finally:
        watch.stop()
        for other in OTHERS[:2]:  # no slurmd behind them, so no resume: an admin's reason, which no breaker counts
            slurm.set(other, state="drain", reason="test: done")


@pytest.fixture
def full_disk(tmp_path):
    """A state directory on a filesystem with no space left (a 64 KiB tmpfs, filled)."""
    state = tmp_path / "full"
    state.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "gpucheck-test-full", str(state)], check=True)
    try:
        with (state / "filler").open("wb", buffering=0) as fh, pytest.raises(OSError, match="No space left"):
            while True:
                fh.write(b"\0" * 4096)
        yield state
    finally:
        subprocess.run(["umount", str(state)], check=True)


def test_a_full_disk_is_said_and_the_node_is_still_drained(watch, slurm, full_disk):
    watch.env["GPUCHECK_STATE_DIR"] = str(full_disk)
    watch.start(saving=False)
    said = watch.wait("cannot remember where it stood")
    assert "No space left on device" in said
    watch.plant(XID79)
    said = watch.wait("slurm: drained")
    assert "this report is not kept on the node" in said and "No space left on device" in said
    assert slurm.state()[1].startswith("gpucheck: watch: gpu.xid")


def test_nvml_gone_is_said_once_and_judged_never(watch, slurm):
    """The driver unloaded under a running watcher (an upgrade): NVML's calls answer DRIVER_NOT_LOADED."""
    watch.start()
    gone = watch.tmp / "gone.scn"
    gone.write_text(watch.scenario.read_text() + "\nfail = nvmlDeviceGetCount_v2 NVML_ERROR_DRIVER_NOT_LOADED\n")
    os.replace(gone, watch.scenario)
    said = watch.wait("not judged (a driver being replaced)")
    watch.plant(XID13)  # the loop goes on: a line after it is still read and judged
    said = watch.wait("gpu.xid pass")
    assert said.count("NVML: Driver Not Loaded") == 1 and " -> gpu.count" not in said
    assert "DRAIN" not in slurm.state()[0]
