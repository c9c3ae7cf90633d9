"""The daemons' stand-ins of lab/nvidia_repo, unpacked from the built packages with dpkg-deb and run: Fabric
Manager against the fake NVML (it starts only at the loaded driver's version, daemonizes as its unit's
Type=forking expects, stops on SIGTERM), DCGM's nv-hostengine and dcgmi (diag answered from recorded real outputs,
read by the agent's own parser and check). Every process a test starts is ended by its PID; nothing is written
outside the test's temporary directory (the daemons' PID files and logs are moved there)."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from gpucheck.model import Status
from gpucheck.node import Context
from gpucheck.node.dcgm import NO_HOST_ENGINE, collect, diag
from gpucheck.node.links import FABRIC_MANAGER_NAMES, find_fabric_manager
from gpucheck.parsers import parse
from gpucheck.profiles import Profile
from lab.fakenvml import FakeNvmlError, build_library, env_for, scenario_path
from lab.nvidia_repo import RepoBuild, build

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("dpkg-deb", "gpg", "gcc")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS) or not Path("/usr/bin/python3").is_file(),
                                reason=f"needs {', '.join(TOOLS)} and /usr/bin/python3 (make deps)")

DRIVERS = {"535": "535.261.03", "550": "550.163.01"}
DCGM = ("datacenter-gpu-manager-4-core", "1:4.5.2-1")
FM_UNIT = "lib/systemd/system/nvidia-fabricmanager.service"
FM_PID_FILE_ENV = "GPUCHECK_FM_PID_FILE"  # the stand-in's own setting: the real PID file is under /var/run
MISMATCH = ("fabric manager NVIDIA GPU driver interface version {fm} don't match with driver version {driver}. "
            "Please update with matching NVIDIA driver package.")
RECORDINGS = "usr/share/gpucheck-standin/dcgm"
WAIT_S = 5


# ------------------------------------------------------------------------------------------------ processes
def alive(pid: int) -> bool:
    """PID runs (a zombie waiting for its parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_gone(pid: int, seconds: float = WAIT_S) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def started_from(root: Path) -> list[int]:
    """Every process whose command line names a file under ROOT: what a test unpacked and ran."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(root).encode() in (proc / "cmdline").read_bytes() and alive(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue  # it ended while we looked
    return found


@contextmanager
def ended_afterwards(root: Path) -> Iterator[None]:
    """Whatever the test does, every process it started from ROOT is ended afterwards, by its PID."""
    try:
        yield
    finally:
        for pid in started_from(root):
            os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid)


def run(*argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30, env=env)


def pid_in(pid_file: Path) -> int:
    return int(pid_file.read_text().split()[0])


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> RepoBuild:
    return build(tmp_path_factory.mktemp("nvidia-repo"))


@pytest.fixture(scope="module")
def nvml() -> Path:
    try:
        return build_library()
    except FakeNvmlError as exc:
        pytest.skip(f"the fake NVML cannot be built: {exc}")


@pytest.fixture(scope="module")
def dcgm(repo, tmp_path_factory) -> Path:
    return repo.unpack(*DCGM, tmp_path_factory.mktemp("dcgm"))


# ------------------------------------------------------------------------------------------------ persistenced
PERSISTENCED = ("nvidia-persistenced", "535.261.03-1")


def test_persistenced_ships_debians_unit_and_needs_the_driver(repo, tmp_path) -> None:
    """Debian's unit and maintainer script, unchanged in what they do; without a driver (no NVML) the daemon fails
    as NVIDIA's does, before it writes anything. Running under systemd with the role's drop-in: tests/ansible/
    test_site_lab.py, on the lab's hosts."""
    root = repo.unpack(*PERSISTENCED, tmp_path / "root")
    unit = unit_fields((root / "lib/systemd/system/nvidia-persistenced.service").read_text())
    assert unit["Type"] == "forking" and unit["ExecStart"] == "/usr/bin/nvidia-persistenced --user nvpd"
    daemon = root / "usr/bin/nvidia-persistenced"
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVML library: the stand-in would start (and daemonize) against it")
    assert run(daemon, "--version").stdout.strip() == "nvidia-persistenced:  version 535.261.03"
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(tmp_path)}  # no libnvidia-ml.so.1 there
    failed = run(daemon, "--user", "nobody", "--persistence-mode", env=env)
    assert failed.returncode == 1 and "failed to initialize" in failed.stderr, failed
    control = subprocess.run(["dpkg-deb", "-I", str(repo.nvidia / repo.model.find(*PERSISTENCED).filename),
                              "postinst"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "adduser --system --group" in control and "deb-systemd-invoke $_dh_action" in control


# ------------------------------------------------------------------------------------------------ Fabric Manager
def unit_fields(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def fabric_manager(repo: RepoBuild, branch: str, tmp_path: Path) -> tuple[Path, list[str], Path]:
    """The unpacked package, the unit's command line run from there with a copy of its config that logs into
    TMP_PATH, and the log file."""
    root = repo.unpack(f"nvidia-fabricmanager-{branch}", f"{DRIVERS[branch]}-1", tmp_path / "root")
    command = unit_fields((root / FM_UNIT).read_text())["ExecStart"].split()
    config, log = tmp_path / "fabricmanager.cfg", tmp_path / "fabricmanager.log"
    shipped = (root / command[command.index("-c") + 1].lstrip("/")).read_text()
    config.write_text(shipped.replace("LOG_FILE_NAME=/var/log/fabricmanager.log", f"LOG_FILE_NAME={log}"))
    return root, [str(root / command[0].lstrip("/")), "-c", str(config)], log


def host_scenario(tmp_path: Path, driver: str | None) -> Path:
    """An 8x H100 host (lab/scenarios/dgx-h100.scn reports driver 535.183.01), with DRIVER loaded instead."""
    scenario = tmp_path / f"host-{driver}.scn"
    scenario.write_text(f"include = {scenario_path('dgx-h100')}\n" + (f"driver_version = {driver}\n" if driver else ""))
    return scenario


def fm_env(nvml: Path, scenario: Path, tmp_path: Path) -> dict[str, str]:
    return {**env_for(scenario, nvml), FM_PID_FILE_ENV: str(tmp_path / "run" / "nv-fabricmanager.pid")}


@pytest.mark.parametrize("branch", sorted(DRIVERS))
def test_the_unit_starts_the_installed_daemon_as_nvidias_does(repo, tmp_path, branch) -> None:
    root = repo.unpack(f"nvidia-fabricmanager-{branch}", f"{DRIVERS[branch]}-1", tmp_path)
    unit = unit_fields((root / FM_UNIT).read_text())
    assert unit["ExecStart"] == "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"
    assert unit["Type"] == "forking" and unit["PIDFile"] == "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"
    assert os.access(root / "usr/bin/nv-fabricmanager", os.X_OK)
    assert "DAEMONIZE=1" in (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_text()
    done = run(root / "usr/bin/nv-fabricmanager", "-v")
    assert done.returncode == 0 and done.stdout == f"Fabric Manager version is : {DRIVERS[branch]}\n"


def test_it_starts_at_the_drivers_version_and_stops_on_sigterm(repo, nvml, tmp_path) -> None:
    root, command, log = fabric_manager(repo, "535", tmp_path)
    env = fm_env(nvml, host_scenario(tmp_path, "535.261.03"), tmp_path)
    pid_file = Path(env[FM_PID_FILE_ENV])
    with ended_afterwards(root):
        started = time.monotonic()
        done = run(*command, env=env)
        assert done.returncode == 0 and not done.stdout and not done.stderr, done.stderr
        assert time.monotonic() - started < WAIT_S
        pid = pid_in(pid_file)  # written before the parent exited, as Type=forking needs
        assert alive(pid) and Path(f"/proc/{pid}/comm").read_text() == "nv-fabricmanage\n"  # the kernel's 15
        # the agent's gpu.fabric_manager lookup finds it by that name (another test's stand-in may run beside it)
        assert psutil.Process(pid).name() in FABRIC_MANAGER_NAMES and find_fabric_manager()["running"]
        os.kill(pid, signal.SIGTERM)
        assert wait_gone(pid), "nv-fabricmanager did not stop on SIGTERM"
    assert not pid_file.exists()
    assert "driver version 535.261.03 matches" in log.read_text()


@pytest.mark.parametrize("branch,loaded", [("535", None), ("550", "535.261.03")])
def test_it_refuses_another_drivers_version_with_nvidias_message(repo, nvml, tmp_path, branch, loaded) -> None:
    root, command, log = fabric_manager(repo, branch, tmp_path)
    env = fm_env(nvml, host_scenario(tmp_path, loaded), tmp_path)
    message = MISMATCH.format(fm=DRIVERS[branch], driver=loaded or "535.183.01")
    with ended_afterwards(root):
        done = run(*command, env=env)
        assert done.returncode == 1 and done.stderr == message + "\n"  # the journal's nv-fabricmanager[PID] line
        assert not started_from(root) and not Path(env[FM_PID_FILE_ENV]).exists()
    logged = log.read_text()
    assert "[ERROR]" in logged and message in logged


def test_after_a_driver_upgrade_the_old_fabric_manager_refuses_to_start(repo, tmp_path) -> None:
    """R550's driver package (its NVML answers 550.163.01) with R535's Fabric Manager left installed."""
    nvml_root = repo.unpack("libnvidia-ml1", "550.163.01-1", tmp_path / "driver")
    current = nvml_root / "usr/lib/x86_64-linux-gnu/nvidia/current"
    scenario = tmp_path / "host.scn"
    scenario.write_text(f"include = {scenario_path('dgx-h100')}\n"
                        f"include = {current / 'gpucheck-fakenvml-driver.scn'}\n")
    root, command, _ = fabric_manager(repo, "535", tmp_path)
    with ended_afterwards(root):
        done = run(*command, env=fm_env(current, scenario, tmp_path))
        assert done.returncode == 1
        assert done.stderr == MISMATCH.format(fm="535.261.03", driver="550.163.01") + "\n"


# ------------------------------------------------------------------------------------------------ DCGM
@contextmanager
def host_engine(dcgm: Path, tmp_path: Path, *listen: str) -> Iterator[tuple[int, str]]:
    """nv-hostengine started as a daemon listening on LISTEN (default a Unix socket in TMP_PATH) -> (pid, the
    --host value for dcgmi); ended afterwards by its PID."""
    listen = listen or ("-d", str(tmp_path / "nv-hostengine.sock"))
    pid_file = tmp_path / "nvhostengine.pid"
    with ended_afterwards(dcgm):
        done = run(dcgm / "usr/bin/nv-hostengine", *listen, "--pid", pid_file)
        where = listen[1]
        kind = "socket path" if listen[0] == "-d" else "port number"
        assert done.returncode == 0 and done.stdout == f"Started host engine version 4.5.2 using {kind}: {where}\n"
        pid = pid_in(pid_file)
        assert alive(pid)
        yield pid, f"unix://{where}" if listen[0] == "-d" else f"127.0.0.1:{where}"


def test_dcgm_is_where_nvidias_package_puts_it(dcgm) -> None:
    unit = unit_fields((dcgm / "usr/lib/systemd/system/nvidia-dcgm.service").read_text())
    assert unit["ExecStart"] == "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm"
    assert unit["Alias"] == "dcgm.service"
    for program in ("dcgmi", "nv-hostengine"):
        assert os.access(dcgm / "usr/bin" / program, os.X_OK)
    for recorded in (REPO / "tests/fixtures/real/dcgm").iterdir():  # the copies are the recorded outputs, unchanged
        assert (dcgm / RECORDINGS / recorded.name).read_bytes() == recorded.read_bytes()
    done = run(dcgm / "usr/bin/dcgmi", "--version")
    assert done.returncode == 0 and done.stdout == "\ndcgmi  version: 4.5.2\n\n"


def test_dcgmi_diag_with_the_host_engine_is_read_by_the_agents_parser(dcgm, tmp_path) -> None:
    with host_engine(dcgm, tmp_path) as (_, host):
        as_json = run(dcgm / "usr/bin/dcgmi", "diag", "-r", "2", "-j", "--host", host)
        as_table = run(dcgm / "usr/bin/dcgmi", "diag", "-r", "2", "--host", host)
    assert as_json.returncode == 0 and as_table.returncode == 0, as_json.stdout + as_table.stdout
    parsed = parse("dcgmi", as_json.stdout)
    assert (parsed["format"], parsed["version"], parsed["gpu_count"], parsed["failed"]) == ("json", "3.1.0", 8, False)
    assert len(parsed["tests"]) == 10 and set(parsed["tests"].values()) == {"pass"}
    table = parse("dcgmi", as_table.stdout)
    assert (table["format"], table["version"], table["gpu_count"], table["failed"]) == ("text", "3.3.3", 8, False)


def test_dcgmi_v_shows_the_host_engine_while_it_runs(dcgm, tmp_path) -> None:
    pid_file = tmp_path / "nvhostengine.pid"
    with host_engine(dcgm, tmp_path) as (pid, host):
        running = run(dcgm / "usr/bin/dcgmi", "-v", "--host", host)
        again = run(dcgm / "usr/bin/nv-hostengine", "-d", tmp_path / "other.sock", "--pid", pid_file)
        assert again.returncode == 1 and again.stdout == f"Host engine already running with pid {pid}\n"
        stopped = run(dcgm / "usr/bin/nv-hostengine", "-t", "--pid", pid_file)
        assert stopped.returncode == 0 and stopped.stdout == "Host engine successfully terminated.\n"
        assert wait_gone(pid)
    assert running.returncode == 0
    assert running.stdout == ("\nLocal build info:\nVersion : 4.5.2\nCPU Arch : x86_64\n"
                              "\nHostengine build info:\nVersion : 4.5.2\nCPU Arch : x86_64\n")
    gone = run(dcgm / "usr/bin/dcgmi", "-v", "--host", host)
    assert gone.returncode == 0 and gone.stdout == ""  # VersionInfo is silent when it cannot connect


def test_the_host_engine_listens_on_tcp_as_well(dcgm, tmp_path) -> None:
    with socket.socket() as probe:  # a port free now (the real default, 5555, may be taken on this machine)
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    with host_engine(dcgm, tmp_path, "-p", port, "-b", "127.0.0.1") as (_, host):
        done = run(dcgm / "usr/bin/dcgmi", "-v", "--host", host)
    assert "Hostengine build info:" in done.stdout


def test_the_host_engine_runs_in_the_foreground_as_nvidia_dcgm_service_starts_it(dcgm, tmp_path) -> None:
    """The unit's own command line (-n: no daemon, no PID file), on a Unix socket instead of port 5555."""
    command = unit_fields((dcgm / "usr/lib/systemd/system/nvidia-dcgm.service").read_text())["ExecStart"].split()
    sock = tmp_path / "nv-hostengine.sock"
    with ended_afterwards(dcgm):
        engine = subprocess.Popen([str(dcgm / command[0].lstrip("/")), *command[1:], "-d", str(sock),
                                   "--pid", str(tmp_path / "unused.pid")], stdout=subprocess.PIPE, text=True)
        try:
            assert engine.stdout.readline() == f"Started host engine version 4.5.2 using socket path: {sock}\n"
            done = run(dcgm / "usr/bin/dcgmi", "-v", "--host", f"unix://{sock}")
            assert "Hostengine build info:" in done.stdout
        finally:
            engine.send_signal(signal.SIGTERM)
            assert engine.wait(timeout=WAIT_S) == 0
            engine.stdout.close()
    assert not (tmp_path / "unused.pid").exists()


def test_without_a_host_engine_dcgmi_answers_as_nvidias_does(dcgm, tmp_path) -> None:
    nowhere = f"unix://{tmp_path / 'no-host-engine.sock'}"
    cannot = f"Error: unable to establish a connection to the specified host: {nowhere}\n"
    discovery = run(dcgm / "usr/bin/dcgmi", "discovery", "-l", "--host", nowhere)
    assert discovery.returncode == 235  # DCGM_ST_CONNECTION_NOT_VALID
    assert discovery.stdout == cannot + "Error: Unable to connect to host engine. Host engine connection " \
                                        "invalid/disconnected.\n"
    assert NO_HOST_ENGINE.search(discovery.stdout)  # what the agent recognises
    stop = run(dcgm / "usr/bin/dcgmi", "diag", env={**os.environ, "DCGMI_STOP_DIAG_HOSTNAME": nowhere})
    assert stop.returncode == 235
    # `dcgmi diag` runs in an embedded host engine when none answers (Diag.cpp), after saying so for a --host
    embedded = run(dcgm / "usr/bin/dcgmi", "diag", "-r", "1", "-j", "--host", nowhere)
    assert embedded.returncode == 0 and embedded.stdout.startswith(cannot)
    assert parse("dcgmi", embedded.stdout)["tests"]["software"] == "pass"


def test_the_agents_dcgm_check_passes_on_the_stand_in(dcgm, monkeypatch) -> None:
    """gpu.dcgm as `gpucheck node --full` runs it: `dcgmi diag -r 2 -j` from PATH, no --host."""
    monkeypatch.setenv("PATH", f"{dcgm / 'usr/bin'}{os.pathsep}{os.environ['PATH']}")
    profile = Profile("test", None, {})
    facts = collect(Context(timeout=30, bench_timeout=30, profile=profile))
    result = diag({"dcgm": facts}, profile)
    assert result.status == Status.PASS, result.reason
    assert result.reason == "DCGM level 2: 10 tests passed" and facts["exit"] == 0
