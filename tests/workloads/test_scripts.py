"""The workload scripts as files: standalone (stdlib + their framework + the rank_io.py beside them), Python
3.9 syntax, one result line per process even when the framework is missing, their folder never shadowing a
framework; the all-reduce arithmetic against nccl-tests' formulas."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucheck.workloads.launch import SUPPORT_FILES
from gpucheck.workloads.results import MARK, parse_results
from workload_helpers import WORKLOADS, load_workload

SCRIPTS = {
    "smoke_horovod_keras.py": {"tensorflow", "horovod", "numpy"},
    "smoke_torch_ddp.py": {"torch"},
    "smoke_tf_ps.py": {"tensorflow", "numpy"},
    "allreduce_bench.py": {"tensorflow", "horovod", "torch"},
    "resnet_horovod_keras.py": {"tensorflow", "horovod", "numpy"},
    "resnet_torch_ddp.py": {"torch"},
}
GPUCHECK_SIDE = ["launch.py", "results.py", "training_results.py"]
STDLIB = set(sys.stdlib_module_names)
SIBLINGS = {path.stem for path in SUPPORT_FILES}  # rank_io: imported from the script's own folder
TF_CONFIG = json.dumps({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
                        "task": {"type": "chief", "index": 0}})


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level imports, imports inside functions), top-level package names."""
    tree = ast.parse(path.read_text())
    top, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = {node.module.split(".")[0]}
        else:
            continue
        (top if node.col_offset == 0 else inner).update(names)
    return top, inner


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_is_standalone_and_python39(name):
    path = WORKLOADS / name
    ast.parse(path.read_text(), feature_version=(3, 9))
    top, inner = imports(path)
    assert top <= STDLIB | SIBLINGS, f"{name} imports {top - STDLIB} at module level: it must start without them"
    assert inner - STDLIB <= SCRIPTS[name], f"{name} imports {inner - STDLIB - SCRIPTS[name]}"
    assert "gpucheck" not in top | inner


@pytest.mark.parametrize("path", SUPPORT_FILES, ids=lambda p: p.name)
def test_support_module_is_standard_library_only_and_python39(path):
    ast.parse(path.read_text(), feature_version=(3, 9))
    top, inner = imports(path)
    assert top | inner <= STDLIB, f"{path.name} imports {(top | inner) - STDLIB}"


@pytest.mark.parametrize("name", GPUCHECK_SIDE)
def test_gpucheck_side_modules_use_the_standard_library_only(name):
    top, inner = imports(WORKLOADS / name)
    assert (top | inner) - {"__future__"} <= STDLIB


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_runs_without_any_framework(name):
    done = subprocess.run([sys.executable, "-I", "-S", str(WORKLOADS / name), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


@pytest.mark.parametrize("name, extra", [("smoke_horovod_keras.py", []), ("smoke_torch_ddp.py", []),
                                         ("allreduce_bench.py", ["--framework", "torch"]),
                                         ("resnet_horovod_keras.py", []), ("resnet_torch_ddp.py", [])])
def test_missing_framework_still_prints_one_failed_result(name, extra):
    """-S: no site-packages, so the framework import fails the way it does on a badly provisioned node."""
    done = subprocess.run([sys.executable, "-I", "-S", str(WORKLOADS / name), *extra], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    (result,) = parse_results(done.stdout)
    assert done.stdout.count("GPUCHECK_RESULT") == 1 and done.stdout.endswith("\n")
    assert result["ok"] is False and "ModuleNotFoundError" in result["error"]
    assert "Traceback" in done.stderr  # the human log goes to stderr
    # the protocol, byte for byte: the marker, the JSON with sorted keys and no spaces, one newline
    assert done.stdout == MARK + json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n"


@pytest.mark.parametrize("name, framework", [("smoke_torch_ddp.py", "torch"), ("smoke_horovod_keras.py", "horovod"),
                                             ("smoke_tf_ps.py", "tensorflow"), ("resnet_torch_ddp.py", "torch"),
                                             ("resnet_horovod_keras.py", "tensorflow")])
def test_the_scripts_folder_does_not_shadow_a_framework(tmp_path, name, framework):
    """On a node the script lies in a folder with rank_io.py (and whatever else is there): Python puts that
    folder first on sys.path, the script takes it off again before any framework is imported."""
    for path in [WORKLOADS / name, *SUPPORT_FILES]:
        shutil.copy(path, tmp_path)
    (tmp_path / f"{framework}.py").write_text("raise SystemExit('imported the shadow')\n")
    done = subprocess.run([sys.executable, "-S", str(tmp_path / name)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "TF_CONFIG": TF_CONFIG})
    (result,) = parse_results(done.stdout)
    assert "ModuleNotFoundError" in result["error"], done.stderr  # the real import failed: no shadow was seen
    assert "imported the shadow" not in done.stdout + done.stderr


def test_tf_ps_without_tf_config_fails_clearly():
    done = subprocess.run([sys.executable, "-I", "-S", str(WORKLOADS / "smoke_tf_ps.py")], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    (result,) = parse_results(done.stdout)
    assert done.returncode == 1 and "TF_CONFIG is not set" in result["error"]


def test_allreduce_bus_factor_and_sizes_match_nccl_tests():
    bench = load_workload("allreduce_bench.py")
    # nccl-tests src/all_reduce.cu AllReduceGetBw: busBw = algBw * 2 (nranks - 1) / nranks
    assert [bench.bus_factor(n) for n in (1, 2, 4, 8, 16)] == [0.0, 1.0, 1.5, 1.75, 1.875]
    assert bench.parse_size("64M") == 64 * 2 ** 20 and bench.parse_size("1G") == 2 ** 30
    assert bench.parse_size("4096") == 4096 and bench.parse_size("8k") == 8192


@pytest.mark.parametrize("nranks", [1, 2, 3, 7, 64])
def test_allreduce_expected_sums_are_the_brute_force_sums(nranks):
    bench = load_workload("allreduce_bench.py")
    table = bench.expected_table(nranks)
    for i in range(0, 5000, 7):
        assert table[(i * 7) % 97] == sum(bench.pattern(r, i) for r in range(nranks))
