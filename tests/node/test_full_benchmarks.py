"""`gpucheck node --full`: the benchmarks run real commands, replayed here from recorded outputs."""

from __future__ import annotations

import os

import pytest

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
