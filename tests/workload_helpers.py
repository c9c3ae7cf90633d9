"""Helpers for the workload tests: the framework virtualenvs (built once, cached), launchers, parsing. In tests/
itself: the Kubernetes lab's nodes share the tf-horovod virtualenv too (tests/kubernetes/test_lab_nodes.py).

The virtualenvs live under ~/.cache/gpucheck/test-venvs/<key> (or $GPUCHECK_TEST_VENVS), keyed by the
pinned versions and the interpreter, built by the tests themselves on a fresh machine and reused after:

- ``tf-horovod``: tensorflow-cpu 2.15.1 + horovod 0.28.1 built from source with MPI and Gloo, TF only.
  The Horovod wheel is kept beside the venvs, so a lost venv is rebuilt without compiling again.
- ``torch``: torch 2.13.0 (the CPU wheel).

Each build takes a file lock, so parallel test sessions wait for one another instead of racing, and is
marked complete with a ``.complete`` file holding the build's timings (the cold cost, reported by the
tests). A build that failed half way is removed and started again.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from support import ROOT

WORKLOADS = ROOT / "agent" / "gpucheck" / "workloads"
CACHE = Path(os.environ.get("GPUCHECK_TEST_VENVS", Path.home() / ".cache" / "gpucheck" / "test-venvs"))
PY_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"

# A rank's own watchdog (--timeout-s) here ends a hang, never times a run: the tests give way to the lab chain
# (tests/conftest.py), and on two cores beside it a small run went past 240 s. WAIT_S: the test's own wait, past it.
WATCHDOG_S = 600
WAIT_S = WATCHDOG_S + 60
TF_PIN = "tensorflow-cpu==2.15.1"  # TF >= 2.16 (Keras 3) breaks Horovod's Keras callbacks
HOROVOD_PIN = "horovod==0.28.1"  # the last release; builds unpatched against TF 2.15
TORCH_PIN = "torch==2.13.0"
# Horovod's build needs these in the venv with --no-build-isolation (it imports tensorflow at build time).
BUILD_PINS = ["setuptools<70", "wheel", "packaging", "cloudpickle", "psutil", "pyyaml"]
HOROVOD_BUILD_ENV = {
    "HOROVOD_WITH_TENSORFLOW": "1",
    "HOROVOD_WITH_MPI": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_PYTORCH": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
    "HOROVOD_CPU_OPERATIONS": "",  # let Horovod pick (MPI or Gloo at run time)
    "MAKEFLAGS": f"-j{os.cpu_count() or 1}",
}
# Debian packages the Horovod build and the MPI runs need (binary, compiler wrappers and headers).
APT_NEEDS = {"mpirun": "openmpi-bin", "mpicxx": "libopenmpi-dev", "cmake": "cmake", "g++": "g++"}

# What mpirun needs as root on a 2-core machine (measured: Debian's OpenMPI 4.1.4).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           # loopback only: the test must not touch any other interface
           "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--map-by", "slot"]
# Keep the frameworks quiet and single-threaded enough not to starve two ranks on two cores. Horovod negotiates
# every 50 ms, not every 1 ms: each negotiation is an MPI collective that spins until the other rank, computing on
# the same two cores, joins it (measured, the small ResNet on 2 idle cores: 47 CPU-s at 1 ms, 33 at 10 ms, 32 at
# 50 ms, 16 for 1 rank; beside a busy process 43 at 10 ms, 35 at 100 ms).
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "",
             "OMP_NUM_THREADS": "1", "HOROVOD_CYCLE_TIME": "50"}


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
                           f"\n--- stderr\n{done.stderr[-6000:]}")
    return done


def ensure_apt_tools() -> float:
    """Install the Debian packages the builds and runs need when one is missing (root). Returns seconds."""
    missing = sorted({pkg for tool, pkg in APT_NEEDS.items() if shutil.which(tool) is None})
    if not missing:
        return 0.0
    start = time.monotonic()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], timeout=600, env=env)
    run(["apt-get", "install", "-y", "-qq", *missing], timeout=900, env=env)
    return time.monotonic() - start


class Stack:
    """One cached framework virtualenv."""

    def __init__(self, name: str, key: str, builder):
        self.name, self.key, self._builder = name, key, builder
        self.dir = CACHE / key
        self.python = self.dir / "bin" / "python"
        self.bin = self.dir / "bin"
        self.timings: dict[str, float] = {}
        self.cold = False  # True when this session built it

    def ensure(self) -> Stack:
        CACHE.mkdir(parents=True, exist_ok=True)
        done = self.dir / ".complete"
        with open(CACHE / f"{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (done.exists() and self.python.exists()):
                shutil.rmtree(self.dir, ignore_errors=True)
                start = time.monotonic()
                run([sys.executable, "-m", "venv", str(self.dir)], timeout=300)
                self.timings["venv_s"] = round(time.monotonic() - start, 1)
                self._builder(self)
                self.timings["total_s"] = round(time.monotonic() - start, 1)
                done.write_text(json.dumps(self.timings, indent=1) + "\n")
                self.cold = True
            else:
                self.timings = json.loads(done.read_text() or "{}")
        return self

    def pip(self, *args: str, timeout: float = 1200, env: dict[str, str] | None = None) -> None:
        run([str(self.python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
            timeout=timeout, env=env)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a rank runs in: this venv's bin first on PATH, MPI-as-root, quiet frameworks."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(MPI_ENV)
        env.update(QUIET_ENV)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.dir)
        env.update(extra)
        return env


def _timed(stack: Stack, label: str, fn) -> None:
    start = time.monotonic()
    fn()
    stack.timings[label] = round(time.monotonic() - start, 1)


def _build_tf_horovod(stack: Stack) -> None:
    stack.timings["apt_s"] = round(ensure_apt_tools(), 1)
    _timed(stack, "pip_tensorflow_s", lambda: stack.pip(TF_PIN, *BUILD_PINS))
    wheels = CACHE / "wheels" / f"horovod-0.28.1-tf2.15.1-mpi-gloo-{PY_TAG}"
    have = sorted(wheels.glob("horovod-*.whl")) if wheels.is_dir() else []
    if not have:
        tmp = wheels.with_name(wheels.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        env = stack.env(**HOROVOD_BUILD_ENV)
        _timed(stack, "build_horovod_s", lambda: run(
            [str(stack.python), "-m", "pip", "wheel", "--no-build-isolation", "--no-cache-dir", "--no-deps",
             "-w", str(tmp), HOROVOD_PIN], timeout=1800, env=env))
        shutil.rmtree(wheels, ignore_errors=True)
        tmp.rename(wheels)
        have = sorted(wheels.glob("horovod-*.whl"))
    _timed(stack, "pip_horovod_s", lambda: stack.pip(str(have[-1])))
    check = run([str(stack.bin / "horovodrun"), "--check-build"], timeout=300, env=stack.env())
    for want in ("[X] TensorFlow", "[X] MPI", "[X] Gloo"):
        if want not in check.stdout:
            raise RuntimeError(f"horovod built without {want}:\n{check.stdout}")


def _build_torch(stack: Stack) -> None:
    _timed(stack, "pip_torch_s", lambda: stack.pip(TORCH_PIN))


TF_HOROVOD = Stack("tf-horovod", f"tf-horovod-tf2.15.1-hvd0.28.1-mpi-gloo-{PY_TAG}", _build_tf_horovod)
TORCH = Stack("torch", f"torch-2.13.0-{PY_TAG}", _build_torch)


@dataclass
class Launched:
    cmd: list[str]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    def explain(self) -> str:
        return (f"$ {' '.join(self.cmd)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-6000:]}")


def launch(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> Launched:
    """Run a launcher (mpirun, horovodrun, torchrun, a task) in its own process group; on timeout the
    whole group is killed (ranks included) and returncode is None."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate(timeout=30)
        code = None
    return Launched(cmd, code, out, err, time.monotonic() - start)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def load_workload(name: str):
    """A workload file (a script or rank_io.py) loaded as a fresh module, its `main` not run."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), WORKLOADS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_ports(count: int) -> int:
    """A base port such that base .. base+count-1 are all free on 127.0.0.1 right now."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        taken = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                taken.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in taken:
                sock.close()
    raise RuntimeError(f"no run of {count} free ports on 127.0.0.1")


if __name__ == "__main__":  # build by hand: python tests/workload_helpers.py tf-horovod torch
    for name in sys.argv[1:]:
        stack = {"tf-horovod": TF_HOROVOD, "torch": TORCH}[name].ensure()
        print(name, stack.dir, json.dumps(stack.timings))
