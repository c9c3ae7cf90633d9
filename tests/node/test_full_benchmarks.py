"""`gpucheck node --full`: the benchmarks run real commands, replayed here from recorded outputs."""

from __future__ import annotations

import os

import pytest

from gpucheck.model import Status
from lab.fakenvml import build_library, env_for, scenario_path
from support import REAL, by_check, report_of, run_gpucheck

NCCL_A100 = (REAL / "nccl-tests" / "a100-8gpu-allreduce-oldformat-superbench.txt").read_text()
NCCL_CORRUPT = (REAL / "nccl-tests" / "gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt")
IB_LOOPBACK = (REAL / "perftest" / "ib_write_bw-loopback-8M-MBsec-client+server-superbench.txt").read_text()
IBSTATUS_A100 = (REAL / "ibstat" / "ibstatus-a100-azure-8xHDR200-plus-eth.txt").read_text()
IBSTAT_H100 = (REAL / "ibstat" / "ibstat-h100-12hca-8xNDR400-active-3eth-down.txt").read_text()


@pytest.fixture
def full(fake_bin, tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text("{}\n")

    def run(scenario: str, profile: str, *only: str):
        env = env_for(scenario_path(scenario), build_library())
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config))
        done = run_gpucheck(["node", "--full", "--profile", profile, "--only", *only, "--format", "json"], env)
        return done.returncode, by_check(report_of(done))

    return run


def test_nccl_allreduce_passes_on_a100_and_fails_against_the_h100_minimum(full, fake_bin):
    fake_bin.add("all_reduce_perf", NCCL_A100)
    code, checks = full("dgx-a100", "dgx-a100", "bw.nccl_allreduce")
    assert code == 0 and checks["bw.nccl_allreduce"]["measured"] == pytest.approx(235.26)
    code, checks = full("dgx-h100", "dgx-h100", "bw.nccl_allreduce")
    assert code == 2 and "235.26 GB/s < 400 GB/s" in checks["bw.nccl_allreduce"]["reason"]


def test_nccl_allreduce_with_wrong_values_fails_even_when_fast(full, fake_bin):
    fake_bin.add("all_reduce_perf", NCCL_CORRUPT.read_text(), exit_code=1)
    code, checks = full("dgx-a100", "generic", "bw.nccl_allreduce")
    assert code == 2 and "all_reduce_perf failed" in checks["bw.nccl_allreduce"]["reason"]


def test_missing_all_reduce_perf_is_an_error_where_the_profile_requires_it(full):
    code, checks = full("dgx-h100", "dgx-h100", "bw.nccl_allreduce")
    assert code == 3 and checks["bw.nccl_allreduce"]["status"] == "error"
    code, checks = full("t4", "pcie-1gpu", "bw.nccl_allreduce")
    assert checks["bw.nccl_allreduce"]["status"] == "skip"


def test_hung_benchmark_is_killed_at_the_bench_timeout(fake_bin, tmp_path):
    fake_bin.add("all_reduce_perf", NCCL_A100, sleep=60)
    (tmp_path / "node.yaml").write_text("{}\n")
    env = env_for(scenario_path("dgx-a100"), build_library())
    env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(tmp_path / "node.yaml"))
    done = run_gpucheck(["node", "--full", "--profile", "dgx-a100", "--only", "bw.nccl_allreduce",
                         "--bench-timeout", "2", "--format", "json"], env, timeout=30)
    result = by_check(report_of(done))["bw.nccl_allreduce"]
    assert done.returncode == 3 and result["status"] == "error" and "did not finish within" in result["reason"]


def test_ib_loopback_per_active_hca(full, fake_bin):
    fake_bin.add("ibstat", IBSTATUS_A100)
    fake_bin.add("ib_write_bw", IB_LOOPBACK)
    code, checks = full("dgx-a100", "dgx-a100", "bw.ib_loopback")
    result = checks["bw.ib_loopback"]
    assert code == 0, result
    assert len(result["measured"]) == 8  # the eight HDR ports; the Ethernet port is not tested
    assert all(v == pytest.approx(192.45, abs=0.1) for v in result["measured"].values())
    fake_bin.add("ibstat", IBSTAT_H100)
    code, checks = full("dgx-h100", "dgx-h100", "bw.ib_loopback")
    assert code == 2 and "< 360 Gb/s" in checks["bw.ib_loopback"]["reason"]


def test_benchmarks_need_full(fake_bin, tmp_path):
    (tmp_path / "node.yaml").write_text("{}\n")
    env = dict(os.environ, PATH=fake_bin.path(), GPUCHECK_CONFIG=str(tmp_path / "node.yaml"))
    checks = by_check(report_of(run_gpucheck(["node", "--profile", "generic", "--only", "bw", "host",
                                               "--format", "json"], env)))
    assert not any(name.startswith("bw.") for name in checks) and "host.disk" in checks


# ------------------------------------------------------- the built-in all-reduce when all_reduce_perf is absent

STANDIN_ALLREDUCE = """
import json, os, sys
def line(event, **fields):
    print("GPUCHECK_GPUWORK " + json.dumps({"event": event, **fields}), flush=True)
how = os.environ["STANDIN_HOW"]
if how == "unavailable":
    line("unavailable", reason="CuPy is not installed: install gpucheck's gpu extra (pip install 'gpucheck[gpu]')")
    sys.exit(3)
gpus = len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))
line("begin", cupy="14.2.0")
if how == "hang":
    import time
    time.sleep(600)
busbw, wrong = {"fast": (452.0, 0), "slow": (180.5, 0), "corrupt": (452.0, 96)}[how]
line("result", test="allreduce", error=None, fault=None, gpus=gpus, bytes=int(sys.argv[sys.argv.index("--bytes") + 1]),
     seconds_per_iteration=0.05, algbw_GBps=busbw * gpus / (2 * (gpus - 1)), busbw_GBps=busbw, wrong=wrong,
     nccl_version=22803)
line("end")
"""


@pytest.fixture
def builtin(tmp_path, monkeypatch):
    """bandwidth.collect on a node without all_reduce_perf, the built-in replaced by a stand-in that behaves as
    STANDIN_HOW says; returns (facts, the check's result) for a profile."""
    from gpucheck.node import Context, bandwidth
    from gpucheck.profiles import load

    (tmp_path / "standin_allreduce.py").write_text(STANDIN_ALLREDUCE)
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setattr(bandwidth, "BUILTIN", "standin_allreduce")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))

    def run(how: str, profile: str, gpus: int = 8, memory_MiB: int = 81559, bench_timeout: float = 30.0):
        monkeypatch.setenv("STANDIN_HOW", how)
        nvml = {"gpus": [{"index": i, "lost": False, "uuid": f"GPU-{i}", "memory_total_MiB": memory_MiB}
                         for i in range(gpus)]}
        ctx = Context(bench_timeout=bench_timeout, profile=load(profile), facts={"nvml": nvml})
        facts = bandwidth.collect(ctx)
        return facts, bandwidth.allreduce({"nvml": nvml, "nccl_bw": facts}, ctx.profile)

    return run


def test_the_builtin_all_reduce_is_judged_as_all_reduce_perf(builtin):
    facts, result = builtin("fast", "dgx-h100")
    assert not facts["available"] and facts["builtin"]["bytes"] == 8 * 1024**3
    assert result.status == Status.PASS and result.measured == 452.0
    assert "across 8 GPUs (the built-in NCCL all-reduce; all_reduce_perf (nccl-tests) not found" in result.reason
    _, slow = builtin("slow", "dgx-h100")
    assert slow.status == Status.FAIL and "bus bandwidth 180.5 GB/s < 400 GB/s" in slow.reason
    _, corrupt = builtin("corrupt", "generic")  # no minimum in the generic profile: wrong values fail all the same
    assert corrupt.status == Status.FAIL and corrupt.reason.startswith("96 wrong values")


def test_the_builtin_buffer_fits_a_small_gpu(builtin):
    facts, result = builtin("fast", "dgx1-v100", memory_MiB=16160)
    assert facts["builtin"]["bytes"] == 16160 * 1024**2 // 4 and result.status == Status.PASS


def test_no_figure_from_either_is_an_error_only_where_required(builtin):
    _, required = builtin("unavailable", "dgx-h100")
    assert required.status == Status.ERROR and "the built-in NCCL all-reduce cannot run: CuPy is not" in required.reason
    _, optional = builtin("unavailable", "generic")
    assert optional.status == Status.SKIP and "CuPy is not installed" in optional.reason


def test_one_gpu_has_no_bus_bandwidth(builtin):
    facts, result = builtin("fast", "dgx-h100", gpus=1)
    assert facts["builtin"] == {"gpus": 1, "one_gpu": True}
    assert result.status == Status.SKIP and result.reason.startswith("one GPU: no bus bandwidth")


def test_a_hung_builtin_is_killed_at_the_bench_timeout(builtin):
    _, result = builtin("hang", "generic", bench_timeout=1.0)
    assert result.status == Status.ERROR and "killed at --bench-timeout (1 s)" in result.reason
