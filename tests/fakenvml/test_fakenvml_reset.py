"""A GPU reset as the lab models it: the stand-in `nvidia-smi -r -i ID` (lab/nvidia_repo) writes what it cleared
into a reset layer that the host's scenario includes last, and a process that stays initialised sees the counters
step back, because the library follows every file its scenario includes (lab/scenarios/README.md, "GPU reset").
A fault that survives a reset (survives_reset: hardware) is left as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakenvml_helpers import RATE_LIMIT_S

from lab import config, gpus
from lab.fakenvml import scenario_path
from lab.nvidia_repo import load
from lab.nvidia_repo.payloads import nvidia_smi

GPU3_BUS = "00000000:5D:00.0"  # dgx-h100.scn's GPU 3
GPU3_UUID = "GPU-eb1b57b5-2baa-14f9-d653-f3c8926fc103"
RESET_OK = f"GPU {GPU3_BUS} was successfully reset.\nAll done.\n"
# What a reset clears on an H100: the volatile ECC counters and a pending row remapping. Not the retired pages'
# pending flag: Hopper answers NOT_SUPPORTED there, before a reset and after it.
GPU3_CLEARED = ["gpu.3.ecc_uncorrected_volatile = 0", "gpu.3.ecc_corrected_volatile = 0",
                "gpu.3.row_remap_pending = no"]
BUSY = ("Unable to reset this GPU because it's being used by some other process (e.g. CUDA application, graphics "
        "application like X server, monitoring application like other instance of nvidia-smi). Please first kill "
        "all processes using this GPU and all compute applications running in the system.\n")


def replace(path: Path, text: str) -> Path:
    """Write `path` atomically, as the lab and the stand-in do (a temporary file renamed over)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def layer_lines(layer: Path) -> list[str]:
    return [line for line in layer.read_text().splitlines() if not line.startswith("#")]


@pytest.fixture(scope="module")
def smi_text() -> bytes:
    """The stand-in nvidia-smi exactly as the nvidia-smi package ships it (payloads.nvidia_smi)."""
    pkg = next(p for p in load().packages if p.name == "nvidia-smi")
    [entry] = nvidia_smi(pkg, Path("unused"))
    assert entry.path == "usr/lib/nvidia/current/nvidia-smi" and entry.mode == 0o755
    return entry.data or b""


class StandIn:
    """``smi(scenario, *args) -> CompletedProcess``: the stand-in run on SCENARIO (a name or a path), writing its
    reset layer to ``smi.layer``."""

    def __init__(self, program: Path, layer: Path) -> None:
        self.program, self.layer = program, layer

    def __call__(self, scenario: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
        path = scenario if isinstance(scenario, Path) else scenario_path(scenario)
        env = dict(os.environ, FAKENVML_SCENARIO=str(path), FAKENVML_RESET_LAYER=str(self.layer),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # python3: no shim
        return subprocess.run([str(self.program), *args], env=env, capture_output=True, text=True, timeout=30,
                              check=False)


@pytest.fixture
def smi(smi_text: bytes, tmp_path: Path) -> StandIn:
    program = tmp_path / "nvidia-smi"
    program.write_bytes(smi_text)
    program.chmod(0o755)
    return StandIn(program, tmp_path / "layer.scn")


# ------------------------------------------------------------------------- the library follows its includes
def host_scenario(tmp_path: Path, base: str, extra: str = "") -> tuple[Path, Path]:
    """A lab host's scenario in miniature: BASE, EXTRA, then its reset layer (include_if_present, last)."""
    layer = tmp_path / "layer.scn"
    scn = replace(tmp_path / "host.scn", f"include = {scenario_path(base)}\n{extra}include_if_present = {layer}\n")
    return scn, layer


def test_a_layer_that_appears_steps_the_counter_back_and_its_removal_brings_it_again(watch, tmp_path: Path) -> None:
    scn, layer = host_scenario(tmp_path, "ecc-uncorrected")
    w = watch(scn)
    assert w.ask("ecc(3)") == 2
    replace(layer, "gpu.3.ecc_uncorrected_volatile = 0\n")
    assert w.until("ecc(3)", 0) < 1.0
    layer.unlink()
    assert w.until("ecc(3)", 2) < 1.0
    assert w.trace.read_text().splitlines().count("nvmlInitWithFlags") == 1  # one init: the reloads did it
    assert "rejected" not in w.stderr()


def test_an_included_file_rewritten_in_place_is_seen_too(watch, tmp_path: Path) -> None:
    """Not only the last include: any file the scenario reads, at any depth."""
    inner = tmp_path / "inner.scn"
    inner.write_text(f"include = {scenario_path('dgx-h100')}\n")
    middle = replace(tmp_path / "middle.scn", "include = inner.scn\n")  # relative to the including file
    w = watch(replace(tmp_path / "top.scn", f"include = {middle.name}\n"))
    assert w.ask("temp(7)") == 29
    inner.write_text(f"include = {scenario_path('dgx-h100')}\ngpu.7.temperature_C = 92\n")
    w.until("temp(7)", 92)


def test_a_layer_that_does_not_load_keeps_the_scenario_and_is_said_once(watch, tmp_path: Path) -> None:
    scn, layer = host_scenario(tmp_path, "ecc-uncorrected")
    w = watch(scn)
    replace(layer, "gpu.3.ecc_uncorrected_volatile = -1\n")
    w.until_said("rejected", 1)
    end = time.monotonic() + 3 * RATE_LIMIT_S  # several checks: the same bad version is not read again
    while time.monotonic() < end:
        assert w.ask("ecc(3)") == 2
        time.sleep(0.005)
    assert w.stderr().count(f"fakenvml: scenario {scn} rejected; keeping the one loaded\n") == 1, w.stderr()
    replace(layer, "gpu.3.ecc_uncorrected_volatile = 0\n")  # fixed: it loads
    w.until("ecc(3)", 0)
    assert w.stderr().count("rejected") == 1


def test_an_absent_layer_that_stays_absent_is_no_change(watch, tmp_path: Path) -> None:
    """Absent and absent are one version: a bad scenario beside a layer never written is said once, not at every
    check (which it would be, were the missing layer a change each time)."""
    base = tmp_path / "base.scn"
    base.write_text(f"include = {scenario_path('dgx-h100')}\n")
    scn = replace(tmp_path / "host.scn", f"include = base.scn\ninclude_if_present = {tmp_path / 'never.scn'}\n")
    w = watch(scn)
    replace(base, "gpu_count = 65\n")
    w.until_said("rejected", 1)
    end = time.monotonic() + 4 * RATE_LIMIT_S
    while time.monotonic() < end:
        assert w.ask("count()") == 8
        time.sleep(0.005)
    assert w.stderr().count("rejected") == 1, w.stderr()


INIT = "import ctypes; print(ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2())"


def test_a_scenario_reads_at_most_32_files(run_python, tmp_path: Path) -> None:
    """Each is followed by a running process; a file included twice counts once."""
    for n in range(31):
        (tmp_path / f"empty{n}.scn").write_text("# nothing\n")
    includes = "".join(f"include = empty{n}.scn\n" for n in range(30))
    scn = tmp_path / "s.scn"
    scn.write_text(f"include = {scenario_path('dgx-h100')}\n{includes}include = empty0.scn\n")  # 32 files
    assert run_python(INIT, scn).stdout.split() == ["0"]
    scn.write_text(f"include = {scenario_path('dgx-h100')}\n{includes}include = empty30.scn\n")  # 33
    done = run_python(INIT, scn)
    assert done.stdout.split() == ["999"]  # NVML_ERROR_UNKNOWN
    assert f"fakenvml: {tmp_path / 'empty30.scn'}: the scenario reads more than 32 files" in done.stderr


# ------------------------------------------------------------------------------------- the stand-in nvidia-smi
def test_the_header_and_version_are_as_before(smi: StandIn) -> None:
    version = smi("dgx-h100", "--version")
    assert version.returncode == 0 and version.stdout.splitlines()[0].startswith("NVIDIA-SMI version  : ")
    header = smi("dgx-h100")
    assert header.returncode == 0 and "Driver Version: " in header.stdout.splitlines()[1]
    other = smi("dgx-h100", "-q")
    assert other.returncode == 2 and "only the header, --version and -r -i ID are answered" in other.stderr


@pytest.mark.parametrize("args", [
    ("-r", "-i", "3"),
    ("--gpu-reset", "-i", GPU3_BUS),
    ("-i", "0000:5d:00.0", "-r"),
    ("-r", "--id=5D:00.0"),
    ("-r", "-i", "5d:00.0"),
    ("-r", "-i", GPU3_UUID),
    ("-r", "--id", GPU3_UUID.upper()),
])
def test_gpu3_is_reset_however_it_is_named(smi: StandIn, args: tuple[str, ...]) -> None:
    done = smi("ecc-uncorrected", *args)
    assert (done.returncode, done.stdout, done.stderr) == (0, RESET_OK, "")
    assert layer_lines(smi.layer) == GPU3_CLEARED


def test_a_reset_keeps_the_gpus_reset_before(smi: StandIn) -> None:
    for gpu in ("0", "3", "0"):
        assert smi("ecc-uncorrected", "-r", "-i", gpu).returncode == 0
    lines = layer_lines(smi.layer)
    assert lines == GPU3_CLEARED + [line.replace("gpu.3.", "gpu.0.") for line in GPU3_CLEARED]  # GPU 0 once, last
    assert not list(smi.layer.parent.glob(".layer.scn.tmp*"))  # written in one rename


def test_a_gpu_that_retires_pages_has_its_pending_retirement_cleared(smi: StandIn) -> None:
    done = smi("t4", "-r", "-i", "00:1e.0")
    assert done.returncode == 0 and done.stdout.startswith("GPU 00000000:00:1E.0 was successfully reset.")
    # the T4 retires pages and has no row remapping: that stays NOT_SUPPORTED
    assert layer_lines(smi.layer) == ["gpu.0.ecc_uncorrected_volatile = 0", "gpu.0.ecc_corrected_volatile = 0",
                                      "gpu.0.retired_pages_pending = no"]


def test_a_busy_gpu_is_not_reset(smi: StandIn, tmp_path: Path) -> None:
    done = smi("busy", "-r", "-i", "3")
    assert (done.returncode, done.stdout) == (255, BUSY)
    assert not smi.layer.exists()
    graphics = replace(tmp_path / "x.scn", f"include = {scenario_path('dgx-h100')}\n"
                                          "gpu.1.graphics_processes = 2145:na\n")  # an X server
    refused = smi(graphics, "-r", "-i", "1")
    assert (refused.returncode, refused.stdout) == (255, BUSY)
    assert smi("busy", "-r", "-i", "2").returncode == 0  # the other GPUs are free


def test_a_lost_gpu_and_an_unknown_one_are_refused(smi: StandIn) -> None:
    lost = smi("gpu-lost", "-r", "-i", "4")
    assert lost.returncode == 15 and lost.stdout.startswith("Unable to determine the device handle for GPU "
                                                            "00000000:9A:00.0: GPU is lost.")
    for scenario, ident in (("dgx-h100", "8"), ("dgx-h100", "GPU-00000000-0000-0000-0000-000000000000"),
                            ("dgx-h100", "00000000:99:00.0"), ("seven-of-eight", "0000:db:00.0"),  # not in NVML
                            ("dgx-h100", "nonsense")):
        unknown = smi(scenario, "-r", "-i", ident)
        assert (unknown.returncode, unknown.stdout) == (6, "No devices were found\n"), ident
    assert not smi.layer.exists()


def test_a_reset_needs_an_id_and_a_scenario(smi: StandIn, tmp_path: Path) -> None:
    bare = smi("dgx-h100", "-r")
    assert bare.returncode == 2 and "-r needs -i ID" in bare.stderr and bare.stdout == ""
    assert smi("dgx-h100", "-r", "-i", "0", "-q").returncode == 2
    missing = smi(tmp_path / "nope.scn", "-r", "-i", "0")
    assert (missing.returncode, missing.stdout) == (255, "Failed to initialize NVML: Unknown Error\n")
    assert "nope.scn" in missing.stderr


def test_a_fault_that_survives_a_reset_leaves_the_layer_alone(smi: StandIn) -> None:
    assert smi("ecc-uncorrected-persistent", "-r", "-i", "0").returncode == 0
    before = smi.layer.read_bytes()
    done = smi("ecc-uncorrected-persistent", "-r", "-i", "3")
    assert (done.returncode, done.stdout) == (0, RESET_OK)  # the reset "works"; the fault is still there
    assert smi.layer.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3").is_file(),
                    reason="needs root, setpriv and /usr/bin/python3 to run the stand-in as another user")
def test_only_root_resets_a_gpu(smi_text: bytes, smi: StandIn) -> None:
    """As nobody (the script read from stdin: this run's temporary directory is root's alone)."""
    env = {"PATH": "/usr/bin:/bin", "FAKENVML_SCENARIO": str(scenario_path("ecc-uncorrected")),
           "FAKENVML_RESET_LAYER": str(smi.layer)}
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-s", "--",
                           "-r", "-i", "3"], input=smi_text, env=env, cwd="/", capture_output=True, timeout=30,
                          check=False)
    assert done.returncode == 4, done.stderr
    assert done.stdout.decode() == (f"Unable to reset GPU {GPU3_BUS}: Insufficient Permissions\n"
                                    "Terminating early due to previous errors.\n")
    assert not smi.layer.exists()


# ------------------------------------------------------------------------------------------- the whole story
def test_a_reset_clears_gpu3_under_a_running_process(watch, smi: StandIn, tmp_path: Path) -> None:
    scn, _ = host_scenario(tmp_path, "ecc-uncorrected")
    w = watch(scn)
    assert w.ask("ecc(3)") == 2
    done = smi(scn, "-r", "-i", "3")
    assert (done.returncode, done.stdout) == (0, RESET_OK)
    assert w.until("ecc(3)", 0) < 1.0
    assert w.trace.read_text().splitlines().count("nvmlInitWithFlags") == 1


def test_a_fault_that_survives_the_reset_is_still_seen(watch, smi: StandIn, tmp_path: Path) -> None:
    """GPU 5 (a volatile error a reset clears) shows when the process has read the layer: GPU 3 still has 2."""
    scn, _ = host_scenario(tmp_path, "ecc-uncorrected-persistent", "gpu.5.ecc_uncorrected_volatile = 1\n")
    w = watch(scn)
    assert (w.ask("ecc(3)"), w.ask("ecc(5)")) == (2, 1)
    assert smi(scn, "-r", "-i", "3").stdout == RESET_OK
    assert smi(scn, "-r", "-i", "5").returncode == 0
    w.until("ecc(5)", 0)
    assert w.ask("ecc(3)") == 2


# ------------------------------------------------------------------------------------------- the lab's wiring
def test_a_lab_hosts_gpu_answers_its_own_uuid_and_its_reset(watch, smi: StandIn, tmp_path: Path) -> None:
    """A scenario installed for a host (its own UUIDs, its driver's lines, the reset layer last), the layer where
    this test keeps it instead of the host's bind (/var/lib/fakenvml)."""
    dest = tmp_path / "fakenvml"
    gpus.install("ecc-uncorrected", dest, "node01")
    text = (dest / "scenario").read_text()
    assert text.endswith(gpus.RESET_LINES)
    scn = replace(dest / "scenario", text.replace(gpus.RESET_LAYER, str(smi.layer)))
    w = watch(scn)
    assert w.ask("ecc(3)") == 2
    assert smi(scn, "-r", "-i", GPU3_UUID).stdout == "No devices were found\n"  # the scenario's UUID is not node01's
    assert smi(scn, "-r", "-i", gpus.gpu_uuid("node01", 3)).stdout == RESET_OK
    w.until("ecc(3)", 0)


def test_a_hosts_reset_layer_is_in_its_run_dir_and_a_new_scenario_forgets_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(config, "RUN_DIR", tmp_path / "run")
    directory = gpus.prepare_reset_dir("node01")  # before the host boots: the bind's source
    layer = gpus.reset_layer("node01")
    assert directory.is_dir() and layer == directory / "reset.scn"
    layer.write_text("gpu.3.ecc_uncorrected_volatile = 0\n")
    gpus.install("ecc-uncorrected", tmp_path / "fakenvml", "node01", layer)  # `up`, `fault HOST scenario NAME`
    assert not layer.exists() and directory.is_dir()
    gpus.install("dgx-h100", tmp_path / "fakenvml", "node01", layer)  # nothing to forget is no error
    assert (tmp_path / "fakenvml" / "scenario").read_text().endswith(gpus.RESET_LINES)
