"""`gpucheck node` against the pins site.yml wrote into node.yaml, run as a user runs it (a separate process): the
driver from the fake libnvidia-ml.so.1 (a scenario whose driver_version is what the fault needs), CUDA, cuDNN and
NCCL from small libraries built here that answer their own version functions (first on LD_LIBRARY_PATH, as the
system's copy), the frameworks from stand-in packages in real virtualenvs. Each fault gives stack.pins its verdict,
the exit code, and no traceback: a node upgraded by hand, or a fleet that drifted together, never exits 0."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.fakenvml import build_library, env_for, scenario_path
from support import by_check, report_of, run_gpucheck

PINS = {"driver": "535.261.03", "cuda": "12.2", "cudnn": "8.9.7.29", "nccl": "2.18.5"}
HEALTHY_CODES = {"cudart": 12020, "cudnn": 8907, "nccl": 21805}  # what the pinned versions answer
REMEDY = "site.yml --tags gpu"


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_library()


def libraries(folder: Path, cudart: int | None = 12020, cudnn: int | None = 8907, nccl: int | None = 21805,
              cudnn_symbol: bool = True) -> Path:
    """libcudart.so.12, libcudnn.so.8 and libnccl.so.2 answering these version codes (None: not built)."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = {
        "libcudart.so.12": cudart is not None and f"int cudaRuntimeGetVersion(int *v) {{ *v = {cudart}; return 0; }}",
        "libcudnn.so.8": cudnn is not None and (f"unsigned long cudnnGetVersion(void) {{ return {cudnn}; }}"
                                                if cudnn_symbol else "int cudnnCreate(void **h) { return 0; }"),
        "libnccl.so.2": nccl is not None and f"int ncclGetVersion(int *v) {{ *v = {nccl}; return 0; }}",
    }
    for name, source in sources.items():
        if source:
            (folder / f"{name}.c").write_text(source + "\n")
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / name), str(folder / f"{name}.c")],
                           check=True, timeout=120)
    return folder


def stack(root: Path, **versions: str) -> str:
    """A virtualenv whose site-packages holds stand-ins reporting these versions (tensorflow, torch, horovod)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for name, version in versions.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
    if "horovod" in versions:
        (site / "horovod" / "tensorflow").mkdir()
        (site / "horovod" / "tensorflow" / "__init__.py").write_text(
            "import tensorflow\n\n\ndef init():\n    pass\n\n\ndef size():\n    return 1\n\n\ndef rank():\n"
            "    return 0\n")
    return str(python)


def node_yaml(path: Path, pins: dict[str, str] | None, stacks: dict[str, dict] | None = None) -> Path:
    """node.yaml as the gpucheck_agent role writes it (JSON is YAML)."""
    doc: dict = {"profile": "generic", "pins": pins or {}, "stacks": stacks or {}}
    path.write_text(json.dumps(doc))
    return path


def run_pins(tmp_path: Path, libdir: Path, config: Path, scenario: list[str] | None = None,
             libs: Path | None = None) -> tuple[int, dict, str]:
    scn = tmp_path / "node.scn"
    scn.write_text(f"include = {scenario_path('dgx-h100')}\n" + "\n".join(scenario or []) + "\n")
    env = env_for(scn, libdir)
    if libs is not None:
        env["LD_LIBRARY_PATH"] = f"{libs}:{env['LD_LIBRARY_PATH']}"
    env["GPUCHECK_CONFIG"] = str(config)
    done = run_gpucheck(["node", "--profile", "generic", "--only", "stack.pins", "--format", "json",
                         "--timeout", "20"], env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, by_check(report_of(done))["stack.pins"], done.stderr


def test_a_node_as_pinned_passes(tmp_path, libdir):
    config = node_yaml(tmp_path / "node.yaml", PINS)
    code, result, _ = run_pins(tmp_path, libdir, config, ["driver_version = 535.261.03"],
                               libraries(tmp_path / "lib"))
    assert (code, result["status"]) == (0, "pass"), result
    assert result["measured"]["system"] == {"driver": "535.261.03", "cuda": "12.2", "cudnn": "8.9.7", "nccl": "2.18.5"}
    assert result["expected"]["system"] == PINS


def test_a_node_upgraded_by_hand_fails_naming_the_driver_and_both_versions(tmp_path, libdir):
    config = node_yaml(tmp_path / "node.yaml", {"driver": "535.261.03"})
    code, result, _ = run_pins(tmp_path, libdir, config, ["driver_version = 550.54.15"])
    assert code == 2
    assert (result["status"], result["reason"]) == ("fail", "driver 550.54.15 installed, pinned 535.261.03")
    assert REMEDY in result["remediation"]


def test_cuda_cudnn_and_nccl_drift_fail_each(tmp_path, libdir):
    """A fleet whose libraries moved on together: newer than the profile's minimums, not what site.yml installed."""
    config = node_yaml(tmp_path / "node.yaml", PINS)
    libs = libraries(tmp_path / "lib", cudart=12040, cudnn=8906, nccl=21903)
    code, result, _ = run_pins(tmp_path, libdir, config, ["driver_version = 535.261.03"], libs)
    assert code == 2 and result["status"] == "fail"
    assert result["reason"] == ("cuda 12.4 installed, pinned 12.2; cudnn 8.9.6 installed, pinned 8.9.7.29; "
                                "nccl 2.19.3 installed, pinned 2.18.5")


def test_framework_drift_in_one_stack_fails_naming_that_stack(tmp_path, libdir):
    stacks = {
        "tf-horovod": {"python": stack(tmp_path / "tf", tensorflow="2.15.0", horovod="0.28.1"),
                       "frameworks": ["tensorflow", "horovod"], "pins": {"tensorflow": "2.15.1", "horovod": "0.28.1"}},
        "torch": {"python": stack(tmp_path / "torch", torch="2.5.1+cu121"), "frameworks": ["torch"],
                  "pins": {"torch": "2.5.1"}},
    }
    config = node_yaml(tmp_path / "node.yaml", {"driver": "535.*"}, stacks)
    code, result, _ = run_pins(tmp_path, libdir, config)
    assert code == 2
    assert (result["status"], result["reason"]) == ("fail", "stack tf-horovod: tensorflow 2.15.0 installed, "
                                                            "pinned 2.15.1")
    assert result["measured"]["stacks"] == {"tf-horovod": {"tensorflow": "2.15.0", "horovod": "0.28.1"},
                                            "torch": {"torch": "2.5.1+cu121"}}
    assert "--tags frameworks" in result["remediation"]


def test_a_pinned_driver_version_nvml_could_not_read_is_an_error(tmp_path, libdir):
    config = node_yaml(tmp_path / "node.yaml", {"driver": "535.261.03"})
    code, result, _ = run_pins(tmp_path, libdir, config, ["fail = nvmlSystemGetDriverVersion UNKNOWN"])
    assert code == 3
    assert (result["status"], result["reason"]) == (
        "error", "driver_version not read: nvmlSystemGetDriverVersion answered NVML_ERROR_UNKNOWN (Unknown Error)")


def test_a_pinned_library_whose_version_cannot_be_read_is_an_error(tmp_path, libdir):
    config = node_yaml(tmp_path / "node.yaml", {"cudnn": "8.9.7.29"})
    libs = libraries(tmp_path / "lib", cudart=None, nccl=None, cudnn_symbol=False)
    code, result, _ = run_pins(tmp_path, libdir, config, libs=libs)
    assert code == 3
    assert result["status"] == "error"
    assert result["reason"] == f"cudnn (libcudnn) version not read: {libs}/libcudnn.so.8 has no symbol cudnnGetVersion"


@pytest.mark.parametrize("driver,status,code", [("535.183.01", "pass", 0), ("550.54.15", "fail", 2)])
def test_a_glob_pin_takes_the_branch_it_names(tmp_path, libdir, driver, status, code):
    config = node_yaml(tmp_path / "node.yaml", {"driver": "535.*"})
    got_code, result, _ = run_pins(tmp_path, libdir, config, [f"driver_version = {driver}"])
    assert (got_code, result["status"]) == (code, status), result
    if status == "fail":
        assert result["reason"] == "driver 550.54.15 installed, pinned 535.*"


def test_no_pins_skips_saying_how_to_get_them(tmp_path, libdir):
    config = node_yaml(tmp_path / "node.yaml", None)
    code, result, _ = run_pins(tmp_path, libdir, config)
    assert (code, result["status"]) == (0, "skip")
    assert "site.yml" in result["reason"] and "versions.yml" in result["reason"]


# ---------------------------------------------------------------- node.yaml's pins of the wrong shape

@pytest.mark.parametrize("text,reason", [
    ("pins: {driver: 535}\n", "'pins.driver' must be a quoted version like \"12.2\", not a number "
                              "(YAML reads 12.10 as the number 12.1)"),
    ("pins: 535.261.03\n", "'pins' must be a mapping of component to version, like {driver: \"1.2.3\"}, not a string"),
    ("pins: {tensorflow: '2.15.1'}\n", "'pins' names 'tensorflow', which is not one of driver, cuda, cudnn, nccl"),
    ("stacks: {tf: {python: p, frameworks: [tensorflow], pins: {horovod: '0.28.1'}}}\n",
     "'stacks.tf.pins' names 'horovod', which is not among that stack's frameworks (tensorflow)"),
])
def test_node_yaml_pins_of_the_wrong_shape_are_one_line_and_exit_3(tmp_path, text, reason):
    bad = tmp_path / "node.yaml"
    bad.write_text(text)
    done = run_gpucheck(["node", "--only", "host", "--profile", "generic"], {
        **env_for(tmp_path / "none.scn", tmp_path), "GPUCHECK_CONFIG": str(bad)})
    assert "Traceback" not in done.stderr and done.returncode == 3 and done.stdout == ""
    assert done.stderr.splitlines() == [f"gpucheck: error: {bad}: {reason}"]


def test_an_alias_bomb_node_yaml_is_refused_quickly(tmp_path):
    anchors = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    anchors += [f"&l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 10)]
    bad = tmp_path / "node.yaml"
    bad.write_text(f"profile: auto\nstacks: {{s: {{python: p, frameworks: [{', '.join(anchors)}]}}}}\n")
    began = time.monotonic()
    done = run_gpucheck(["node", "--only", "host", "--profile", "generic"], {
        **env_for(tmp_path / "none.scn", tmp_path), "GPUCHECK_CONFIG": str(bad)}, timeout=60)
    assert time.monotonic() - began < 20  # 9**10 strings would take minutes and gigabytes
    assert "Traceback" not in done.stderr and done.returncode == 3
    assert done.stderr.splitlines() == [f"gpucheck: error: {bad} expands to more than 10000 YAML nodes "
                                        "(anchors and aliases used over and over)"]
