"""The lab stages (network, mpi, allreduce, smoke) on a fake RemoteHosts: what they run, how they judge,
whom they blame. No SSH, no lab: the commands are answered from a model of the cluster."""

from __future__ import annotations

import json
import shlex

import pytest
from cluster_lab_helpers import FakeRunner, good_rank, make_ctx, runner_for

from gpucheck.cluster import job_image, nodes
from gpucheck.cluster.context import ClusterResult
from gpucheck.cluster.stages import allreduce, mpi, network, smoke
from gpucheck.model import Status
from gpucheck.report import cluster as report

NODES4 = ["node01", "node02", "node03", "node04"]


def only(results: list) -> ClusterResult:
    assert len(results) == 1, results
    return results[0]


# ---------------------------------------------------------------- network

def test_healthy_pairs_pass_every_pair_once_and_per_node_figures() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, link={n: 9.0 for n in NODES4})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.PASS, result.reason
    assert len(ctx.pairs) == 6
    assert {frozenset((p["a"], p["b"])) for p in ctx.pairs} == {frozenset((a, b)) for a in NODES4 for b in NODES4
                                                                if a < b}
    assert all(p["value"] == 9.0 and p["unit"] == "Gb/s" and p["status"] == "pass" for p in ctx.pairs)
    assert ctx.figures["net_Gbps"] == {n: 9.0 for n in NODES4}
    # the built-in TCP test: a server on b, the sender on a, to b's inventory address
    serves = [c for _, c in fake.commands if " net serve " in f" {c} "]
    sends = [shlex.split(c) for _, c in fake.commands if " net send " in f" {c} "]
    assert len(serves) == len(sends) == 6
    assert all(argv[3].startswith("10.0.0.") and argv[argv.index("--seconds") + 1] == "3" for argv in sends)


@pytest.mark.parametrize("names", [NODES4, NODES4[:3], [*NODES4, "node05", "node06"]])
def test_a_slow_node_is_blamed_not_just_its_pairs(names: list[str]) -> None:
    """With 3 nodes two pairs of three are slow: the plain median would be the slow figure."""
    ctx = make_ctx(names)
    fake = runner_for(ctx, link={n: (0.2 if n == "node03" else 9.0) for n in names})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.FAIL, result.reason
    assert list(result.nodes) == ["node03"]
    assert "slow with every known-good partner" in result.nodes["node03"]
    assert result.measured["bad_nodes"] == ["node03"]
    statuses = {frozenset((p["a"], p["b"])): p["status"] for p in ctx.pairs}
    assert all((s == "fail") == ("node03" in pair) for pair, s in statuses.items())
    assert ctx.figures["net_Gbps"]["node03"] == 0.2


def test_a_slow_path_between_two_good_nodes_warns_and_drains_nobody() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, link={n: 9.0 for n in NODES4}, path={frozenset(("node01", "node02")): 1.0})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.WARN, result.reason
    assert "slow path node01-node02" in result.reason
    assert not result.nodes


def test_a_pair_slow_once_and_fast_when_retested_passes() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, link={n: 9.0 for n in NODES4}, flaky={frozenset(("node02", "node04"))})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.PASS, result.reason
    assert "slow once, fast when re-measured: node02-node04" in result.reason


def test_infiniband_profiles_use_ib_write_bw_and_the_profile_minimum() -> None:
    ctx = make_ctx(NODES4, profile="dgx-h100")
    fake = runner_for(ctx, link={n: (300.0 if n == "node02" else 392.0) for n in NODES4})
    result = only(network.network_stage(ctx, fake))
    clients = [c for _, c in fake.commands if c.startswith("ib_write_bw") and "10.0.0." in c]
    assert clients and all("--report_gbits" in c for c in clients)
    assert result.measured["method"] == "ib_write_bw"
    assert result.measured["threshold_Gbps"] == 360  # the profile's ib_write_bw_Gbps_min beats 0.7 x 392
    assert result.status == Status.FAIL and list(result.nodes) == ["node02"]


def test_ib_address_from_the_inventory_is_the_target() -> None:
    ctx = make_ctx(NODES4[:2], profile="dgx-h100")
    ctx.inventory.hosts[1].vars["ib_address"] = "192.168.100.12"
    fake = runner_for(ctx, link={n: 390.0 for n in NODES4[:2]})
    fake.addresses["node02"] = "192.168.100.12"
    only(network.network_stage(ctx, fake))
    assert any(c.endswith("192.168.100.12") for _, c in fake.commands if c.startswith("ib_write_bw"))


def test_fewer_than_two_usable_nodes_skip_and_failed_nodes_are_left_out() -> None:
    ctx = make_ctx(NODES4[:2], failed=("node02",))
    result = only(network.network_stage(ctx, runner_for(ctx)))
    assert result.status == Status.SKIP
    assert "node02 (failed its node checks)" in result.reason


def test_a_pair_that_cannot_be_measured_is_an_error_never_a_slow_link() -> None:
    ctx = make_ctx(NODES4[:2])

    class NoServer(FakeRunner):
        def listens(self, node: str, cmd: str) -> bool:
            return False

        def finish(self, node: str, cmd: str, killed: bool):
            from gpucheck.cluster.ssh.result import Remote
            return Remote(node, cmd, "", "gpucheck: error: net serve: Address already in use", 3)

    fake = NoServer({h.name: h.address for h in ctx.inventory.hosts})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.ERROR
    assert "Address already in use" in result.reason and not result.nodes


def test_network_sample_limits_the_rounds() -> None:
    names = [f"node{i:02d}" for i in range(1, 9)]
    ctx = make_ctx(names, network_sample=2)
    fake = runner_for(ctx, link={n: 9.0 for n in names})
    result = only(network.network_stage(ctx, fake))
    assert result.status == Status.PASS
    assert len(ctx.pairs) == 8  # 2 rounds of 4 disjoint pairs, not 28


# ---------------------------------------------------------------- mpi

def test_mpi_every_rank_on_its_own_host_passes() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx)
    result = only(mpi.mpi_stage(ctx, fake))
    assert result.status == Status.PASS, result.reason
    node, cmd = fake.commands[0]
    argv = shlex.split(cmd)
    assert node == "node01" and argv[0] == "mpirun"
    assert {"--allow-run-as-root", "--oversubscribe", "--tag-output"} <= set(argv)
    assert argv[argv.index("-H") + 1] == "10.0.0.11:1,10.0.0.12:1,10.0.0.13:1,10.0.0.14:1"


def test_mpi_names_the_node_it_cannot_start_on() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, mpi_broken={"node03"})
    result = only(mpi.mpi_stage(ctx, fake))
    assert result.status == Status.FAIL
    assert list(result.nodes) == ["node03"], result.reason
    assert "2-rank job with node01 failed" in result.nodes["node03"]


def test_mpi_rank_on_the_wrong_machine_is_named() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, hostname={"node04": "node02"})
    result = only(mpi.mpi_stage(ctx, fake))
    assert result.status == Status.FAIL and list(result.nodes) == ["node04"]
    assert "ran on host 'node02', expected 'node04'" in result.reason


def test_mpi_broken_launcher_is_blamed_alone() -> None:
    ctx = make_ctx(NODES4)
    fake = runner_for(ctx, mpi_broken={"node01"})
    result = only(mpi.mpi_stage(ctx, fake))
    assert result.status == Status.FAIL and list(result.nodes) == ["node01"], result.reason


def test_nodes_blamed_by_an_earlier_stage_are_left_out() -> None:
    ctx = make_ctx(NODES4)
    ctx.results.append(ClusterResult("cluster.consistency.driver", Status.FAIL, nodes={"node02": "driver 1 vs 2"}))
    fake = runner_for(ctx)
    result = only(mpi.mpi_stage(ctx, fake))
    assert result.status == Status.PASS
    assert "10.0.0.12" not in fake.commands[0][1]
    assert "node02 (cluster.consistency.driver: driver 1 vs 2)" in result.reason


# ---------------------------------------------------------------- all-reduce

def test_allreduce_builtin_on_cpu_nodes_reports_busbw_not_judged() -> None:
    ctx = make_ctx(NODES4[:3])
    fake = runner_for(ctx)
    result = only(allreduce.allreduce_stage(ctx, fake))
    assert result.status == Status.PASS, result.reason
    assert result.measured["busbw_GBps"] == pytest.approx(2.0 * 2 / 3, rel=1e-3)
    assert "not judged" in result.reason and "CPU" in result.reason
    assert {n for n, _ in fake.copies} == set(NODES4[:3])
    mpirun = next(shlex.split(c) for _, c in fake.commands if "mpirun" in c)
    assert "/opt/stacks/tf-horovod/bin/python" in mpirun and "/var/tmp/gpucheck/allreduce_bench.py" in mpirun
    assert mpirun[mpirun.index("-H") + 1] == "10.0.0.11:1,10.0.0.12:1,10.0.0.13:1"


def test_allreduce_with_nccl_tests_judges_busbw_against_the_profile() -> None:
    from support import REAL

    ctx = make_ctx(NODES4[:2], profile="dgx-h100")
    text = (REAL / "nccl-tests" / "h100-2node-16gpu-allreduce-gcp-a3mega.txt").read_text()
    fake = runner_for(ctx, nccl_tests=text)
    result = only(allreduce.allreduce_stage(ctx, fake))
    mpirun = next(shlex.split(c) for _, c in fake.commands if "mpirun" in c)
    assert mpirun[mpirun.index("-g") + 1] == "8" and mpirun[mpirun.index("-b") + 1] == str(8 * 1024**3)
    assert result.status == Status.FAIL  # 339 GB/s at 8 GB over the network < the profile's inter-node 340
    assert "< 340 GB/s" in result.reason and "nccl_allreduce_internode_busbw_GBps_min" in result.reason


def test_allreduce_wrong_elements_blame_the_rank_s_node() -> None:
    ctx = make_ctx(NODES4[:3])

    def rank(host: str, r: int, size: int, script: str) -> dict:
        out = good_rank(host, r, size, script)
        if host == "node02":
            out.update(ok=False, wrong=12, max_abs_err=3.0)
        return out

    result = only(allreduce.allreduce_stage(ctx, runner_for(ctx, rank_result=rank)))
    assert result.status == Status.FAIL and list(result.nodes) == ["node02"]


# ---------------------------------------------------------------- smoke

def test_smoke_passes_and_gives_scaling_points() -> None:
    ctx = make_ctx(NODES4[:3])
    fake = runner_for(ctx)
    results = smoke.smoke_stage(ctx, fake)
    by = {r.check: r for r in results}
    assert by["cluster.smoke.tf-horovod"].status == Status.PASS, by["cluster.smoke.tf-horovod"].reason
    said = by["cluster.smoke.tf-horovod"].reason  # the weights agree, said without their digest (report.json has it)
    assert "identical weights on all 3 ranks" in said and "sha256" not in said
    scaling = by["cluster.scaling"]
    assert scaling.status == Status.PASS
    assert [p["gpus"] for p in ctx.scaling] == [1, 3]
    assert ctx.scaling[1]["efficiency"] == pytest.approx(0.8)
    # the lab's ranks are CPUs: said plainly, and never set beside the published GPU figures
    assert "efficiency 80%" in scaling.reason and "not a GPU scaling measurement" in scaling.reason
    assert "Horovod: 90% at 512 GPUs" not in scaling.reason and scaling.measured["references"] == []
    assert {p["device"] for p in ctx.scaling} == {"CPU"} and scaling.measured["device"] == "CPU"
    runs = [shlex.split(c) for _, c in fake.commands if "mpirun" in c]
    assert [r[r.index("-np") + 1] for r in runs] == ["1", "3"]
    assert all(r[r.index("-x") + 1] for r in runs)
    # the report renders the points (markdown table, HTML chart)
    doc = {"scaling": ctx.scaling, "pairs": [], "nodes": {}, "cluster": [], "counts": {"nodes": {}, "cluster": {}}}
    assert "| tf-horovod (CPU ranks) | 3 |" in report.render_markdown(doc)


def test_smoke_on_gpu_nodes_runs_one_rank_one_node_and_all_nodes() -> None:
    ctx = make_ctx(NODES4[:2], profile="dgx-h100", gpus=8)
    fake = runner_for(ctx)
    results = smoke.smoke_stage(ctx, fake)
    runs = [shlex.split(c) for _, c in fake.commands if "mpirun" in c]
    assert [r[r.index("-np") + 1] for r in runs] == ["1", "8", "16"]
    assert runs[2][runs[2].index("-H") + 1] == "10.0.0.11:8,10.0.0.12:8"
    assert [p["gpus"] for p in ctx.scaling] == [1, 8, 16]
    assert results[0].status == Status.PASS


def test_smoke_different_weights_on_one_node_fail_and_blame_it() -> None:
    ctx = make_ctx(NODES4)

    def rank(host: str, r: int, size: int, script: str) -> dict:
        out = good_rank(host, r, size, script)
        if host == "node03" and size > 1:
            out["weights_sha256"] = "cd" * 32
        return out

    results = smoke.smoke_stage(ctx, runner_for(ctx, rank_result=rank))
    by = {r.check: r for r in results}
    assert by["cluster.smoke.tf-horovod"].status == Status.FAIL
    assert list(by["cluster.smoke.tf-horovod"].nodes) == ["node03"]
    assert by["cluster.scaling"].status == Status.ERROR


def test_smoke_hung_rank_names_its_node() -> None:
    ctx = make_ctx(NODES4[:3])

    def rank(host: str, r: int, size: int, script: str) -> dict | None:
        return None if host == "node02" and size > 1 else good_rank(host, r, size, script)

    results = smoke.smoke_stage(ctx, runner_for(ctx, rank_result=rank))
    result = results[0]
    assert result.status == Status.FAIL and list(result.nodes) == ["node02"], result.reason
    assert "reported nothing" in result.reason


@pytest.mark.parametrize("framework", ["torch", "tf-ps"])
def test_missing_stack_is_a_clear_skip(framework: str) -> None:
    ctx = make_ctx(NODES4[:2], framework=framework,
                   frameworks={"tf-horovod": {"tensorflow": None, "horovod": "0.28.1"}})
    results = smoke.smoke_stage(ctx, runner_for(ctx))
    assert results[0].check == f"cluster.smoke.{framework}"
    assert results[0].status in (Status.SKIP, Status.ERROR)
    assert "missing on every node" in results[0].reason


def test_missing_required_stack_is_an_error() -> None:
    ctx = make_ctx(NODES4[:2], frameworks={})
    results = smoke.smoke_stage(ctx, runner_for(ctx))
    assert results[0].status == Status.ERROR  # the lab profile requires tensorflow and horovod


def test_stack_python_comes_from_the_facts_when_the_node_reports_it() -> None:
    ctx = make_ctx(NODES4[:1])
    ctx.nodes["node01"].report["facts"]["stacks"] = {"tf-horovod": {"python": "/srv/tf/bin/python"}}
    assert nodes.stack_python(ctx, "node01", "tf-horovod") == "/srv/tf/bin/python"
    ctx = make_ctx(NODES4[:1])
    assert nodes.stack_python(ctx, "node01", "tf-horovod") == "/opt/stacks/tf-horovod/bin/python"
    assert nodes.stack_python(ctx, "node01", "torch") is None


def test_where_the_jobs_run_in_their_own_image_its_stacks_are_the_ones_judged_not_the_nodes() -> None:
    """--launcher kubernetes: the job image's probe (ctx.job_image) answers for every node; an image without the
    stack is said as the image's lack, with the import's error, never as the nodes'."""
    ctx = make_ctx(NODES4[:2])  # both nodes report tf-horovod on their own hosts
    ctx.job_image = job_image.read("\n".join(job_image.MARK + json.dumps(r) for r in (
        {"python": "/usr/bin/python3"}, {"framework": "tensorflow", "version": "2.15.1"},
        {"framework": "horovod", "version": None, "error": "ModuleNotFoundError: No module named 'horovod'"})))
    assert nodes.stack_python(ctx, "node01", "tf-horovod") == "/usr/bin/python3"
    [result, *_] = smoke.smoke_stage(ctx, runner_for(ctx))
    assert result.status == Status.ERROR, result.reason  # the lab profile requires both
    assert ("the tf-horovod stack with tensorflow and horovod is missing in the jobs' image (/usr/bin/python3: "
            "horovod: ModuleNotFoundError: No module named 'horovod')") in result.reason


# ---------------------------------------------------------------- thresholds: each node's own report

def rename_profile(ctx, name: str) -> None:
    """The nodes were judged against a site profile `name` that exists on them only (not in checks/ here)."""
    for outcome in ctx.nodes.values():
        outcome.report["profile"] = outcome.report["facts"]["profile"] = name
        outcome.report["thresholds"]["name"] = name


def test_a_profile_only_the_node_has_still_gives_its_thresholds() -> None:
    from gpucheck import profiles

    assert "site-h100-rack7" not in profiles.available()
    ctx = make_ctx(NODES4, profile="dgx-h100")
    rename_profile(ctx, "site-h100-rack7")
    fake = runner_for(ctx, link={n: (300.0 if n == "node02" else 392.0) for n in NODES4})
    result = only(network.network_stage(ctx, fake))
    assert nodes.thresholds(ctx, "node01").name == "site-h100-rack7"
    assert result.measured["method"] == "ib_write_bw"  # the node's infiniband.required
    assert result.measured["threshold_Gbps"] == 360  # the node's ib_write_bw_Gbps_min
    assert result.status == Status.FAIL and list(result.nodes) == ["node02"]
    assert "no thresholds" not in result.reason


def test_two_contexts_with_one_profile_name_do_not_share_thresholds() -> None:
    ib = make_ctx(NODES4[:2], profile="dgx-h100")
    rename_profile(ib, "site")
    tcp = make_ctx(NODES4[:2], profile="lab")
    rename_profile(tcp, "site")
    first = only(network.network_stage(ib, runner_for(ib, link={n: 390.0 for n in NODES4[:2]})))
    second = only(network.network_stage(tcp, runner_for(tcp, link={n: 9.0 for n in NODES4[:2]})))
    assert (first.measured["method"], second.measured["method"]) == ("ib_write_bw", "tcp")
    assert nodes.threshold(ib, NODES4[:2], "infiniband", "required") is True
    assert nodes.threshold(tcp, NODES4[:2], "infiniband", "required") is False


def test_a_report_without_thresholds_is_named_not_silently_unjudged() -> None:
    """An older agent's report has no thresholds: the stage says whose profile it went without."""
    ctx = make_ctx(NODES4[:3], profile="dgx-h100")
    del ctx.nodes["node03"].report["thresholds"]
    assert nodes.thresholds(ctx, "node03") is None
    result = only(network.network_stage(ctx, runner_for(ctx, link={n: 9.0 for n in NODES4[:3]})))
    assert result.measured["method"] == "tcp"  # node03 not known to require InfiniBand
    assert "no thresholds in the report of node03 (an older gpucheck agent" in result.reason
    assert "node01" not in result.reason.split("no thresholds", 1)[1]


def test_smoke_says_whose_thresholds_it_went_without() -> None:
    ctx = make_ctx(NODES4[:2], frameworks={})
    for outcome in ctx.nodes.values():
        del outcome.report["thresholds"]
    result = smoke.smoke_stage(ctx, runner_for(ctx))[0]
    assert result.status == Status.SKIP  # nobody's profile is known to require the stack
    assert "no thresholds in the report of node01, node02" in result.reason


# ---------------------------------------------------------------- options

def test_stage_options_parse_and_bad_ones_are_usage_errors(tmp_path) -> None:
    from gpucheck.main import build_parser
    from support import run_gpucheck

    args = build_parser().parse_args(["cluster", "--stages", "network,mpi,network", "--skip-stages", "mpi",
                                      "--framework", "tf-ps", "--pair-seconds", "1.5", "--pair-fraction", "0.5",
                                      "--stage-timeout", "90"])
    assert args.stages == ("network", "mpi") and args.skip_stages == ("mpi",)
    assert (args.framework, args.pair_seconds, args.pair_fraction, args.stage_timeout) == ("tf-ps", 1.5, 0.5, 90)
    default = build_parser().parse_args(["cluster"])
    assert default.stages is None  # every stage; an opt-in one (training on CPU ranks) only when named
    from gpucheck.cluster.stages.order import STAGE_NAMES
    assert STAGE_NAMES == ("consistency", "network", "mpi", "allreduce", "smoke", "training", "burn", "stragglers",
                           "shape", "history")
    assert (default.framework, default.pair_fraction) == ("tf-horovod", 0.7)
    for bad in (["--stages", "nccl"], ["--pair-fraction", "1.5"], ["--framework", "mxnet"],
                ["--allreduce-size", "64X"], ["--burn-minutes", "0"], ["--burn-minutes", "ten"]):
        done = run_gpucheck(["cluster", "-i", str(tmp_path / "none.yml"), *bad])
        assert done.returncode == 3 and "Traceback" not in done.stderr, (bad, done.stderr)
    assert "unknown stage(s) nccl" in run_gpucheck(["cluster", "--stages", "nccl"]).stderr


def test_the_command_line_defaults_are_the_options_defaults_and_name_every_stage() -> None:
    from dataclasses import fields

    from gpucheck.cluster import cli
    from gpucheck.cluster.context import Options
    from gpucheck.cluster.frameworks import FRAMEWORKS
    from gpucheck.cluster.stages.order import STAGE_NAMES, STAGES
    from gpucheck.main import build_parser

    args = vars(build_parser().parse_args(["cluster"]))
    args["node_timeout"] = args.pop("timeout")
    defaults = Options()
    # stages and stages_asked come from --stages, burn_seconds from --burn-minutes (None: the default)
    own = [f.name for f in fields(Options) if f.name not in ("stages", "stages_asked", "burn_seconds")]
    assert {name: args[name] for name in own} == {name: getattr(defaults, name) for name in own}
    assert args["stages"] is None and tuple(name for name, _ in STAGES) == STAGE_NAMES
    assert args["burn_minutes"] is None and defaults.burn_seconds == 600
    assert defaults.framework in FRAMEWORKS
    described = cli.EPILOG.split("stages (in this order):", 1)[1]
    assert [n for n in STAGE_NAMES if n in described] == list(STAGE_NAMES)
    assert sorted(STAGE_NAMES, key=described.index) == list(STAGE_NAMES)


def test_a_node_whose_gpus_another_program_uses_gets_no_gpu_job() -> None:
    """Its agent saw pid 576 on GPU3 (facts.gpu_processes): the all-reduce, smoke and training jobs leave it out
    and say why; the network and MPI stages, which load no GPU, keep it."""
    ctx = make_ctx(["n1", "n2", "n3"])
    ctx.nodes["n2"].report["facts"]["gpu_processes"] = {"GPU3": [{"pid": 576, "used_MiB": 72452, "kind": "compute"}]}
    assert nodes.participants(ctx).nodes == ["n1", "n2", "n3"]
    cast = nodes.participants(ctx, gpu_work=True)
    assert cast.nodes == ["n1", "n3"]
    assert cast.left_out == {"n2": "its GPUs are in use by another program (GPU3: pid 576)"}
