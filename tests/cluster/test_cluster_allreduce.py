"""The all-reduce stage's threshold: across nodes the inter-node minimum
(bandwidth.nccl_allreduce_internode_busbw_GBps_min) judges it, the node's own intra-node minimum only when the
profile has no inter-node one, and the reason says which. The run is the real 2-node, 16-GPU H100 nccl-tests
output (tests/fixtures/real/nccl-tests: 338.82 GB/s bus bandwidth at 8 GiB) answered by a fake RemoteHosts."""

from __future__ import annotations

from typing import Any

import pytest

from gpucheck.cluster.context import ClusterContext, NodeOutcome, Options
from gpucheck.cluster.inventory import Host, Inventory
from gpucheck.cluster.ssh.result import Remote
from gpucheck.cluster.stages import allreduce
from gpucheck.model import Status
from support import REAL

NODES = ["node01", "node02"]
INTER = "nccl_allreduce_internode_busbw_GBps_min"
INTRA = "nccl_allreduce_busbw_GBps_min"
NCCL_TESTS = REAL / "nccl-tests" / "h100-2node-16gpu-allreduce-gcp-a3mega.txt"


class NcclTestsHosts:
    """all_reduce_perf on the launcher's PATH; mpirun prints the recorded run."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []

    def run(self, name: str, cmd: str, timeout: float) -> Remote:
        self.commands.append((name, cmd))
        if cmd == "command -v all_reduce_perf":
            return Remote(name, cmd, stdout="/usr/local/bin/all_reduce_perf\n", exit=0)
        assert "mpirun" in cmd and "/usr/local/bin/all_reduce_perf" in cmd, cmd
        return Remote(name, cmd, stdout=NCCL_TESTS.read_text(), exit=0)


def context(bandwidth: dict[str, Any], names: list[str] = NODES) -> ClusterContext:
    hosts = [Host(n, f"10.0.0.{11 + i}", 22, "root", None, (), True) for i, n in enumerate(names)]
    ctx = ClusterContext(Options(), Inventory(["test"], "all", None, hosts))
    for n in names:
        report = {"host": n, "profile": "dgx-h100", "exit_code": 0, "results": [],
                  "facts": {"profile": "dgx-h100", "gpu_count": 8}, "thresholds": {"bandwidth": dict(bandwidth)}}
        ctx.nodes[n] = NodeOutcome(n, Status.PASS, "", "report", report=report)
    return ctx


def stage(bandwidth: dict[str, Any]):
    fake = NcclTestsHosts()
    results = allreduce.allreduce_stage(context(bandwidth), fake)
    assert len(results) == 1 and any("mpirun" in c for _, c in fake.commands)
    return results[0]


def test_the_inter_node_minimum_judges_a_multi_node_run_not_the_intra_node_one() -> None:
    result = stage({INTRA: 400, INTER: 300})
    assert result.status == Status.PASS, result.reason
    assert result.measured["busbw_GBps"] == pytest.approx(338.82) and result.expected == ">= 300 GB/s"
    assert f">= 300 GB/s (bandwidth.{INTER})" in result.reason


def test_below_the_inter_node_minimum_fails_naming_it() -> None:
    result = stage({INTRA: 200, INTER: 350})
    assert result.status == Status.FAIL
    assert f"bus bandwidth 338.82 GB/s < 350 GB/s (bandwidth.{INTER}) across 2 nodes x 8 GPUs" in result.reason


def test_without_an_inter_node_minimum_the_intra_node_one_judges_and_the_reason_says_so() -> None:
    result = stage({INTRA: 400})
    assert result.status == Status.FAIL and result.expected == ">= 400 GB/s"
    assert f"< 400 GB/s (bandwidth.{INTRA}: the profile sets no {INTER})" in result.reason


def test_a_null_inter_node_minimum_is_no_minimum() -> None:
    result = stage({INTRA: 300, INTER: None})
    assert result.status == Status.PASS and f">= 300 GB/s (bandwidth.{INTRA}: the profile sets no {INTER})" in \
        result.reason


def test_no_minimum_at_all_is_measured_not_judged() -> None:
    result = stage({})
    assert result.status == Status.PASS and result.expected is None
    assert f"(the profile sets neither {INTER} nor {INTRA}: not judged)" in result.reason


def test_one_node_is_judged_by_the_intra_node_minimum() -> None:
    ctx = context({INTRA: 400, INTER: 300}, ["node01"])
    assert allreduce.minimum_for(ctx, ["node01"]) == (400, f"bandwidth.{INTRA}")
    assert allreduce.minimum_for(ctx, []) == (None, f"the profile sets no {INTRA}: not judged")
