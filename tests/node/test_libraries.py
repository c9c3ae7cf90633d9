"""libs.* checks: real libraries loaded through ctypes in a subprocess, real ldd, and the pure parts.

The CUDA libraries come from NVIDIA's pip wheels, installed once into a cached virtualenv under
~/.cache/gpucheck/test-venvs (they load without a GPU); MPI is Debian's OpenMPI (libopenmpi3).
Expected versions are read from the wheels' own metadata and from dpkg, never written here.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucheck.config import NodeConfig, Stack
from gpucheck.model import Status
from gpucheck.node import CollectError, Context
from gpucheck.node.stack import extension_links, known_libraries, libraries, library_search, version_codes
from gpucheck.profiles import Profile

# The smallest cuDNN 9 wheel for CUDA 12 (508 MB; the latest is ~720 MB); --no-deps skips cuBLAS,
# which libcudnn.so.9 (a dispatcher that loads its engines lazily) does not need to report its version.
WHEELS = ["nvidia-cuda-runtime-cu12==12.4.127", "nvidia-cudnn-cu12==9.6.0.74", "nvidia-nccl-cu12==2.21.5"]
DISTS = {"cudart": "nvidia-cuda-runtime-cu12", "cudnn": "nvidia-cudnn-cu12", "nccl": "nvidia-nccl-cu12"}
CACHE = Path(os.environ.get("GPUCHECK_TEST_VENVS", Path.home() / ".cache" / "gpucheck" / "test-venvs"))

REQUIRE_ALL = Profile("t", None, {"libraries": {"required": ["cudart", "cudnn", "nccl", "mpi"]}})
REQUIRE_NONE = Profile("t", None, {"libraries": {"required": []}})


# ------------------------------------------------------------------------------------------------
# helpers: virtualenvs, shared libraries built with gcc
# ------------------------------------------------------------------------------------------------

def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return Path(out)


@pytest.fixture(scope="session")
def cuda_wheels_venv() -> Path:
    """A virtualenv with the CUDA runtime, cuDNN and NCCL wheels, created once and cached."""
    key = "cuda-wheels-" + "-".join(w.split("==")[1] for w in WHEELS)
    target = CACHE / key
    done = target / ".complete"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done.exists() and (target / "bin" / "python").exists()):
            shutil.rmtree(target, ignore_errors=True)
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
            pip = subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                                  "--no-cache-dir", "--disable-pip-version-check", *WHEELS],
                                 capture_output=True, text=True, timeout=1800)
            if pip.returncode != 0:
                raise AssertionError(f"pip install {' '.join(WHEELS)} failed:\n{pip.stdout}\n{pip.stderr}")
            done.write_text(f"{time.monotonic() - started:.1f} s\n")
    return target / "bin" / "python"


def wheel_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))")
    out = subprocess.run([str(python), "-c", code, *DISTS.values()], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return json.loads(out)


def gcc_shared(tmp: Path, name: str, source: str, *extra: str) -> Path:
    if shutil.which("gcc") is None:
        raise AssertionError("gcc is needed to build test libraries (apt-get install gcc)")
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed", *extra],
                   check=True, timeout=120)
    return out


def ctx_for(*stacks: Stack, timeout: float = 30) -> Context:
    return Context(timeout=timeout, config=NodeConfig(stacks=list(stacks)))


@pytest.fixture
def no_system_libs(monkeypatch):
    """Search only the stacks: no LD_LIBRARY_PATH, no ldconfig cache, no standard folders."""
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(library_search, "STANDARD_DIRS", [])
    monkeypatch.setattr(library_search, "LDCONFIG_CANDIDATES", [])


def debian_openmpi_version() -> str:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libopenmpi3"], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError("Debian's OpenMPI is needed: apt-get install -y openmpi-bin libopenmpi3")
    return done.stdout.split("-")[0]  # 4.1.4-3+b1 -> 4.1.4


# ------------------------------------------------------------------------------------------------
# for real: the pip wheels and Debian's OpenMPI
# ------------------------------------------------------------------------------------------------

def test_wheels_and_debian_openmpi_report_their_real_versions(cuda_wheels_venv):
    wheels = wheel_versions(cuda_wheels_venv)
    stack = Stack("cuda12", str(cuda_wheels_venv), ["torch"])
    facts = libraries.collect(ctx_for(stack))
    expected = {
        "cudart": ".".join(wheels[DISTS["cudart"]].split(".")[:2]),  # 12.4.127 -> 12.4
        "cudnn": ".".join(wheels[DISTS["cudnn"]].split(".")[:3]),  # 9.6.0.74 -> 9.6.0
        "nccl": ".".join(wheels[DISTS["nccl"]].split(".")[:3]),  # 2.21.5 -> 2.21.5
    }
    for key, version in expected.items():
        result = libraries.library(key, {"libraries": facts}, REQUIRE_ALL)
        assert result.status == Status.PASS, result
        assert result.measured["cuda12"]["version"] == version, (key, result.measured, wheels)
        assert str(cuda_wheels_venv.parent.parent) in result.measured["cuda12"]["path"]
        entry = next(e for e in facts["libraries"][key] if e["path"] == result.measured["cuda12"]["path"])
        assert entry["origins"][0] == "stack:cuda12"
    mpi = libraries.library("mpi", {"libraries": facts}, REQUIRE_ALL)
    assert mpi.status == Status.PASS, mpi
    assert mpi.measured["cuda12"]["version"] == debian_openmpi_version()
    assert "Open MPI " + debian_openmpi_version() in mpi.reason
    summary = libraries.summary(facts)
    assert summary["nccl"] == {"cuda12": expected["nccl"]}
    assert summary["mpi"] == {"cuda12": f"Open MPI {debian_openmpi_version()}"}


def test_empty_venv_fails_every_required_library_naming_where_it_looked(tmp_path, no_system_libs):
    python = make_venv(tmp_path / "empty")
    facts = libraries.collect(ctx_for(Stack("bare", str(python), ["torch"])))
    for key in ("cudart", "cudnn", "nccl", "mpi"):
        result = libraries.library(key, {"libraries": facts}, REQUIRE_ALL)
        assert result.status == Status.FAIL, result
        assert f"lib{key}.so not found in stack bare (" in result.reason
        assert str(site_packages(python) / "nvidia" / "*" / "lib") in result.reason
        assert result.remediation
        # not required: absent is not applicable
        assert libraries.library(key, {"libraries": facts}, REQUIRE_NONE).status == Status.SKIP


def test_optional_library_found_is_a_pass_that_says_so(cuda_wheels_venv, no_system_libs):
    facts = libraries.collect(ctx_for(Stack("cuda12", str(cuda_wheels_venv), [])))
    result = libraries.library("nccl", {"libraries": facts}, REQUIRE_NONE)
    assert result.status == Status.PASS
    assert "not required by the profile" in result.reason


def test_system_mpi_found_through_ldconfig_without_stacks():
    facts = libraries.collect(ctx_for())
    result = libraries.library("mpi", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.PASS, result
    assert result.measured["system"]["version"] == debian_openmpi_version()
    entry = next(e for e in facts["libraries"]["mpi"] if e["path"] == result.measured["system"]["path"])
    assert "ldconfig" in entry["origins"]


# ------------------------------------------------------------------------------------------------
# for real: libraries that do not load, lack the symbol, hang or crash at load
# ------------------------------------------------------------------------------------------------

def fake_wheel_dir(tmp_path: Path, package: str) -> tuple[Path, Path]:
    python = make_venv(tmp_path / "venv")
    lib = site_packages(python) / "nvidia" / package / "lib"
    lib.mkdir(parents=True)
    return python, lib


def test_nccl_that_is_not_a_library_fails_with_the_loader_error(tmp_path, no_system_libs):
    python, lib = fake_wheel_dir(tmp_path, "nccl")
    (lib / "libnccl.so.2").write_text("not an ELF file\n")
    facts = libraries.collect(ctx_for(Stack("s", str(python), [])))
    result = libraries.library("nccl", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.FAIL
    assert "cannot load" in result.reason and "libnccl.so.2" in result.reason


def test_cudnn_without_its_version_function_fails(tmp_path, no_system_libs):
    python, lib = fake_wheel_dir(tmp_path, "cudnn")
    gcc_shared(lib, "libcudnn.so.9", "int cudnnCreate(void **h) { return 0; }\n")
    facts = libraries.collect(ctx_for(Stack("s", str(python), [])))
    result = libraries.library("cudnn", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.FAIL
    assert "has no symbol cudnnGetVersion" in result.reason


def test_cudart_that_hangs_at_load_is_killed_and_fails(tmp_path, no_system_libs):
    python, lib = fake_wheel_dir(tmp_path, "cuda_runtime")
    gcc_shared(lib, "libcudart.so.12", "#include <unistd.h>\n"
               "__attribute__((constructor)) static void hang(void) { sleep(600); }\n"
               "int cudaRuntimeGetVersion(int *v) { *v = 12020; return 0; }\n")
    started = time.monotonic()
    facts = libraries.collect(ctx_for(Stack("s", str(python), []), timeout=2))
    assert time.monotonic() - started < 15
    result = libraries.library("cudart", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.FAIL
    assert "did not finish within 2 s" in result.reason


def test_mpi_that_crashes_at_load_fails_without_taking_the_agent_down(tmp_path, no_system_libs):
    python, lib = fake_wheel_dir(tmp_path, "mpi")
    gcc_shared(lib, "libmpi.so.40", "#include <signal.h>\n"
               "__attribute__((constructor)) static void boom(void) { raise(SIGSEGV); }\n")
    facts = libraries.collect(ctx_for(Stack("s", str(python), [])))
    result = libraries.library("mpi", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.FAIL
    assert "killed by signal 11" in result.reason


def test_fake_library_version_decoded_through_ctypes(tmp_path, no_system_libs):
    python, lib = fake_wheel_dir(tmp_path, "nccl")
    gcc_shared(lib, "libnccl.so.2", "int ncclGetVersion(int *v) { *v = 2708; return 0; }\n")  # pre-2.9 code
    facts = libraries.collect(ctx_for(Stack("s", str(python), [])))
    result = libraries.library("nccl", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.PASS
    assert result.measured["s"]["version"] == "2.7.8"


def test_broken_copy_that_no_stack_picks_is_a_warning(tmp_path, no_system_libs, monkeypatch):
    python, lib = fake_wheel_dir(tmp_path, "nccl")
    gcc_shared(lib, "libnccl.so.2", "int ncclGetVersion(int *v) { *v = 22105; return 0; }\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "libnccl.so.2").write_text("garbage")
    monkeypatch.setattr(library_search, "STANDARD_DIRS", [str(other)])
    facts = libraries.collect(ctx_for(Stack("s", str(python), [])))
    result = libraries.library("nccl", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.WARN
    assert "2.21.5" in result.reason and f"another copy at {other}/libnccl.so.2" in result.reason


# ------------------------------------------------------------------------------------------------
# pure parts: version decoding, the ldconfig cache, picking
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, code, text", [
    (version_codes.cudart_version, 12020, "12.2"),
    (version_codes.cudart_version, 11080, "11.8"),
    (version_codes.cudart_version, 12040, "12.4"),
    (version_codes.nccl_version, 22105, "2.21.5"),
    (version_codes.nccl_version, 20906, "2.9.6"),
    (version_codes.nccl_version, 2708, "2.7.8"),
    (version_codes.cudnn_version, 90100, "9.1.0"),
    (version_codes.cudnn_version, 8907, "8.9.7"),
    (version_codes.cudnn_version, 7605, "7.6.5"),
])
def test_version_codes(fn, code, text):
    assert fn(code) == text


@pytest.mark.parametrize("text, implementation, version", [
    ("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022", "Open MPI", "4.1.4"),
    ("MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\n", "MPICH", "4.0.2"),
    ("Intel(R) MPI Library 2021.6 for Linux* OS\n", "Intel MPI", "2021.6"),
    ("MVAPICH2 Version:\t2.3.7\nMVAPICH2 Release date: ...", "MVAPICH", "2.3.7"),
])
def test_mpi_library_version_strings(text, implementation, version):
    assert version_codes.mpi_version(text) == (implementation, version)


def test_ldconfig_paths_keep_this_word_size(tmp_path, monkeypatch):
    fake = tmp_path / "ldconfig"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -p ] || exit 2\ncat <<'EOF'\n"
                    "1234 libs found in cache `/etc/ld.so.cache'\n"
                    "\tlibmpi_cxx.so.40 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpi_cxx.so.40\n"
                    "\tlibmpi.so.40 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpi.so.40\n"
                    "\tlibmpi.so.40 (libc6) => /lib/i386-linux-gnu/libmpi.so.40\n"
                    "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcudart.so.13\n"
                    "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setattr(library_search, "LDCONFIG_CANDIDATES", [str(fake)])
    paths, error = library_search.ldconfig_paths(30)
    assert error is None
    assert paths == ["/lib/x86_64-linux-gnu/libmpi_cxx.so.40", "/lib/x86_64-linux-gnu/libmpi.so.40",
                     "/usr/local/cuda-13.0/lib/libcudart.so.13"]
    pattern = known_libraries.lib_name_regex("libmpi")
    assert [os.path.basename(p) for p in paths if pattern.match(os.path.basename(p))] == ["libmpi.so.40"]


def test_each_stack_picks_its_own_wheel_before_the_system():
    wheel = {"path": "/s/nvidia/nccl/lib/libnccl.so.2", "origins": ["stack:a"], "version": "2.21.5"}
    system = {"path": "/usr/lib/libnccl.so.2", "origins": ["ldconfig", "system"], "version": "2.18.3"}
    facts = {"stacks": ["a", "b"], "places": [], "libraries": {"nccl": [wheel, system]}}
    result = libraries.library("nccl", {"libraries": facts}, REQUIRE_ALL)
    assert result.status == Status.PASS
    assert result.measured["a"]["version"] == "2.21.5" and result.measured["b"]["version"] == "2.18.3"


# ------------------------------------------------------------------------------------------------
# libs.ldd for real: extension libraries built with gcc inside a stack's site-packages
# ------------------------------------------------------------------------------------------------

EXT_SOURCE = "int horovod_init(void) { return 0; }\n"
FAKE_MPICH = ('#include <string.h>\n'
              'int MPI_Get_library_version(char *v, int *n) {\n'
              '  strcpy(v, "MPICH Version:\\t4.0.2\\nMPICH Release date:\\tThu Apr  7 2022\\n");\n'
              '  *n = (int)strlen(v); return 0; }\n')


def horovod_stack(tmp_path: Path, *link: str) -> tuple[Stack, Path]:
    python = make_venv(tmp_path / "hvd")
    folder = site_packages(python) / "horovod" / "torch"
    folder.mkdir(parents=True)
    ext = gcc_shared(folder, "mpi_lib_v2.cpython-311-x86_64-linux-gnu.so", EXT_SOURCE, *link)
    return Stack("torch-hvd", str(python), ["torch", "horovod"]), ext


def node_libmpi(facts: dict) -> str:
    entry = library_search.pick(facts["libraries"]["mpi"], library_search.SYSTEM_ORIGINS)
    assert entry, "no system libmpi: apt-get install -y libopenmpi3"
    return entry["realpath"]


def ldd_result(stack: Stack) -> tuple:
    ctx = ctx_for(stack)
    facts = {"libraries": libraries.collect(ctx), "ldd": extension_links.collect(ctx)}
    return extension_links.ldd(facts, REQUIRE_ALL), facts


def test_ldd_passes_when_horovod_links_the_node_openmpi(tmp_path):
    system = libraries.collect(ctx_for())
    stack, ext = horovod_stack(tmp_path, node_libmpi(system))
    result, facts = ldd_result(stack)
    assert result.status == Status.PASS, result
    assert "Open MPI" in result.reason and "libmpi.so.40" in result.reason
    assert f"$ ldd {ext}" in result.evidence


def test_ldd_fails_naming_the_missing_library_and_the_extension(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    lib = gcc_shared(gone, "libhorovod_missing.so", "int missing(void) { return 1; }\n",
                     "-Wl,-soname,libhorovod_missing.so")
    stack, ext = horovod_stack(tmp_path, str(lib))
    lib.unlink()
    result, _ = ldd_result(stack)
    assert result.status == Status.FAIL
    assert "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so needs libhorovod_missing.so: not found" \
        in result.reason
    assert "stack torch-hvd" in result.reason


def test_ldd_fails_when_horovod_links_another_mpi(tmp_path):
    mpich = tmp_path / "mpich" / "lib"
    mpich.mkdir(parents=True)
    fake = gcc_shared(mpich, "libmpi.so.12", FAKE_MPICH, "-Wl,-soname,libmpi.so.12")
    stack, _ = horovod_stack(tmp_path, str(fake), f"-Wl,-rpath,{mpich}")
    result, facts = ldd_result(stack)
    assert result.status == Status.FAIL, result
    assert f"links {fake} (MPICH 4.0.2), the node's MPI is" in result.reason
    assert "(Open MPI " in result.reason


def test_ldd_skips_without_tensorflow_or_horovod_and_without_stacks(tmp_path):
    python = make_venv(tmp_path / "t")
    ctx = ctx_for(Stack("torch-only", str(python), ["torch"]))
    facts = {"libraries": {"stacks": ["torch-only"], "places": [], "libraries": {}},
             "ldd": extension_links.collect(ctx)}
    result = extension_links.ldd(facts, REQUIRE_ALL)
    assert result.status == Status.SKIP and "no configured stack has TensorFlow or Horovod" in result.reason
    none = extension_links.ldd({"libraries": {}, "ldd": extension_links.collect(ctx_for())}, REQUIRE_ALL)
    assert none.status == Status.SKIP and "/etc/gpucheck/node.yaml" in none.reason


def test_ldd_warns_when_a_declared_framework_has_no_extension(tmp_path):
    python = make_venv(tmp_path / "t")
    ctx = ctx_for(Stack("tf", str(python), ["tensorflow"]))
    facts = {"libraries": {"stacks": ["tf"], "places": [], "libraries": {}}, "ldd": extension_links.collect(ctx)}
    result = extension_links.ldd(facts, REQUIRE_ALL)
    assert result.status == Status.WARN and "no tensorflow extension library" in result.reason


def test_ldd_missing_is_a_harness_error(tmp_path, monkeypatch):
    python = make_venv(tmp_path / "t")
    monkeypatch.setattr(extension_links, "which", lambda name: None)
    with pytest.raises(CollectError) as caught:
        extension_links.collect(ctx_for(Stack("tf", str(python), ["tensorflow"])))
    assert caught.value.harness and "ldd not found" in caught.value.reason
