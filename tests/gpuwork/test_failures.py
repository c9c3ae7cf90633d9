"""What a worker reports when things go wrong: CuPy or the device missing, CUDA errors (the GPU's own trouble
or not), a test that raises, a wedged GPU, a bad command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpuwork_helpers import QUICK, environment, run_program, run_until_stuck

from gpucheck.gpuwork import errors

NO_DRIVER = ("no usable CUDA device: no CUDA driver answers (cudaErrorInsufficientDriver): this CuPy needs one "
             "for CUDA 1")


def assert_unavailable(run, reason_start: str) -> None:
    assert run.exit == 3, run.stderr
    assert run.kinds() == ["unavailable"]
    assert run.events[0]["reason"].startswith(reason_start), run.events[0]
    assert "Traceback" not in run.stderr


CUPY_MISSING = ("CuPy is not installed: install gpucheck's gpu extra (pip install 'gpucheck[gpu]'; "
                "the gpucheck_agent role picks cupy-cuda12x or cupy-cuda13x)")


@pytest.mark.parametrize("package,reason", [
    ("raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')", CUPY_MISSING),  # not installed
    ("raise ImportError('No module named cupy._core')",  # a broken installation
     f"{CUPY_MISSING} (import cupy: ImportError: No module named cupy._core)"),
])
def test_cupy_missing_is_unavailable_with_one_clear_reason(tmp_path: Path, package: str, reason: str) -> None:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(package + "\n")
    run = run_program("worker", env=environment(fake=False, PYTHONPATH=f"{tmp_path}:{environment()['PYTHONPATH']}"))
    assert_unavailable(run, reason)
    assert run.events[0]["reason"] == reason
    assert run.stderr.strip() == f"gpuwork: {reason}"


def test_real_cupy_without_a_driver_is_unavailable_naming_the_cuda_error() -> None:
    """This machine has the real cupy-cuda12x and no NVIDIA driver (skipped where a GPU is present)."""
    run = run_program("worker", env=environment(fake=False))
    if run.kinds()[:1] == ["begin"]:
        pytest.skip("this machine has a usable CUDA device")
    assert_unavailable(run, NO_DRIVER)


@pytest.mark.parametrize("program", ["worker", "p2p", "allreduce"])
def test_no_driver_on_the_fake_is_the_same_unavailable(program: str) -> None:
    assert_unavailable(run_program(program, env=environment(FAKECUPY_DEVICES="0")), NO_DRIVER)


def test_a_driver_too_old_for_cupy_says_both_cuda_versions_in_one_line() -> None:
    run = run_program("worker", env=environment(FAKECUPY_CUDA_ERROR="init:cudaErrorInsufficientDriver",
                                                FAKECUPY_DRIVER_CUDA="12020"))
    assert_unavailable(run, "no usable CUDA device: the driver runs CUDA 12.2, this CuPy needs CUDA 12.9 "
                            "(cudaErrorInsufficientDriver): install a newer driver, or the CuPy built for CUDA 12.2")


def test_no_visible_device_is_unavailable() -> None:
    run = run_program("worker", env=environment(CUDA_VISIBLE_DEVICES=""))
    assert_unavailable(run, "no usable CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected")


def test_an_uncorrectable_ecc_error_is_a_fault_and_the_worker_stops() -> None:
    env = environment(FAKECUPY_CUDA_ERROR="gemm:cudaErrorECCUncorrectable")
    run = run_program("worker", "--tests", "sdc,gemm,memtest,burn", *QUICK, env=env)
    assert run.exit == 0
    assert run.result("sdc")["fault"] is None and run.result("sdc")["checksum"]
    gemm = run.result("gemm")
    assert gemm["fault"] == "cudaErrorECCUncorrectable: uncorrectable ECC error encountered"
    assert gemm["error"] is None
    assert "memtest" not in run.results() and "burn" not in run.results()  # tests not run get no line
    assert [e["test"] for e in run.events if e["event"] == "start"] == ["sdc", "gemm"]
    assert run.events[-1]["event"] == "end" and "cudaErrorECCUncorrectable" in run.events[-1]["stopped"]


def test_an_ecc_error_mid_memtest_keeps_the_bad_words_found_before_it() -> None:
    env = environment(FAKECUPY_CORRUPT="10,20", FAKECUPY_CUDA_ERROR="memtest@1500:cudaErrorECCUncorrectable")
    run = run_program("worker", "--tests", "memtest,sdc", *QUICK, env=env)
    memtest = run.result("memtest")
    assert memtest["fault"] == "cudaErrorECCUncorrectable: uncorrectable ECC error encountered"
    assert (memtest["bad_words"], memtest["bad_offsets"]) == (2, [80, 160])
    assert memtest["bad_by_pattern"]["alternating"] == 4  # its passes ran before the fault
    assert "sdc" not in run.results()


def test_a_gpu_falling_over_mid_burn_keeps_the_windows_and_samples_so_far(fake_nvml) -> None:
    env = environment(FAKECUPY_CUDA_ERROR="burn@2.5s:cudaErrorLaunchFailure", **fake_nvml("throttling"))
    run = run_program("worker", "--tests", "burn", "--burn-n", "64", "--burn-seconds", "30",
                      "--bus-id", "00000000:DB:00.0", env=env)
    burn = run.result("burn")
    assert burn["fault"] == "cudaErrorLaunchFailure: unspecified launch failure"
    assert 2 <= burn["seconds"] < 4 and len(burn["windows_TFLOPS"]) >= 2  # the fault came 2.5 s into the test
    assert burn["samples"] >= 4
    assert set(burn["nvml"]["reasons_seen"]) == {"hw_slowdown", "hw_thermal_slowdown"}
    assert "stopped" in run.events[-1]


def test_a_cuda_error_that_leaves_the_context_usable_is_an_error_and_the_others_run() -> None:
    env = environment(FAKECUPY_CUDA_ERROR="sdc:cudaErrorMemoryAllocation")
    run = run_program("worker", "--tests", "sdc,memory_bandwidth", *QUICK, env=env)
    assert run.result("sdc")["error"] == "cudaErrorMemoryAllocation: out of memory"
    assert run.result("sdc")["fault"] is None
    assert run.result("memory_bandwidth")["error"] is None
    assert run.events[-1] == {"event": "end"}


def test_a_test_that_raises_is_an_error_with_type_and_text_and_the_others_run() -> None:
    env = environment(FAKECUPY_RAISE="memory_bandwidth:ValueError")
    run = run_program("worker", "--tests", "memory_bandwidth,sdc", *QUICK, env=env)
    bandwidth = run.result("memory_bandwidth")
    assert bandwidth["error"] == "ValueError: fake failure injected in memory_bandwidth"
    assert bandwidth["fault"] is None and "copy_GBps" not in bandwidth
    assert run.result("sdc")["error"] is None
    assert run.exit == 0 and run.events[-1] == {"event": "end"}


def test_a_dtype_the_gpu_cannot_run_goes_in_errors_and_the_burn_falls_back_to_fp16() -> None:
    """A GPU without bf16 (compute capability 7.0): cuBLAS answers NOT_SUPPORTED for bf16 gemmEx."""
    env = environment(FAKECUPY_COMPUTE_CAPABILITY="7.0")
    run = run_program("worker", "--tests", "gemm,burn", *QUICK, "--burn-seconds", "1", env=env)
    gemm = run.result("gemm")
    assert gemm["errors"] == {"bf16": "CUBLASError: CUBLAS_STATUS_NOT_SUPPORTED"}
    assert sorted(gemm["tflops"]) == ["fp16", "fp32", "fp64", "tf32"] and "bf16" not in gemm["n"]
    burn = run.result("burn")
    assert burn["dtype"] == "fp16" and burn["error"] is None and burn["windows_TFLOPS"]
    assert burn["fallback_reason"] == "bf16: CUBLASError: CUBLAS_STATUS_NOT_SUPPORTED"


def test_cublas_missing_leaves_the_matmul_dtypes() -> None:
    run = run_program("worker", "--tests", "gemm", *QUICK, env=environment(FAKECUPY_NO_CUBLAS="1"))
    gemm = run.result("gemm")
    assert sorted(gemm["errors"]) == ["bf16", "tf32"]
    assert gemm["errors"]["bf16"].startswith("ImportError: Failure finding \"libcublasLt.so")
    assert sorted(gemm["tflops"]) == ["fp16", "fp32", "fp64"]
    assert run.only("begin")["cublas"] is None


def test_a_wedged_gpu_hangs_the_worker_but_earlier_results_are_already_delivered() -> None:
    env = environment(FAKECUPY_HANG="burn")
    run = run_until_stuck("worker", "--tests", "sdc,memtest,burn", *QUICK, "--burn-seconds", "1", env=env,
                          started="burn", stuck_s=3)  # a healthy 1 s burn would have ended by then
    assert run.timed_out
    assert run.result("sdc")["error"] is None and run.result("memtest")["bad_words"] == 0
    assert run.kinds()[-1] == "start" and run.events[-1]["test"] == "burn"


def test_a_cpu_list_the_kernel_refuses_fails_host_bandwidth_only() -> None:
    run = run_program("worker", "--tests", "host_bandwidth,sdc", *QUICK, "--cpus", "100000")
    host = run.result("host_bandwidth")
    assert host["error"] == "cannot bind to CPUs 100000: Invalid argument"
    assert run.result("sdc")["error"] is None


@pytest.mark.parametrize("program,args,message", [
    ("worker", ["--tests", "sdc,nope"], "argument --tests: 'sdc,nope': choose from sdc,gemm,"),
    ("worker", ["--memtest-fraction", "1.5"], "argument --memtest-fraction: must be in (0, 1): '1.5'"),
    ("worker", ["--cpus", "0-x"], "argument --cpus: not a CPU list"),
    ("worker", ["--bus-id", "18:00"], "argument --bus-id: not a PCI bus id"),
    ("worker", ["--burn-seconds", "0"], "argument --burn-seconds: must be in (0, 86400] seconds"),
    ("worker", ["--gemm-dtypes", "fp8"], "argument --gemm-dtypes: 'fp8': choose from bf16,fp16,tf32,fp32,fp64"),
    ("worker", ["--surprise"], "unrecognized arguments: --surprise"),
    ("p2p", ["--bytes", "12Q"], "argument --bytes: not a size in bytes"),
    ("allreduce", ["--iterations", "0"], "argument --iterations: must be in [1, 2^40]: '0'"),
])
def test_a_bad_command_line_is_one_line_and_exit_3(program: str, args: list[str], message: str) -> None:
    run = run_program(program, *args)
    assert run.exit == 3 and run.events == []
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], run.stderr


def test_help_documents_the_size_options() -> None:
    done = subprocess.run([sys.executable, "-m", "gpucheck.gpuwork.worker", "--help"], env=environment(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for option in ("--gemm-n", "--sdc-n", "--copy-bytes", "--host-bytes", "--memtest-chunk-bytes", "--burn-n",
                   "--bus-id", "--cpus", "--burn-seconds", "--memtest-fraction"):
        assert option in done.stdout


@pytest.mark.parametrize("text,error,fault,lost", [
    ("cudaErrorECCUncorrectable: uncorrectable ECC error encountered", None, "cudaErrorECCUncorrectable", True),
    ("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", None, "CUDA_ERROR_LAUNCH_FAILED", True),
    ("cudaErrorAssert: device-side assert triggered", "cudaErrorAssert", None, True),
    ("cudaErrorMemoryAllocation: out of memory", "cudaErrorMemoryAllocation", None, False),
])
def test_cuda_errors_are_classified_by_name(text: str, error: str | None, fault: str | None, lost: bool) -> None:
    outcome = errors.classify(RuntimeError(text))
    assert (outcome.error or "").startswith(error or "") and bool(outcome.error) == bool(error)
    assert (outcome.fault or "").startswith(fault or "") and bool(outcome.fault) == bool(fault)
    assert outcome.context_lost is lost


def test_other_exceptions_are_described_with_their_type() -> None:
    assert errors.describe(KeyError("x")) == "KeyError: 'x'"
    assert errors.classify(MemoryError()).error == "MemoryError"
