"""rank_io.py, the module the four workload scripts share: the result line, the guard and its watchdog, the
common options, the weights digest (standard library only; the numpy side is run in the TF venv)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import time

import pytest

from gpucheck.workloads.results import MARK, parse_results
from workload_helpers import WORKLOADS, Stack, load_workload


@pytest.fixture
def rank_io():
    return load_workload("rank_io.py")  # fresh: its one-line-per-process state starts empty


def line(record: dict) -> str:
    return MARK + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"


def test_emit_writes_the_one_line_once(rank_io, capfd):
    rank_io.emit({"workload": "w", "ok": True, "rank": 0})
    rank_io.emit({"workload": "w", "ok": False})  # a second line from the same process is dropped
    assert capfd.readouterr().out == 'GPUCHECK_RESULT {"ok":true,"rank":0,"workload":"w"}\n'
    assert rank_io.MARK == MARK  # the marker results.parse_results looks for


def test_guarded_ok_failure_and_exception(capfd):
    logged: list[str] = []
    cases = [(lambda: None, 0, True, None), (lambda: "loss did not fall", 1, False, "loss did not fall"),
             (lambda: 1 / 0, 1, False, "ZeroDivisionError: division by zero")]
    for work, code, ok, error in cases:
        rank_io = load_workload("rank_io.py")
        record = rank_io.new_record("w", seed=7)
        assert record["ok"] is False and record["seed"] == 7 and {"hostname", "pid"} <= set(record)
        assert rank_io.guarded(record, work, logged.append, time.monotonic()) == code
        (got,) = parse_results(capfd.readouterr().out)
        assert got["ok"] is ok and got.get("error") == error and got["wall_s"] >= 0
    assert len(logged) == 1 and "Traceback" in logged[0]  # only the exception is logged, in full


@pytest.mark.parametrize("arg, error", [("", "timeout after 0.3 s (hung collective or peer?)"),
                                        (", why=None", "timeout after 0.3 s")])  # the tf-ps chief's
def test_the_watchdog_ends_a_hung_rank_with_124(arg, error):
    code = (f"import sys, time; sys.path.insert(0, {str(WORKLOADS)!r}); import rank_io\n"
            "rank_io.claim_stdout(); record = rank_io.new_record('w')\n"
            f"timer = rank_io.watchdog(0.3, record{arg}); time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 124, done.stderr
    (result,) = parse_results(done.stdout)
    assert result["ok"] is False and result["error"] == error and done.stdout == line(result)


def test_ranks_from_env_takes_the_first_number(rank_io, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "")
    monkeypatch.setenv("HOROVOD_RANK", "3")
    monkeypatch.setenv("PMI_RANK", "5")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    record: dict = {}
    rank_io.ranks_from_env(record, rank=("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"), size=("WORLD_SIZE",))
    assert record == {"rank": 3}


def test_weights_digest_without_numpy(rank_io):
    want = hashlib.sha256(struct.pack("<3f", 1.0, -2.5, 0.1) + struct.pack("<1f", 4.0))
    assert rank_io.weights_digest([[1.0, -2.5, 0.1], (4.0,)]) == (want.hexdigest(), 4)
    assert rank_io.samples_per_s(10, 32, 1.0, 3.0) == 160.0
    assert rank_io.samples_per_s(0, 32, 1.0, 3.0) is None and rank_io.samples_per_s(5, 32, None, 3.0) is None


def test_weights_digest_is_the_same_with_numpy_and_without(tf_horovod: Stack):
    """Horovod/TF and PS hash through numpy, DDP through struct: the same weights give the same digest."""
    code = (f"import sys; sys.path.insert(0, {str(WORKLOADS)!r}); import rank_io, numpy as np\n"
            "arrays = [np.arange(12, dtype=np.float64).reshape(3, 4) / 7, np.array([0.1, -3.0], dtype=np.float32)]\n"
            "flat = [a.astype(np.float32).reshape(-1).tolist() for a in arrays]\n"
            "print(rank_io.weights_digest(arrays, np) == rank_io.weights_digest(flat), "
            "rank_io.weights_digest(arrays, np)[1])\n")
    done = subprocess.run([str(tf_horovod.python), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "14"], done.stderr


# Every option of every script with its default, as before the scripts shared rank_io.
TRAINING = {"seed": 1234, "features": 32, "hidden": 64, "lr": 0.02, "timeout_s": 0}
DEFAULTS = {
    "smoke_horovod_keras.py": {**TRAINING, "epochs": 2, "steps": 20, "batch_size": 32, "warmup_steps": 5,
                               "no_lr_scaling": False},
    "smoke_torch_ddp.py": {**TRAINING, "epochs": 2, "steps": 20, "batch_size": 32, "warmup_steps": 5,
                           "no_lr_scaling": False, "backend": "auto"},
    "smoke_tf_ps.py": {**TRAINING, "steps": 60, "batch_size": 32, "warmup_steps": 10, "chief_wait_s": 300,
                       "poll_s": 0.5},
    "allreduce_bench.py": {"framework": "auto", "backend": "auto", "size": 64 * 2 ** 20, "warmup": 3, "iters": 10,
                           "no_check": False, "inject_corruption": None, "timeout_s": 0},
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_every_script_keeps_its_options_and_defaults(name):
    script = load_workload(name)
    assert vars(script.parse_args([])) == DEFAULTS[name]
    assert script.parse_args(["--timeout-s", "2.5"]).timeout_s == 2.5
    assert str(WORKLOADS) not in sys.path  # loading it took the folder off sys.path again


def test_exit_now_keeps_the_status_and_output_and_skips_finalization():
    """A C++ thread aborting at interpreter finalization (gloo) stands in as an atexit handler that exits
    134: exit_now must end the process with the rank's own status before it runs, output flushed."""
    script = ("import atexit, os, sys\n"
              f"sys.path.insert(0, {str(WORKLOADS)!r})\n"
              "import rank_io\n"
              "atexit.register(lambda: os._exit(134))\n"
              "print('result line', end='')\n"
              "sys.stderr.write('log line')\n"
              "rank_io.exit_now(0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "result line", "log line")
    assert subprocess.run([sys.executable, "-c", script.replace("exit_now(0)", "exit_now(1)")],
                          capture_output=True, timeout=60).returncode == 1
