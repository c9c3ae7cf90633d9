"""`gpucheck cluster --drain` (cluster/slurm/drain.py) against a real Slurm (tests/slurmkit.py): the report's drain
list drained with `gpucheck: cluster:` reasons, a node that passed resumed only from gpucheck's own drain, an admin's
drain and a node that could not be checked left alone, a node Slurm does not know one line of its own."""

from __future__ import annotations

import os

import pytest
from cluster_lab_helpers import make_ctx

import slurmkit
from gpucheck.cluster import handoff
from gpucheck.cluster.slurm.drain import apply_drain
from gpucheck.model import Status

OTHERS = ("gpu-b", "gpu-c", "gpu-d")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurmkit.running(tmp_path_factory.mktemp("slurm"), OTHERS) as cluster:
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)  # scontrol, run by the code under test, finds it here
        yield cluster
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def report(names: list[str], failed: tuple[str, ...], errors: tuple[str, ...] = ()) -> tuple:
    ctx = make_ctx(names, failed=failed)
    for name in failed:
        ctx.nodes[name].reason = "gpu.ecc_errors GPU3: 2 volatile uncorrected ECC error(s)"
    for name in errors:
        ctx.nodes[name].status, ctx.nodes[name].kind, ctx.nodes[name].report = Status.ERROR, "timeout", None
    return ctx, handoff.document(ctx, "2026-11-23T00:00:00+00:00", 1.0, ["gpucheck", "cluster"], True)


def test_the_drain_list_is_drained_and_a_repaired_node_resumed(slurm):
    slurm.set("gpu-a", state="drain", reason="gpucheck: gpu.xid Xid 79 on GPU2")  # gpucheck's drain of last run
    slurm.set("gpu-c", state="drain", reason="DIMM replacement")  # an admin's
    ctx, doc = report(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], failed=("gpu-b", "gpu-c"), errors=("gpu-d",))
    done, error = apply_drain(ctx, doc)
    assert error is None, done
    actions = {d["node"]: d["action"] for d in done}
    assert actions == {"gpu-a": "resume", "gpu-b": "drain", "gpu-c": "keep", "gpu-d": "keep"}
    assert "DRAIN" not in slurm.state("gpu-a")[0]
    state, reason = slurm.state("gpu-b")
    assert "DRAIN" in state
    assert reason == "gpucheck: cluster: gpu.ecc_errors GPU3: 2 volatile uncorrected ECC error(s)"
    assert slurm.state("gpu-c")[1] == "DIMM replacement"
    assert "DRAIN" not in slurm.state("gpu-d")[0]
    again, _ = apply_drain(ctx, doc)  # the same report twice: nothing changes
    assert {d["node"]: d["action"] for d in again}["gpu-b"] == "keep"


def test_a_node_slurm_does_not_know_is_its_own_line_and_the_rest_go_on(slurm):
    ctx, doc = report(["nosuch", "gpu-b"], failed=("nosuch", "gpu-b"))
    ctx.inventory.hosts[1].vars["slurm_node_name"] = "gpu-d"  # its Slurm name differs from the inventory's
    done, error = apply_drain(ctx, doc)
    assert [d["action"] for d in done] == ["error", "drain"] and done[1]["slurm_node"] == "gpu-d"
    assert error.startswith("1 node(s) not updated: Slurm does not know node nosuch")
    assert "DRAIN" in slurm.state("gpu-d")[0]
