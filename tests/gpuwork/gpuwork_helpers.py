"""Running the GPU programs (agent/gpucheck/gpuwork) as the node side does: a child process of this Python,
its output read line by line. With `fake=True` (the default) lab/fakecupy is first on its PYTHONPATH, so it
runs on the fake CuPy (lab/fakecupy/cupy/__init__.py says what it simulates); `fake=False` runs the real
CuPy of this interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import compute

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"
FAKECUPY = compute.SOURCE
MARKER = "GPUCHECK_GPUWORK "
MIB = 2**20
FAKE_FREE_BYTES = 64 * MIB
# Small sizes so that the fake GPU (numpy on two CPU cores) runs the whole worker in seconds.
QUICK = ["--gemm-n", "128", "--gemm-iterations", "3", "--sdc-n", "128", "--burn-n", "128", "--copy-bytes", "2M",
         "--host-bytes", "2M"]

# Figures per result, exactly as docs/burnin.md names them.
CONTRACT_FIGURES = {
    "sdc": {"checksum", "dtype", "n", "seed"},
    "gemm": {"tflops", "n", "errors"},
    "memory_bandwidth": {"copy_GBps", "stream_add_GBps", "bytes"},
    "host_bandwidth": {"h2d_GBps", "d2h_GBps", "bytes", "pinned", "cpus"},
    "memtest": {"free_bytes", "total_bytes", "bytes_tested", "coverage", "patterns", "bad_words", "bad_offsets",
                "bad_by_pattern", "chunk_bytes"},
    "burn": {"dtype", "n", "seconds", "tflops", "windows_TFLOPS", "windows_timeline", "samples", "sample_interval_s",
             "nvml", "nvml_error"},
    "p2p": {"pairs"},
    "allreduce": {"gpus", "bytes", "seconds_per_iteration", "algbw_GBps", "busbw_GBps", "wrong", "nccl_version"},
}
RESULT_KEYS = {"event", "test", "seconds", "error", "fault"}

# Snippets that run the same on the fake and on a real GPU (test_real_gpu.py).
# Fill, change three words (through an index, a raw pointer, one byte of the last word), verify.
FILL_CORRUPT_VERIFY = """
import json
import cupy as cp
import numpy as np
from gpucheck.gpuwork import memtest

words, chunk = 300_000, 4096
buf = cp.empty(words, dtype=cp.uint64)
found = {}
for name, pattern in (("alternating", 0x5555555555555555), ("address", memtest.ADDRESS)):
    memtest.fill(cp, buf, pattern, chunk)
    clean = memtest.verify(cp, buf, pattern, chunk)
    buf[12_345] = 7                                              # through an index
    poke = np.array([0xDEADBEEF], dtype=np.uint64)               # through a raw pointer, as a stray write
    cp.cuda.runtime.memcpy(buf.data.ptr + 8 * 250_001, poke.ctypes.data, 8, cp.cuda.runtime.memcpyHostToDevice)
    one_byte = np.array([0x01], dtype=np.uint8)                  # one byte of the last word
    cp.cuda.runtime.memcpy(buf.data.ptr + 8 * (words - 1) + 3, one_byte.ctypes.data, 1,
                           cp.cuda.runtime.memcpyHostToDevice)
    cp.cuda.runtime.deviceSynchronize()
    bad = memtest.verify(cp, buf, pattern, chunk)
    found[name] = {"clean": clean.mismatches, "bad": bad.mismatches, "positions": bad.positions}
print(json.dumps(found))
"""
# The sdc checksum of seeded inputs, twice, then with one input element changed.
PERTURB_ONE_ELEMENT = """
import json
import numpy as np
import cupy as cp
from gpucheck.gpuwork import sdc

a, b = sdc.inputs(11, 128)
first = sdc.checksum(cp, a, b)
again = sdc.checksum(cp, a, b)
changed = a.copy()
changed[77, 3] = np.float16(changed[77, 3] + np.float16(0.5))
print(json.dumps({"first": first, "again": again, "changed": sdc.checksum(cp, changed, b)}))
"""


@dataclass
class Run:
    exit: int | None
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False

    def __post_init__(self) -> None:
        for line in self.stdout.splitlines():
            assert line.startswith(MARKER), f"a stdout line that is not an event: {line!r}"
            self.events.append(json.loads(line[len(MARKER):]))

    def kinds(self) -> list[str]:
        return [e["event"] for e in self.events]

    def results(self) -> dict[str, dict[str, Any]]:
        return {e["test"]: e for e in self.events if e["event"] == "result"}

    def result(self, test: str) -> dict[str, Any]:
        found = self.results()
        assert test in found, f"no {test} result (exit {self.exit}):\n{self.stdout}\n{self.stderr}"
        return found[test]

    def only(self, kind: str) -> dict[str, Any]:
        found = [e for e in self.events if e["event"] == kind]
        assert len(found) == 1, f"{len(found)} {kind} events:\n{self.stdout}\n{self.stderr}"
        return found[0]


def environment(fake: bool = True, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKECUPY_", "FAKENVML_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    path = [str(FAKECUPY)] if fake else []
    env["PYTHONPATH"] = os.pathsep.join([*path, str(AGENT)])
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"  # numpy's BLAS: no thread fights on 2 cores
    if fake:
        env["FAKECUPY_FREE_BYTES"] = str(FAKE_FREE_BYTES)
    env.update(variables)
    return env


def run_program(program: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    """`python -m gpucheck.gpuwork.<program> args...`; a run past `timeout` is killed and still read."""
    command = [sys.executable, "-m", f"gpucheck.gpuwork.{program}", *args]
    proc = subprocess.Popen(command, env=env if env is not None else environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Run(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Run(None, out, err, timed_out=True)


def run_until_stuck(program: str, *args: str, env: dict[str, str], started: str, stuck_s: float = 1.5,
                    timeout: float = 60) -> Run:
    """Run until the `start` event of test `started`, let it go on for stuck_s, then kill it: a program still
    running then is stuck (`timed_out`), as the node side finds a wedged GPU at its --bench-timeout."""
    command = [sys.executable, "-m", f"gpucheck.gpuwork.{program}", *args]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(MARKER) and json.loads(line[len(MARKER):]) == {"event": "start", "test": started}:
                break
        proc.wait(timeout=stuck_s)
        finished = True
    except subprocess.TimeoutExpired:
        finished = False
    finally:
        proc.kill()
        out, err = proc.communicate(timeout=timeout)
    return Run(proc.returncode if finished else None, "".join(lines) + out, err, timed_out=not finished)


def run_python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A snippet in a child process (CuPy, fake or real, is never imported into pytest's own process)."""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout.strip().splitlines()[-1])
