"""frameworks.* checks: the probe run as a file by a real stack interpreter, and the pure verdicts.

No TensorFlow, Horovod or PyTorch is installed here: stand-in packages written into a temporary
virtualenv's site-packages answer the same calls the real ones do (tf.test.is_built_with_cuda(),
hvd.nccl_built(), torch.cuda.get_arch_list(), ...), so the probe, its process handling and the
evaluation run end to end through a real interpreter. The real frameworks run in the lab.
"""

from __future__ import annotations

import copy
import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucheck.config import KNOWN_FRAMEWORKS, NodeConfig, Stack
from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.stack import cuda_arch, framework_probe, frameworks, stacks
from gpucheck.profiles import Profile, load
from support import REAL

CHECK_BUILD = REAL / "horovod-nccl" / "horovodrun-check-build-v0.22.1-tf-torch-mpi-gloo-nccl-deepmd.txt"

GPU_PROFILE = Profile("gpu", None, {"frameworks": {
    "required": ["tensorflow", "horovod"], "gpu_required": True,
    "horovod_controllers_required": ["mpi", "gloo"], "horovod_ops_required": ["nccl"]}})
CPU_PROFILE = Profile("cpu", None, {"frameworks": {
    "required": ["tensorflow", "horovod"], "gpu_required": False,
    "horovod_controllers_required": ["mpi", "gloo"], "horovod_ops_required": []}})
TORCH_GPU = Profile("torch", None, {"frameworks": {"required": ["torch"], "gpu_required": True}})
NOTHING = Profile("none", None, {"frameworks": {"required": []}})


def nvml(count: int = 8, cc: str = "9.0") -> dict:
    return {"driver_version": "535.183.01", "cuda_driver_version": "12.2",
            "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "compute_capability": cc, "lost": False}
                     for i in range(count)]}


# ------------------------------------------------------------------------------------------------
# stand-in frameworks written into a real virtualenv
# ------------------------------------------------------------------------------------------------

TF_SOURCE = '''\
import os
import types
print("tensorflow noise on stdout")          # the probe must keep its own stdout clean
__version__ = {version!r}
_GPUS = {gpus!r}


class _Config:
    @staticmethod
    def list_physical_devices(kind):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # honoured, as by CUDA
        count = _GPUS if visible is None else min(_GPUS, len([d for d in visible.split(",") if d]))
        return ["/physical_device:GPU:%d" % i for i in range(count)] if kind == "GPU" else []


config = _Config()
test = types.SimpleNamespace(is_built_with_cuda=lambda: {cuda!r})
sysconfig = types.SimpleNamespace(get_build_info=lambda: {build_info!r})
'''

TORCH_SOURCE = '''\
import types
__version__ = {version!r}
version = types.SimpleNamespace(cuda={cuda!r})
cuda = types.SimpleNamespace(is_available=lambda: {available!r}, device_count=lambda: {count!r},
                             get_arch_list=lambda: {archs!r}, nccl=types.SimpleNamespace(version=lambda: (2, 20, 5)))
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 8902))
distributed = types.SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: {nccl!r},
                                    is_gloo_available=lambda: True, is_mpi_available=lambda: False)
'''

HVD_BINDING = '''\
import os, signal, sys, time
import {framework}  # like the real binding, which loads its framework first
_state = {{"up": False}}


def init():
    mode = {init!r}
    if os.geteuid() == 0 and os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") != "1":  # as Open MPI does
        raise RuntimeError("mpirun has detected an attempt to run as root.")
    if mode == "raise":
        raise ValueError("Horovod has been shut down. This was caused by an exception on one of the ranks")
    if mode == "hang":
        time.sleep(600)
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    _state["up"] = True


def shutdown():
    _state["up"] = False


def size():
    return 1


def rank():
    return 0


def mpi_built():
    return {mpi!r}


def gloo_built():
    return {gloo!r}


def nccl_built():
    return {nccl!r}


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return {cuda!r}


def rocm_built():
    return False


def mpi_enabled():
    return {mpi!r}


def gloo_enabled():
    return False
'''

TF_ARCHS = ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"]


def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return Path(out)


class FakeStack:
    """A virtualenv whose site-packages holds stand-ins for the frameworks."""

    def __init__(self, root: Path):
        self.python = make_venv(root)
        self.site = site_packages(self.python)

    def package(self, name: str, source: str) -> None:
        folder = self.site.joinpath(*name.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text(source)

    def tensorflow(self, version="2.15.1", gpus=8, cuda=True, archs=None) -> FakeStack:
        info = {"cuda_version": "12.2", "cudnn_version": "8", "is_cuda_build": cuda,
                "cuda_compute_capabilities": TF_ARCHS if archs is None else archs}
        self.package("tensorflow", TF_SOURCE.format(version=version, gpus=gpus, cuda=cuda, build_info=info))
        return self

    def torch(self, version="2.3.1+cu121", cuda="12.1", available=True, count=8, archs=None,
              nccl=True) -> FakeStack:
        archs = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"] if archs is None else archs
        self.package("torch", TORCH_SOURCE.format(version=version, cuda=cuda, available=available, count=count,
                                                  archs=archs, nccl=nccl))
        return self

    def horovod(self, binding="tensorflow", version="0.28.1", init="ok", mpi=True, gloo=True, nccl=21805,
                cuda=True) -> FakeStack:
        self.package("horovod", f"__version__ = {version!r}\n")
        self.package(f"horovod.{binding}", HVD_BINDING.format(framework=binding, init=init, mpi=mpi, gloo=gloo,
                                                              nccl=nccl, cuda=cuda))
        return self

    def horovodrun(self, text: str) -> FakeStack:
        """A horovodrun that prints `text` and leaves a file saying it ran."""
        script = self.python.parent / "horovodrun"
        (self.python.parent / "check-build.txt").write_text(text)
        script.write_text(f"#!/bin/sh\ntouch '{self.python.parent / 'horovodrun-ran'}'\n"
                          f"cat '{self.python.parent / 'check-build.txt'}'\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return self

    def stack(self, name: str, *fws: str) -> Stack:
        return Stack(name, str(self.python), list(fws))


def collect(*stacks: Stack, timeout: float = 60, full: bool = False) -> dict:
    return framework_probe.collect(Context(timeout=timeout, config=NodeConfig(stacks=list(stacks)), full=full))


def facts_of(fw: dict, gpus: int = 8, cc: str = "9.0") -> dict:
    return {"frameworks": fw, "nvml": nvml(gpus, cc)}


# ------------------------------------------------------------------------------------------------
# end to end through a real interpreter
# ------------------------------------------------------------------------------------------------

def test_healthy_tf_horovod_stack_passes_every_check(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow(archs=["sm_70", "sm_80", "sm_90", "compute_90"]).horovod()
    fake.horovodrun(CHECK_BUILD.read_text())
    fw = collect(fake.stack("tf-horovod", "tensorflow", "horovod"), full=True)
    facts = facts_of(fw)
    tf = frameworks.tensorflow(facts, GPU_PROFILE)
    assert tf.status == Status.PASS, tf
    assert "TensorFlow 2.15.1, CUDA 12.2" in tf.reason and "sees 8 GPU(s)" in tf.reason
    hvd = frameworks.horovod(facts, GPU_PROFILE)
    assert hvd.status == Status.PASS, hvd
    assert "horovod.tensorflow 0.28.1: built with MPI, GLOO, NCCL 2.18.5" in hvd.reason
    assert hvd.measured["tf-horovod:horovod.tensorflow"]["init"]["ok"] is True
    # --check-build kept as evidence, parsed, and its claim about PyTorch not trusted
    stack = fw["stacks"][0]
    assert stack["check_build"]["parsed"]["frameworks"]["pytorch"] is True
    assert "Available Tensor Operations" in hvd.evidence
    arch = frameworks.gpu_arch(facts, GPU_PROFILE)
    assert arch.status == Status.PASS, arch
    assert frameworks.torch(facts, GPU_PROFILE).status == Status.SKIP


def test_check_build_runs_only_in_a_deep_run(tmp_path):
    """horovodrun --check-build imports the frameworks again per question: evidence for --full, never the
    passive run a Slurm health check makes, whose verdict is the probe's alone."""
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod().horovodrun(CHECK_BUILD.read_text())
    facts = facts_of(collect(fake.stack("tf-horovod", "tensorflow", "horovod")))
    assert "check_build" not in facts["frameworks"]["stacks"][0]
    assert not (fake.python.parent / "horovodrun-ran").exists()
    hvd = frameworks.horovod(facts, GPU_PROFILE)
    assert hvd.status == Status.PASS and "Available Tensor Operations" not in hvd.evidence, hvd


def test_summary_lists_versions_per_stack(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod()
    fw = collect(fake.stack("tf-horovod", "tensorflow", "horovod"))
    assert frameworks.summary(fw) == {"tf-horovod": {"tensorflow": "2.15.1", "horovod": "0.28.1",
                                                     "horovod.tensorflow.nccl": "2.18.5"}}


def test_empty_venv_fails_required_frameworks_with_the_import_error(tmp_path):
    python = make_venv(tmp_path / "empty")
    facts = facts_of(collect(Stack("tf", str(python), ["tensorflow", "horovod"]),
                             Stack("pt", str(python), ["torch"])))
    tf = frameworks.tensorflow(facts, GPU_PROFILE)
    assert tf.status == Status.FAIL
    assert "stack tf: import tensorflow failed: ModuleNotFoundError: No module named 'tensorflow'" in tf.reason
    hvd = frameworks.horovod(facts, GPU_PROFILE)
    assert hvd.status == Status.FAIL
    assert "horovod.tensorflow: import failed: ModuleNotFoundError: No module named 'horovod'" in hvd.reason
    pt = frameworks.torch(facts, NOTHING)  # declared by a stack, so broken even if not required
    assert pt.status == Status.FAIL and "No module named 'torch'" in pt.reason


def test_tensorflow_cpu_build_fails_on_a_gpu_profile_and_passes_on_cpu(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow(cuda=False, gpus=0, archs=[])
    facts = facts_of(collect(fake.stack("tf", "tensorflow")))
    gpu = frameworks.tensorflow(facts, GPU_PROFILE)
    assert gpu.status == Status.FAIL and "was not built with CUDA" in gpu.reason
    assert frameworks.tensorflow(facts, CPU_PROFILE).status == Status.PASS
    assert frameworks.gpu_arch(facts, GPU_PROFILE).status == Status.SKIP  # CPU build: nothing to compare


def test_agent_cuda_visible_devices_does_not_hide_gpus_from_the_probe(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # e.g. run inside a one-GPU Slurm step
    fake = FakeStack(tmp_path / "tf").tensorflow(gpus=8)
    result = frameworks.tensorflow(facts_of(collect(fake.stack("tf", "tensorflow"))), GPU_PROFILE)
    assert result.status == Status.PASS and "sees 8 GPU(s)" in result.reason


def test_tensorflow_seeing_fewer_gpus_than_nvml_fails(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow(gpus=6)
    result = frameworks.tensorflow(facts_of(collect(fake.stack("tf", "tensorflow"))), GPU_PROFILE)
    assert result.status == Status.FAIL
    assert "sees 6 of the 8 GPUs NVML reports" in result.reason


def test_horovod_without_nccl_or_gloo_fails_naming_each(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod(gloo=False, nccl=0)
    facts = facts_of(collect(fake.stack("tf", "tensorflow", "horovod")))
    result = frameworks.horovod(facts, GPU_PROFILE)
    assert result.status == Status.FAIL
    assert "built without Gloo controller (gloo_built() is False)" in result.reason
    assert "built without NCCL tensor operations (nccl_built() is False)" in result.reason
    assert "MPI controller" not in result.reason


def test_horovod_init_failure_fails(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod(init="raise")
    result = frameworks.horovod(facts_of(collect(fake.stack("tf", "tensorflow", "horovod"))), CPU_PROFILE)
    assert result.status == Status.FAIL
    assert "hvd.init() failed: ValueError: Horovod has been shut down" in result.reason


def test_horovod_init_crash_keeps_what_came_before(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod(init="crash")
    fw = collect(fake.stack("tf", "tensorflow", "horovod"))
    facts = facts_of(fw)
    assert frameworks.tensorflow(facts, GPU_PROFILE).status == Status.PASS  # printed before the crash
    result = frameworks.horovod(facts, CPU_PROFILE)
    assert result.status == Status.FAIL
    assert "hvd.init() never returned: the probe was killed by signal 11 while probing horovod.tensorflow " \
           "(hvd.init())" in result.reason


def test_horovod_init_hang_is_a_harness_error_after_the_timeout(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod(init="hang")
    started = time.monotonic()
    fw = collect(fake.stack("tf", "tensorflow", "horovod"), timeout=3)
    assert time.monotonic() - started < 15
    result = frameworks.horovod(facts_of(fw), CPU_PROFILE)
    assert result.status == Status.ERROR
    assert "did not finish within 3 s while probing horovod.tensorflow (hvd.init())" in result.reason


def test_check_build_claims_are_noted_but_not_trusted(tmp_path):
    # horovodrun lists MPI as built; Horovod itself says it is not: the verdict follows Horovod.
    fake = FakeStack(tmp_path / "tf").tensorflow().horovod(mpi=False).horovodrun(CHECK_BUILD.read_text())
    result = frameworks.horovod(facts_of(collect(fake.stack("tf", "tensorflow", "horovod"), full=True)), CPU_PROFILE)
    assert result.status == Status.FAIL
    assert "built without MPI controller (mpi_built() is False)" in result.reason
    assert "horovodrun --check-build lists mpi but horovod.tensorflow says mpi_built() is False" in result.reason


def test_torch_stack_with_horovod_torch_binding(tmp_path):
    fake = FakeStack(tmp_path / "pt").torch().horovod(binding="torch")
    facts = facts_of(collect(fake.stack("pt", "torch", "horovod")))
    result = frameworks.torch(facts, TORCH_GPU)
    assert result.status == Status.PASS, result
    assert "PyTorch 2.3.1+cu121, CUDA 12.1, sees 8 GPU(s)" in result.reason
    hvd = frameworks.horovod(facts, CPU_PROFILE)
    assert hvd.status == Status.PASS and "horovod.torch 0.28.1" in hvd.reason


def test_torch_cpu_build_fails_on_a_gpu_profile(tmp_path):
    fake = FakeStack(tmp_path / "pt").torch(version="2.3.1+cpu", cuda=None, available=False, count=0, archs=[])
    result = frameworks.torch(facts_of(collect(fake.stack("pt", "torch"))), TORCH_GPU)
    assert result.status == Status.FAIL and "CPU-only build" in result.reason


def test_torch_cannot_use_cuda_fails(tmp_path):
    fake = FakeStack(tmp_path / "pt").torch(available=False, count=0)
    result = frameworks.torch(facts_of(collect(fake.stack("pt", "torch"))), TORCH_GPU)
    assert result.status == Status.FAIL and "cannot use CUDA" in result.reason


def test_probe_prints_only_marked_json_lines(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow()
    done = subprocess.run([str(fake.python), str(framework_probe.PROBE), "--frameworks", "tensorflow"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith(framework_probe.MARK) for line in lines), lines
    records = [json.loads(line[len(framework_probe.MARK):]) for line in lines]
    assert [r["framework"] for r in records] == ["_probe", "tensorflow", "_done"]
    assert "tensorflow noise on stdout" in done.stderr


def test_the_agent_modules_beside_the_probe_do_not_shadow_the_stacks_own(tmp_path):
    # The probe lives in gpucheck/node/stack, beside pins.py, libraries.py, ...: a framework importing a module
    # of one of those names must get the stack's.
    assert (framework_probe.PROBE.parent / "pins.py").is_file()
    fake = FakeStack(tmp_path / "tf")
    fake.package("pins", "OWNER = 'the stack'\n")
    fake.package("tensorflow", "import pins\n__version__ = pins.OWNER\n")
    record = collect(fake.stack("tf", "tensorflow"))["stacks"][0]["probe"]["tensorflow"]
    assert record["import_ok"], record
    assert record["version"] == "the stack"


def test_missing_stack_python_fails(tmp_path):
    facts = facts_of(collect(Stack("gone", str(tmp_path / "nope" / "bin" / "python"), ["tensorflow"])))
    result = frameworks.tensorflow(facts, GPU_PROFILE)
    assert result.status == Status.FAIL and "does not exist or is not executable" in result.reason


# ------------------------------------------------------------------------------------------------
# gates: no stacks, framework in no stack
# ------------------------------------------------------------------------------------------------

def test_no_stacks_configured_skips_with_how_to_configure():
    facts = facts_of(collect())
    for check in (frameworks.tensorflow, frameworks.horovod, frameworks.torch, frameworks.gpu_arch):
        result = check(facts, GPU_PROFILE)
        assert result.status == Status.SKIP
        assert "/etc/gpucheck/node.yaml" in result.reason and "gpucheck_agent" in result.reason


def test_required_framework_in_no_stack_fails_and_optional_skips(tmp_path):
    fake = FakeStack(tmp_path / "pt").torch()
    facts = facts_of(collect(fake.stack("pt", "torch")))
    result = frameworks.tensorflow(facts, GPU_PROFILE)
    assert result.status == Status.FAIL
    assert "the profile requires TensorFlow but no configured stack has it (stacks: pt)" in result.reason
    assert frameworks.tensorflow(facts, NOTHING).status == Status.SKIP


def test_lab_profile_loads_and_accepts_a_cpu_stack(tmp_path):
    fake = FakeStack(tmp_path / "tf").tensorflow(cuda=False, gpus=0, archs=[]).horovod(nccl=0, cuda=False)
    facts = facts_of(collect(fake.stack("tf-horovod", "tensorflow", "horovod")))
    lab = load("lab")
    assert frameworks.tensorflow(facts, lab).status == Status.PASS
    assert frameworks.horovod(facts, lab).status == Status.PASS


# ------------------------------------------------------------------------------------------------
# gpu_arch: pure
# ------------------------------------------------------------------------------------------------

def probe_facts(tf_archs=None, torch_archs=None) -> dict:
    probe: dict = {"horovod": {}}
    if tf_archs is not None:
        probe["tensorflow"] = {"framework": "tensorflow", "import_ok": True, "version": "2.15.1",
                               "built_with_cuda": True, "gpus": 8,
                               "build_info": {"cuda_compute_capabilities": tf_archs}}
    if torch_archs is not None:
        probe["torch"] = {"framework": "torch", "import_ok": True, "version": "2.3.1", "cuda_version": "12.1",
                          "arch_list": torch_archs}
    return {"configured": True, "stacks": [{"name": "s", "frameworks": ["tensorflow", "torch"], "probe": probe}]}


@pytest.mark.parametrize("archs, framework, cc, status, words", [
    (["sm_70", "sm_80", "sm_90"], "torch", "9.0", Status.PASS, ""),
    (["sm_80"], "torch", "8.6", Status.PASS, ""),  # binary for 8.0 runs on 8.6
    (["sm_70", "sm_80", "compute_80"], "torch", "9.0", Status.WARN, "only through PTX"),
    (["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "torch", "3.7", Status.FAIL,
     "no code for compute capability 3.7"),
    (["sm_86"], "torch", "8.0", Status.FAIL, "no code for compute capability 8.0"),
    (["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"], "tensorflow", "8.0", Status.PASS, ""),
    (["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"], "tensorflow", "9.0", Status.WARN, "PTX"),
    (["3.5", "5.2", "6.0", "7.0"], "tensorflow", "6.1", Status.PASS, ""),
    (["sm_50", "sm_60"], "tensorflow", "3.7", Status.FAIL, "no code for compute capability 3.7"),
])
def test_gpu_arch(archs, framework, cc, status, words):
    fw = probe_facts(tf_archs=archs) if framework == "tensorflow" else probe_facts(torch_archs=archs)
    result = frameworks.gpu_arch(facts_of(fw, cc=cc), GPU_PROFILE)
    assert result.status == status, result
    assert words in result.reason


def test_gpu_arch_names_the_gpus_and_skips_without_gpus():
    fw = probe_facts(torch_archs=["sm_80"])
    facts = facts_of(fw, cc="8.0")
    facts["nvml"]["gpus"][2]["compute_capability"] = "7.0"
    result = frameworks.gpu_arch(facts, GPU_PROFILE)
    assert result.status == Status.FAIL and "compute capability 7.0 (GPU2)" in result.reason
    no_gpu = copy.deepcopy(facts)
    no_gpu["nvml"]["gpus"] = []
    assert frameworks.gpu_arch(no_gpu, GPU_PROFILE).status == Status.SKIP


def test_parse_arch_semantics():
    assert cuda_arch.parse_arch("compute_80", "tensorflow") == ((8, 0), True, True)
    assert cuda_arch.parse_arch("compute_80", "torch") == ((8, 0), False, True)
    assert cuda_arch.parse_arch("sm_90a", "torch") == ((9, 0), True, False)
    assert cuda_arch.parse_arch("sm_100", "torch") == ((10, 0), True, False)
    assert cuda_arch.parse_arch("8.6+PTX", "torch") == ((8, 6), True, True)
    assert cuda_arch.parse_arch("garbage", "torch") is None


def test_the_node_names_the_frameworks_node_yaml_accepts():
    assert set(stacks.NAMES) == set(KNOWN_FRAMEWORKS) and set(stacks.BINDINGS) < set(KNOWN_FRAMEWORKS)
