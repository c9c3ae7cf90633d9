"""Stage `burn` on recorded runs: each node's burn answers with a node report built from the real H200 run
(tests/fixtures/measured/h200-141gb-driver580/gpucheck-node-full-burn10-derived.json: its gpu.burn result and
facts.burnin), the all-reduce from the fake cluster of cluster_lab_helpers. What the stage runs, how it judges the
GPUs, the racks and the fabric, whom it blames, its rounds, and Ctrl-C in the middle of a round."""

from __future__ import annotations

import _thread
import copy
import dataclasses
import json
import shlex
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_lab_helpers import FakeRunner, good_rank, make_ctx

from gpucheck.cluster.context import ClusterContext
from gpucheck.cluster.ssh.result import Remote
from gpucheck.cluster.stages import burn, burn_verdict, shape
from gpucheck.model import Status

RECORDED = (Path(__file__).resolve().parents[1] / "fixtures" / "measured" / "h200-141gb-driver580"
            / "gpucheck-node-full-burn10-derived.json")
NODES = ["node01", "node02", "node03", "node04"]
THERMAL = "GPU0 (00000000:00:06.0): hw_thermal_slowdown in 41 of 60 samples"


def recorded(host: str, temperature: float = 61, power: float = 690.0, thermal: bool = False) -> dict[str, Any]:
    """The real node report cut to what `gpucheck node --only gpu.burn` gives, its GPU's series over the burn set
    (flat at `power` W and `temperature` C), the node's verdict a thermal failure when `thermal`."""
    real = json.loads(RECORDED.read_text())
    result = copy.deepcopy(next(r for r in real["results"] if r["check"] == "gpu.burn"))
    gpu = copy.deepcopy(real["facts"]["burnin"]["gpus"]["GPU0"])
    gpu = {k: gpu[k] for k in ("sku", "burn_TFLOPS_median", "burn_temperature_C_max")}
    gpu["burn_temperature_C_max"] = result["measured"]["GPU0"]["temperature_C_max"] = temperature
    gpu["burn_timeline"] = {"TFLOPS": {"every_s": 1.0, "TFLOPS": [661.1] * 10},
                            "nvml": {"every_s": 1.0, "temperature_C": [temperature] * 10, "power_W": [power] * 10,
                                     "sm_clock_MHz": [1980] * 10}}
    if thermal:
        result.update(status="fail", reason=THERMAL)
    return {**{k: real[k] for k in ("gpucheck_version", "profile", "started", "thresholds")}, "host": host,
            "exit_code": 2 if thermal else 0, "counts": {"fail" if thermal else "pass": 1}, "results": [result],
            "duration_s": 12.0, "facts": {"burnin": {"gpus": {"GPU0": gpu}}}}


@dataclasses.dataclass
class BurnRunner(FakeRunner):
    """The fake cluster, where each node's burn prints reports[node] (a function of the round) after `burn_s`."""

    reports: dict[str, Any] = dataclasses.field(default_factory=dict)
    burn_s: float = 0.6
    rounds: dict[str, int] = dataclasses.field(default_factory=dict)

    def finish(self, node: str, cmd: str, killed: bool) -> Remote:
        if "gpu.burn" not in cmd:
            return super().finish(node, cmd, killed)
        self.rounds[node] = self.rounds.get(node, 0) + 1
        time.sleep(self.burn_s)
        made = self.reports.get(node) or recorded(node)
        report = made(node, self.rounds[node]) if callable(made) else made
        return Remote(node, cmd, json.dumps(report) + "\n", "", report["exit_code"])


def burn_ctx(names: list[str], racks: dict[str, str] | None = None, seconds: float = 1.0) -> ClusterContext:
    ctx = make_ctx(names, gpus=1, stages_asked=("burn",), burn_seconds=seconds)
    ctx.inventory.hosts = [dataclasses.replace(h, vars={"rack": (racks or {}).get(h.name)})
                           for h in ctx.inventory.hosts]
    return ctx


def runner(ctx: ClusterContext, **kwargs: Any) -> BurnRunner:
    return BurnRunner({h.name: h.address for h in ctx.inventory.hosts}, **kwargs)


def by_check(results: list) -> dict[str, Any]:
    return {r.check: r for r in results}


def test_a_healthy_cluster_burns_at_once_and_passes_with_the_fabric_measured_cold_and_loaded() -> None:
    ctx = burn_ctx(NODES)
    fake = runner(ctx)
    found = by_check(burn.burn_stage(ctx, fake))
    assert set(found) == {burn_verdict.GPUS, burn_verdict.RACKS, burn_verdict.FABRIC}
    assert all(r.status == Status.PASS for r in found.values()), {c: r.reason for c, r in found.items()}
    burns = [shlex.split(c) for _, c in fake.commands if "gpu.burn" in c]
    assert len(burns) == 4 and all(b[b.index("--burn-seconds") + 1] == "1" for b in burns)
    assert all(b[b.index("--only") + 1] == "gpu.burn" and "json" in b for b in burns)
    assert ctx.burn["rounds_done"] == 1 and not ctx.burn["interrupted"]
    fabric = ctx.burn["fabric"]
    assert fabric["cold"]["status"] == "pass" and fabric["loaded"], fabric  # an all-reduce ran during the burn
    assert ctx.burn["nodes"]["node03"]["gpus"]["GPU0"]["burn_TFLOPS_median"] == 661.1
    assert ctx.burn["nodes"]["node03"]["gpus"]["GPU0"]["burn_timeline"]["nvml"]["power_W"] == [690.0] * 10
    assert ctx.figures["burn_all_nodes_TFLOPS_min_gpu"] == {n: 661.1 for n in NODES}
    assert "661.1 TFLOP/s" in found[burn_verdict.GPUS].reason


def test_a_rack_throttling_under_load_is_blamed_on_its_nodes_and_shape_names_the_rack() -> None:
    racks = {"node01": "A", "node02": "A", "node03": "B", "node04": "B"}
    ctx = burn_ctx(NODES, racks)
    hot = {n: recorded(n, temperature=92, thermal=True) for n in ("node03", "node04")}
    found = by_check(burn.burn_stage(ctx, runner(ctx, reports=hot)))
    gpus = found[burn_verdict.GPUS]
    assert gpus.status == Status.FAIL and set(gpus.nodes) == {"node03", "node04"}
    assert gpus.nodes["node03"] == THERMAL and "hw_thermal_slowdown" in gpus.reason
    ctx.results.extend(found.values())
    blamed = shape.shape_stage(ctx)[0]
    assert blamed.status == Status.WARN and blamed.reason.startswith("rack B: 2 of 2 nodes (node03, node04)")
    assert "cluster.burn.gpus" in blamed.reason


def test_a_node_hotter_or_drawing_less_power_than_its_rack_is_out_of_line() -> None:
    names = [f"node{i:02d}" for i in range(1, 7)]
    ctx = burn_ctx(names, {n: "A" if i < 3 else "B" for i, n in enumerate(names)})
    reports = {"node02": recorded("node02", temperature=75), "node05": recorded("node05", power=520.0)}
    racks = by_check(burn.burn_stage(ctx, runner(ctx, reports=reports)))[burn_verdict.RACKS]
    assert racks.status == Status.WARN and set(racks.nodes) == {"node02", "node05"}, racks.reason
    assert "75 °C, +14 °C over rack A's median 61 °C" in racks.nodes["node02"]
    assert "520 W, 0.75 x rack B's median 690 W" in racks.nodes["node05"]


def test_two_nodes_per_rack_are_compared_with_the_cluster_and_too_few_are_not_compared() -> None:
    ctx = burn_ctx(NODES, {"node01": "A", "node02": "A", "node03": "B", "node04": "B"})
    hot = {"node04": recorded("node04", temperature=80)}
    racks = by_check(burn.burn_stage(ctx, runner(ctx, reports=hot)))[burn_verdict.RACKS]
    assert racks.status == Status.WARN and "+19 °C over the cluster's median 61 °C" in racks.reason, racks.reason
    ctx = burn_ctx(NODES[:2])
    assert by_check(burn.burn_stage(ctx, runner(ctx)))[burn_verdict.RACKS].status == Status.SKIP


def test_a_fabric_far_slower_under_the_burn_than_cold_warns() -> None:
    ctx = burn_ctx(NODES)
    calls = {"n": 0}

    def rank(host: str, rank_: int, size: int, script: str) -> dict[str, Any]:
        result = good_rank(host, rank_, size, script)
        if rank_ == 0:
            calls["n"] += 1
        if calls["n"] > 1:  # every run after the cold one
            result["busbw_GBps"] = result["busbw_GBps"] / 2
        return result

    fabric = by_check(burn.burn_stage(ctx, runner(ctx, rank_result=rank)))[burn_verdict.FABRIC]
    assert fabric.status == Status.WARN and "0.50 x the cold" in fabric.reason, fabric.reason
    assert fabric.measured["cold_busbw_GBps"] == pytest.approx(1.5, rel=1e-3)


def test_a_long_burn_runs_in_rounds_and_joins_their_series() -> None:
    ctx = burn_ctx(NODES[:2], seconds=700)
    count, each = burn.rounds_of(700)
    assert (count, round(each, 1)) == (3, 233.3)
    ctx.options.burn_seconds = 3.0  # the same plan, short: three rounds of one second
    burn.ROUND_S, saved = 1.0, burn.ROUND_S
    try:
        results = burn.burn_stage(ctx, runner(ctx, burn_s=0.1))
    finally:
        burn.ROUND_S = saved
    assert ctx.burn["rounds_done"] == 3 and by_check(results)[burn_verdict.GPUS].status == Status.PASS
    gpu = ctx.burn["nodes"]["node01"]["gpus"]["GPU0"]
    assert gpu["burn_TFLOPS_rounds"] == [661.1] * 3 and len(gpu["burn_timeline"]["TFLOPS"]["TFLOPS"]) == 30


def test_ctrl_c_in_a_round_ends_every_burn_and_keeps_the_finished_rounds() -> None:
    ctx = burn_ctx(NODES[:2], seconds=2.0)
    fake = runner(ctx, burn_s=0.5)
    started: list[Any] = []
    start = fake.start

    def interrupting(node: str, cmd: str, timeout: float) -> Any:
        if "gpu.burn" not in cmd:
            return start(node, cmd, timeout)
        started.append(start(node, cmd, timeout))
        if len(started) == 4:
            _thread.interrupt_main()  # Ctrl-C once round 2's burns run on both nodes
        return started[-1]

    fake.start = interrupting  # type: ignore[method-assign]
    burn.ROUND_S, saved = 1.0, burn.ROUND_S
    # Ctrl-C as a terminal gives it, whatever this run inherited: a suite started in the background of a
    # non-interactive shell ignores SIGINT, and interrupt_main() then does nothing.
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            burn.burn_stage(ctx, fake)
    finally:
        burn.ROUND_S = saved
        signal.signal(signal.SIGINT, handler)
    assert ctx.burn["interrupted"] and ctx.burn["rounds_done"] == 1
    assert [b.killed for b in started] == [False, False, True, True]  # round 2's burns were ended, on both nodes
    gpus = next(r for r in ctx.results if r.check == burn_verdict.GPUS)
    assert gpus.status == Status.PASS and "1 of 2 round(s) of 1 s done), interrupted" in gpus.reason


def test_the_stage_is_opt_in_and_a_node_whose_burn_did_not_report_is_an_error() -> None:
    ctx = make_ctx(NODES[:2], gpus=1)
    skipped = burn.burn_stage(ctx, runner(ctx))
    assert [r.status for r in skipped] == [Status.SKIP] and "--burn-minutes" in skipped[0].reason
    ctx = burn_ctx(NODES[:2])
    broken = {"node02": lambda node, _round: {"exit_code": 3}}
    gpus = by_check(burn.burn_stage(ctx, runner(ctx, reports=broken)))[burn_verdict.GPUS]
    assert gpus.status == Status.ERROR and "node02" in gpus.reason and not gpus.nodes


@pytest.mark.parametrize("answer", ["no gpu.burn", "skip"])
def test_a_node_that_did_not_burn_did_not_pass_the_burn(answer: str) -> None:
    """A node whose answer (exit 0, a well-formed report) holds no gpu.burn verdict, or a skipped one, is an error of
    the stage, never a pass by omission: it did not burn."""
    def did_not_burn(node: str, _round: int) -> dict[str, Any]:
        report = recorded(node)
        if answer == "skip":
            report["results"][0].update(status="skip", reason="no CUDA device")
        else:  # it judged something else, and passed
            report["results"] = [{"check": "gpu.count", "status": "pass", "reason": "8 GPUs", "measured": 8}]
        return report

    ctx = burn_ctx(NODES[:3])
    gpus = by_check(burn.burn_stage(ctx, runner(ctx, reports={"node02": did_not_burn})))[burn_verdict.GPUS]
    assert gpus.status == Status.ERROR, gpus.reason
    assert "node02: " in gpus.reason and "it did not burn" in gpus.reason, gpus.reason
    assert gpus.measured["node_status"] == {"node01": "pass", "node02": "error", "node03": "pass"}


def test_a_burn_that_cannot_be_followed_is_that_node_s_error_not_a_crash() -> None:
    ctx = burn_ctx(NODES[:2])
    fake = runner(ctx)
    start = fake.start
    started: list[Any] = []

    def broken(node: str, cmd: str, timeout: float) -> Any:
        if "gpu.burn" in cmd and node == "node02":
            raise OSError("the SSH layer broke")  # a bug below the stage: node01's burn was started already
        if "gpu.burn" in cmd:
            started.append(start(node, cmd, timeout))
            return started[-1]
        return start(node, cmd, timeout)

    fake.start = broken  # type: ignore[method-assign]
    gpus = by_check(burn.burn_stage(ctx, fake))[burn_verdict.GPUS]
    assert gpus.status == Status.ERROR and "node02: its burn gave no outcome" in gpus.reason, gpus.reason
    assert "(OSError: the SSH layer broke)" in gpus.reason
    assert [b.killed for b in started] == [True]  # node01's burn, started before the break, was ended
