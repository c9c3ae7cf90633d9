"""Fixtures of the cluster-stage lab tests: one 4-host lab for the session (three simulated DGX H100s and
one with uncorrected ECC errors) and its admin node admin01 (the Slurm controller: `slurm`),
provisioned from the golden image, with this checkout's agent, always taken down at the end. Needs root and
no other lab on the machine: skipped otherwise, failed under CI (labkit.lab_unavailable)."""

from __future__ import annotations

import glob
import sys
import time
from collections.abc import Iterator

import pytest
from cluster_lab_helpers import FAULTY, GOLDEN_GLOB, ROOT, SCENARIOS, LabState, changed, lab, refresh_agent, scheduler

from lab import config
from labkit import lab_unavailable, require_root


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: integration tests that bring up the lab (root, network namespaces)")


@pytest.fixture(scope="session")
def lab4() -> Iterator[LabState]:
    require_root()
    state = LabState()
    if config.STATE_FILE.exists():
        lab_unavailable(f"lab instance {config.INSTANCE} is already up on this machine: not taking it over")
    began = time.monotonic()
    # reuses the golden image when the playbook tree is unchanged; waits for another instance building it
    lab("build", timeout=3600)
    state.timings["golden_s"] = round(time.monotonic() - began, 1)
    if not glob.glob(GOLDEN_GLOB):
        pytest.fail("no golden image after `python3 -m lab build`")
    try:
        began = time.monotonic()
        lab("up", "--admin", "--hosts", "4", "--scenarios", ",".join(SCENARIOS), timeout=1200)
        state.timings["lab_up_s"] = round(time.monotonic() - began, 1)
        state.timings["agent_refresh_s"] = round(refresh_agent(), 1)
        yield state
    finally:
        lab("down", check=False, timeout=600)
        print("\ncluster lab timings:", state.timings, "\ncluster lab figures:", state.figures)


@pytest.fixture(scope="session")
def slurm(lab4: LabState) -> dict[str, str]:
    """The scheduler stage run for real (twice: the second changes nothing), then this machine as a client of
    admin01's slurmctld: the environment scontrol, sinfo, squeue and sbatch need here."""
    first = scheduler()
    assert set(changed(first.stdout)) == {"admin01", "node01", "node02", "node03", FAULTY}
    lab4.figures["scheduler_first_run_changed"] = changed(first.stdout)
    again = scheduler()
    assert set(changed(again.stdout).values()) == {0}, again.stdout[-4000:]
    sys.path.insert(0, str(ROOT))
    from lab import slurm as lab_slurm

    return lab_slurm.client_env()
