"""Shared fixtures: the repo on sys.path, fake tools on PATH, and this run's own temporary directory for every
process the tests start (private_tmpdir). Helpers live in support.py.

Under CI (the CI variable true) a run that collected lab tests must run them all: see LabEvidence."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for path in (str(Path(__file__).resolve().parent), str(ROOT / "agent"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)


def lab_instance_of_worker(environ: dict[str, str] | os._Environ[str]) -> None:
    """Each pytest-xdist worker has a lab instance of its own (lab/config.py: gw1's is the run's first + 1), so the
    lab's chains can run side by side; set before anything imports lab.config, and inherited by every `python3 -m
    lab` a test starts. A serial run keeps the instance it was given (0 by default)."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    first = environ.get("GPUCHECK_LAB_INSTANCE", "0")
    if worker[:2] == "gw" and worker[2:].isdigit() and first.isdigit():
        environ["GPUCHECK_LAB_INSTANCE"] = str(int(first) + int(worker[2:]))


lab_instance_of_worker(os.environ)


def cuda_devices() -> int:
    """How many CUDA devices CuPy sees, asked in a child process (CUDA is never initialised in pytest's own)."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return 0
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


# The fixtures that start what `make check` leaves out, and the mark each gives the tests using it (directly or
# through another fixture), so `-m "not (lab or sshd or slurm or kubernetes)"` keeps exactly the tests that need none.
# A test that starts one another way fails under `make check` (support.starting) until it carries the mark.
DAEMON_FIXTURES = {"lab_session": "lab", "lab2": "lab", "lab4": "lab", "sshd": "sshd", "slurm": "slurm",
                   "kube": "kubernetes"}
# pytest-xdist: the lab tests in one chain on one worker, in order, on the worker's own lab instance; a module
# marked lab_chain(NAME) is a chain of its own, LAB_GROUP-NAME, on another worker (docs/testing.md: none is today).
LAB_GROUP = "lab"
# Every test of the Kubernetes control plane on one worker too: one build (minutes, cached after), one plane.
KUBERNETES_GROUP = "kubernetes"


def mark_daemons(item: pytest.Item) -> None:
    for fixture, mark in DAEMON_FIXTURES.items():
        if fixture in getattr(item, "fixturenames", ()) and not item.get_closest_marker(mark):
            item.add_marker(mark)


def group_of(item: pytest.Item) -> str:
    """The unit a worker takes whole: each lab chain's tests together (one worker, in order), the Kubernetes
    control plane's together, every other test with its file (its module fixtures paid once)."""
    if item.get_closest_marker("kubernetes"):  # the lab's Kubernetes nodes too: on a lab instance of this worker's
        return KUBERNETES_GROUP
    if item.get_closest_marker("lab"):
        chain = item.get_closest_marker("lab_chain")
        return f"{LAB_GROUP}-{chain.args[0]}" if chain else LAB_GROUP
    return item.nodeid.split("::", 1)[0]


def in_a_chain(item: pytest.Item) -> bool:
    group_name = group_of(item)
    return group_name == LAB_GROUP or group_name.startswith(f"{LAB_GROUP}-")


def group(item: pytest.Item) -> None:
    """Under `--dist loadgroup` (pytest-xdist), each test's group_of as its xdist group. Set as the item is
    collected, before xdist's own collection hook reads the marks. Only xdist's workers collect, and they see
    `loadgroup`, not `dist`."""
    if getattr(item.config.option, "loadgroup", False):
        item.add_marker(pytest.mark.xdist_group(group_of(item)))


# pytest's cache: each group's seconds (setup, call and teardown of its tests) in the last run that ran it, and the
# CPU seconds its tests spent (the `cpu_s` of each test, below).
GROUP_SECONDS = "gpucheck/group_seconds"
GROUP_CPU_SECONDS = "gpucheck/group_cpu_seconds"
WAITING = 0.5  # a group that keeps a CPU busy less than half its time mostly waits (timeouts, hung probes, peers)


def hand_out_order(seconds: dict[str, float], cpu: dict[str, float]) -> list[str]:
    """The groups in the order the workers get them: longest first, with the groups that mostly wait (timeouts,
    hung probes, peers) spread evenly among those that compute, each stream longest first. Three workers share two
    cores: a group that waits leaves a core to the others, and two that wait at once leave one idle. Handed out
    by length alone, the waiting files came last, together (28 s of `make check`'s 5:20 idle); now their share of
    the time handed out so far stays their share of the whole. A group whose CPU is not known counts as computing."""
    by_length = sorted(seconds, key=lambda name: -seconds[name])
    waiting = [name for name in by_length if cpu.get(name, seconds[name]) < WAITING * seconds[name]]
    computing = [name for name in by_length if name not in set(waiting)]
    share = sum(seconds[name] for name in waiting) / (sum(seconds.values()) or 1.0)
    order: list[str] = []
    handed = waited = 0.0
    while computing or waiting:
        after = seconds[waiting[0]] if waiting else 0.0
        wait_next = bool(waiting) and (not computing or waited + after <= share * (handed + after))
        name = (waiting if wait_next else computing).pop(0)
        order.append(name)
        handed += seconds[name]
        waited += seconds[name] if wait_next else 0.0
    return order


def cached_times(config: pytest.Config, key: str) -> dict[str, float]:
    cache = getattr(config, "cache", None)
    known = cache.get(key, {}) if cache is not None else {}
    return {k: v for k, v in known.items() if isinstance(v, int | float)} if isinstance(known, dict) else {}


def longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The lab tests first, in their own order, then the other groups in `hand_out_order`, by the last run's times
    (the sort is stable: a first run keeps the collection order, a group not timed yet goes last). Under
    `--no-loadscope-reorder` xdist hands out the groups in this order: one worker starts the lab's long chain at
    once, and a long file never starts last and leaves the other workers idle at the end. Every worker reads the
    same cache, so all collect the same order."""
    here = {group_of(item) for item in items if not item.get_closest_marker("lab")}
    seconds = {name: value for name, value in cached_times(config, GROUP_SECONDS).items() if name in here}
    rank = {name: i for i, name in enumerate(hand_out_order(seconds, cached_times(config, GROUP_CPU_SECONDS)))}
    items.sort(key=lambda item: (not item.get_closest_marker("lab"), rank.get(group_of(item), len(rank))))


class GroupTimes:
    """Writes GROUP_SECONDS and GROUP_CPU_SECONDS at the end of a run, from the reports the controller (or a serial
    run) receives: the groups this run ran get their new times, the others keep theirs."""

    def __init__(self, cache: pytest.Cache) -> None:
        self.cache = cache
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = plain_nodeid(report.nodeid)
        name = report.nodeid[len(nodeid) + 1:] or nodeid.split("::", 1)[0]  # xdist's `@group`, else the file
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration
        cpu = sum(value for key, value in report.user_properties if key == "cpu_s")
        self.cpu[name] = self.cpu.get(name, 0.0) + (cpu if report.when == "teardown" else 0.0)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for key, times in ((GROUP_SECONDS, self.seconds), (GROUP_CPU_SECONDS, self.cpu)):
            if times:
                known = self.cache.get(key, {})
                self.cache.set(key, {**(known if isinstance(known, dict) else {}),
                                     **{k: round(v, 1) for k, v in times.items()}})


@pytest.hookimpl(trylast=True)  # after -m has deselected what it leaves out
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run real CUDA kernels: skipped, saying so, where CuPy sees no CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and cuda_devices() == 0:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="no CUDA device (CuPy sees none): a `gpu` test"))
    longest_first(config, items)
    config.stash[LAB_IN_RUN] = any(item.get_closest_marker("lab") for item in items)


# The lab chain is a run's critical path: one worker, the golden image first (a site.yml run), close to an hour;
# the other workers' tests have that long to finish. On two cores they took the chain's CPU (the golden
# image: 6 min alone, 28 beside the other tests; 9 once they gave way). So where a run holds a chain, a worker that
# runs the other tests gives way to it: support.GIVE_WAY steps of nice above where it started, inherited by what its
# tests start; the lab's hosts, started by a chain's worker, keep the start's. The tests that give way still have
# every cycle the chains leave (alone, one chain keeps about one core of two busy).
LAB_IN_RUN = pytest.StashKey[bool]()
STARTED_AT_NICE = os.nice(0)


def give_way_to_the_lab(item: pytest.Item) -> None:
    from support import GIVE_WAY

    if (os.environ.get("PYTEST_XDIST_WORKER") and item.config.stash.get(LAB_IN_RUN, False)
            and not in_a_chain(item) and os.nice(0) == STARTED_AT_NICE):
        os.nice(GIVE_WAY)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks as soon as an item exists: `-m` and xdist's grouping read them in their collection hooks."""
    mark_daemons(item)
    group(item)


CPU_AT_SETUP = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """CPU time of this process and of the children it has waited for (subprocess.run's, and theirs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[CPU_AT_SETUP] = cpu_seconds()
    give_way_to_the_lab(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each test's CPU seconds (setup, call and teardown; what the lab's hosts and other daemons spend is not
    ours to count) as a JUnit property: .ci/timings.py adds them up per directory, where the CPUs are the limit."""
    if call.when == "teardown" and CPU_AT_SETUP in item.stash:
        item.user_properties.append(("cpu_s", round(cpu_seconds() - item.stash[CPU_AT_SETUP], 2)))
    yield


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR (and tempfile's default here) is a directory of this run's own, under pytest's base directory: what
    the programs the tests start leave in their temporary directory (TensorFlow's __autograph_generated_file*.py,
    torchrun's torchelastic_*, ansible-lint's playbooks, OpenMPI's session directory) goes with the run's other
    temporary files (removed when the run passes: pyproject.toml's tmp_path_retention_policy), never into /tmp.
    A short name: OpenMPI builds its session paths under it."""
    directory = tmp_path_factory.mktemp("tmp", numbered=False)
    with pytest.MonkeyPatch.context() as patch:  # put back as it was when the run ends
        patch.setenv("TMPDIR", str(directory))
        patch.setattr(tempfile, "tempdir", str(directory))
        yield directory


@pytest.fixture(scope="session", autouse=True)
def private_state(private_tmpdir: Path) -> Iterator[Path]:
    """XDG_STATE_HOME and GPUCHECK_HISTORY are this run's own: what gpucheck keeps between its runs (the history
    store every `gpucheck cluster` records in, its reports, a node's kept framework probes) goes there, never into
    the user's ~/.local/state/gpucheck."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(private_tmpdir / "state"))
        patch.setenv("GPUCHECK_HISTORY", str(private_tmpdir / "history.sqlite"))
        yield private_tmpdir / "state"


@pytest.fixture
def fake_bin(tmp_path: Path):
    """Make executables that replay a recorded output and exit code: fake_bin.add('ibstat', text, code)."""

    class FakeBin:
        dir = tmp_path / "fakebin"

        def add(self, name: str, stdout: str = "", exit_code: int = 0, sleep: float = 0) -> Path:
            self.dir.mkdir(exist_ok=True)
            out = self.dir / f"{name}.out"
            out.write_text(stdout)
            script = self.dir / name
            pause = f"sleep {sleep}\n" if sleep else ""
            script.write_text(f"#!/bin/sh\n{pause}cat '{out}'\nexit {exit_code}\n")
            script.chmod(script.stat().st_mode | stat.S_IEXEC)
            return script

        def path(self) -> str:
            self.dir.mkdir(exist_ok=True)
            return f"{self.dir}{os.pathsep}{os.environ.get('PATH', '')}"

    return FakeBin()


def plain_nodeid(nodeid: str) -> str:
    """A test's id without the `@group` pytest-xdist's loadgroup appends (after any parameters' `]`)."""
    return nodeid[:nodeid.rfind("@")] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


class LabEvidence:
    """The lab tests are the end-to-end evidence, so under CI a run that collected any test marked `lab` and then
    skipped (xfail included) or deselected one of them fails at the end, whatever else passed, and says which
    and why. A run that collected none (`pytest tests/node`) is not concerned.

    Under pytest-xdist the workers collect, deselect and run: each hands what it saw (a controller collects
    nothing) to the controller (`workeroutput`, read in pytest_testnodedown), which decides the run's exit status."""

    KEY = "gpucheck_lab_not_run"

    def __init__(self) -> None:
        self.lab: set[str] = set()
        self.not_run: dict[str, str] = {}

    @pytest.hookimpl(tryfirst=True)  # every item, with every mark, before -m deselects any
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.lab |= {plain_nodeid(item.nodeid) for item in items if item.get_closest_marker("lab")}

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.get_closest_marker("lab"):
                self.not_run[plain_nodeid(item.nodeid)] = "deselected"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # by the marks seen at collection: a report's keywords also hold its folders' names (tests/lab/...)
        if report.skipped and plain_nodeid(report.nodeid) in self.lab:
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else f"xfail {report.wasxfail}"
            self.not_run.setdefault(plain_nodeid(report.nodeid), f"skipped: {why.removeprefix('Skipped: ')}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller judges
            workeroutput[self.KEY] = dict(self.not_run)
        elif self.not_run and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.not_run:
            terminalreporter.write_sep("=", f"CI: {len(self.not_run)} lab test(s) did not run: the run fails",
                                       red=True, bold=True)
            for nodeid, why in sorted(self.not_run.items()):
                terminalreporter.write_line(f"{nodeid}: {why}")


class LabEvidenceFromWorkers:
    """The controller's side of LabEvidence under pytest-xdist (registered only where xdist is: its hook)."""

    def __init__(self, evidence: LabEvidence) -> None:
        self.evidence = evidence

    def pytest_testnodedown(self, node, error) -> None:
        for nodeid, why in (getattr(node, "workeroutput", None) or {}).get(LabEvidence.KEY, {}).items():
            self.evidence.not_run.setdefault(nodeid, why)


def pytest_configure(config: pytest.Config) -> None:
    from labkit import ci

    config.addinivalue_line("markers", "lab_chain(name): a lab module in a chain of its own (group lab-NAME)")

    if getattr(config, "cache", None) is not None and not hasattr(config, "workerinput"):  # not on an xdist worker
        config.pluginmanager.register(GroupTimes(config.cache), "gpucheck-group-times")

    if ci():
        evidence = LabEvidence()
        config.pluginmanager.register(evidence, "gpucheck-lab-evidence")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(LabEvidenceFromWorkers(evidence), "gpucheck-lab-evidence-xdist")


@pytest.fixture(scope="module")
def fabric_manager(tmp_path_factory):
    """A process named nv-fabricmanager, as on an NVSwitch system (the check looks for it by name)."""
    exe = tmp_path_factory.mktemp("fm") / "nv-fabricmanager"
    shutil.copy(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "600"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()
