"""Under CI the lab tests cannot quietly not run: labkit.lab_unavailable fails instead of skipping, and
tests/conftest.py fails a run that collected lab tests and skipped or deselected any of them.

The session guard is shown on tiny test files in a separate pytest process that loads this suite's own
tests/conftest.py (`-p conftest`), with CI set or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labkit import ci, lab_unavailable
from support import GIVE_WAY, ROOT

TESTS = Path(__file__).resolve().parent

FILES = {
    "test_lab_skips.py": """
        import pytest

        @pytest.mark.lab
        def test_runs():
            pass

        @pytest.mark.lab
        def test_skips():
            pytest.skip("no lab on this machine")
    """,
    "test_lab_runs.py": """
        import pytest

        pytestmark = pytest.mark.lab

        def test_runs():
            pass
    """,
    "test_lab_unavailable.py": """
        import pytest
        from labkit import lab_unavailable

        @pytest.fixture(scope="session")
        def lab():
            lab_unavailable("the lab needs root (network namespaces, mounts)")

        @pytest.mark.lab
        def test_uses_the_lab(lab):
            pass
    """,
    "test_plain.py": """
        import pytest

        def test_passes():
            pass

        def test_skips():
            pytest.skip("not a lab test: skipping is fine")
    """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    # a test that is not a lab test in a folder named lab (as tests/lab/'s units): its skip is no lab test's
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "test_in_a_lab_folder.py").write_text(
        "import pytest\n\n@pytest.mark.xfail(reason='known', strict=True)\ndef test_known():\n    assert False\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    lab: integration tests that bring up the lab\n")
    return tmp_path


# What the outer run gives its own processes and a run of its own must not inherit: its CI and options, and the
# xdist worker this test runs on (the inner run's conftest would take itself for that worker).
NOT_INHERITED = ("CI", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                 "PYTEST_XDIST_TESTRUNUID", "GPUCHECK_LAB_INSTANCE")


def pytest_run(project: Path, ci_value: str | None, *args: str, cache: bool = False,
               given: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(given or {})
    if ci_value is not None:
        env["CI"] = ci_value
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT / "agent")])
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "cacheprovider" if cache else
                           "no:cacheprovider", "-rs",
                           "-c", str(project / "pytest.ini"), "--rootdir", str(project), *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def outcome(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"


@pytest.mark.parametrize("ci_value", ["true", "1"])
def test_under_ci_a_skipped_lab_test_fails_the_run(project: Path, ci_value: str) -> None:
    done = pytest_run(project, ci_value, "test_lab_skips.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, outcome(done)
    assert "1 lab test(s) did not run" in done.stdout, outcome(done)
    assert "test_lab_skips.py::test_skips: skipped: no lab on this machine" in done.stdout, outcome(done)
    assert "2 passed, 2 skipped" in done.stdout, outcome(done)  # nothing failed by itself: the guard failed it


@pytest.mark.parametrize("ci_value", [None, "false"])
def test_without_ci_the_same_run_passes(project: Path, ci_value: str | None) -> None:
    done = pytest_run(project, ci_value, "test_lab_skips.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.OK, outcome(done)
    assert "did not run" not in done.stdout, outcome(done)


def test_under_ci_lab_tests_that_all_run_pass_and_other_skips_are_fine(project: Path) -> None:
    for xdist in ((), ("-n", "2", "--dist", "loadgroup")):
        done = pytest_run(project, "true", *xdist, "test_lab_runs.py", "test_plain.py", "lab/test_in_a_lab_folder.py")
        assert done.returncode == pytest.ExitCode.OK and "1 xfailed" in done.stdout, outcome(done)


def test_under_ci_deselecting_collected_lab_tests_fails_the_run(project: Path) -> None:
    done = pytest_run(project, "true", "-m", "not lab", "test_lab_runs.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, outcome(done)
    assert "test_lab_runs.py::test_runs: deselected" in done.stdout, outcome(done)
    assert pytest_run(project, None, "-m", "not lab", "test_lab_runs.py", "test_plain.py").returncode == 0


def test_under_ci_the_guard_holds_with_the_tests_spread_over_xdist_workers(project: Path) -> None:
    """`make test` runs the suite on pytest-xdist workers, which collect, deselect and skip: the controller still
    fails the run, naming each lab test that did not run, once."""
    xdist = ("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")
    done = pytest_run(project, "true", *xdist, "test_lab_skips.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, outcome(done)
    assert done.stdout.count("test_lab_skips.py::test_skips: skipped: no lab on this machine") == 1, outcome(done)
    done = pytest_run(project, "true", *xdist, "-m", "not lab", "test_lab_runs.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, outcome(done)
    assert done.stdout.count("test_lab_runs.py::test_runs: deselected") == 1, outcome(done)
    done = pytest_run(project, "true", *xdist, "test_lab_runs.py", "test_plain.py")
    assert done.returncode == pytest.ExitCode.OK and "did not run" not in done.stdout, outcome(done)


RECORD = """
import os
import pytest

def record(name):
    with open(os.environ["GROUPING_LOG"], "a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')} {name} {os.nice(0)} "
                  f"{os.environ.get('GPUCHECK_LAB_INSTANCE', '-')}\\n")

@pytest.fixture
def lab2():  # one of the fixtures that mark a test `lab` by its use (conftest.DAEMON_FIXTURES)
    return "up"

{tests}
"""


def recorded_run(project: Path, tests: dict[str, str], *args: str,
                 given: dict[str, str] | None = None) -> list[list[str]]:
    """Each file of `tests` (its test functions) written with RECORD beside a pytest.ini, then pytest run with `args`:
    what the tests recorded (worker, name, nice, lab instance), in the order they ran."""
    for name, code in tests.items():
        (project / name).write_text(RECORD.replace("{tests}", code))
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    lab: integration tests that bring up the lab\n")
    log = project / "recorded.log"
    log.unlink(missing_ok=True)
    done = pytest_run(project, None, *args, given={"GROUPING_LOG": str(log), **(given or {})})
    assert done.returncode == 0, outcome(done)
    return [line.split() for line in log.read_text().splitlines()]


def test_the_lab_tests_share_one_worker_first_in_their_order_and_the_rest_go_a_file_at_a_time(tmp_path: Path) -> None:
    """`make test`'s scheduling: every lab test (marked, or using a lab fixture) on one worker, in collection order,
    before that worker takes anything else; the other files each whole on a worker. A pytest or xdist that ignored
    the groups (pytest 9.2 with xdist 3.8 does, silently) would put two lab tests on two workers at once."""
    lab_a = "\n".join(f"@pytest.mark.lab\ndef test_a{i}():\n    record('lab_a{i}')\n" for i in range(3))
    lab_b = "\n".join(f"def test_b{i}(lab2):\n    record('lab_b{i}')\n" for i in range(3))
    plain = "\n".join(f"def test_p{i}():\n    record('plain{i}')\n" for i in range(6))
    other = "\n".join(f"def test_q{i}():\n    record('other{i}')\n" for i in range(6))
    files = {"test_1_plain.py": plain, "test_2_lab.py": lab_a, "test_3_uses_the_lab.py": lab_b,
             "test_4_plain.py": other}
    ran = [line[:2] for line in recorded_run(tmp_path, files, "-n", "2", "--dist", "loadgroup",
                                             "--no-loadscope-reorder")]
    by_worker: dict[str, list[str]] = {}
    for worker, name in ran:
        by_worker.setdefault(worker, []).append(name)
    lab = [name for name in (n for _, n in ran) if name.startswith("lab_")]
    assert len(lab) == 6, ran
    holder = next(w for w, names in by_worker.items() if names[0].startswith("lab_"))
    assert by_worker[holder][:6] == ["lab_a0", "lab_a1", "lab_a2", "lab_b0", "lab_b1", "lab_b2"], by_worker
    elsewhere = next(w for w in by_worker if w != holder)
    for prefix in ("plain", "other"):  # a file whole on one worker
        assert len({w for w, names in by_worker.items() for n in names if n.startswith(prefix)}) == 1, by_worker
    assert by_worker[elsewhere], by_worker  # the other worker did not wait for the lab chain


MEET = """
def meet(me, other):  # each chain's first test waits for the other's: they run at once, or this fails
    import pathlib, time
    here = pathlib.Path(os.environ["GROUPING_LOG"]).parent
    (here / f"started-{me}").touch()
    deadline = time.monotonic() + 60
    while not (here / f"started-{other}").exists():
        assert time.monotonic() < deadline, f"chain {other} never ran beside chain {me}"
        time.sleep(0.05)
"""


def chain_tests(prefix: str, other: str) -> str:
    """Three tests recording `{prefix}0`.. in order, the first meeting the chain `other`'s first."""
    first = f"def test_{prefix}0():\n    meet('{prefix}', '{other}')\n    record('lab_{prefix}0')\n"
    return MEET + first + "".join(f"def test_{prefix}{i}():\n    record('lab_{prefix}{i}')\n" for i in (1, 2))


def test_the_second_lab_chain_runs_beside_the_first_on_a_worker_and_a_lab_instance_of_its_own(tmp_path: Path) -> None:
    """A lab module marked lab_chain("second") is a chain of its own: started at once, beside the first chain, on
    another worker, whose lab instance (GPUCHECK_LAB_INSTANCE: the run's first, 2 here, plus the worker's number)
    is not the first chain's; each chain's tests on one worker, in their order."""
    files = {"test_1_first.py": "pytestmark = pytest.mark.lab\n" + chain_tests("a", "b"),
             "test_2_second.py": 'pytestmark = [pytest.mark.lab, pytest.mark.lab_chain("second")]\n'
                                 + chain_tests("b", "a"),
             "test_3_plain.py": "".join(f"def test_p{i}():\n    record('plain{i}')\n" for i in range(4))}
    ran = recorded_run(tmp_path, files, "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder",
                       given={"GPUCHECK_LAB_INSTANCE": "2"})
    by_worker: dict[str, list[str]] = {}
    for worker, name, _, instance in ran:
        by_worker.setdefault(worker, []).append(name)
        assert instance == str(2 + int(worker.removeprefix("gw"))), ran
    holders = {prefix: [w for w, names in by_worker.items() if any(n.startswith(prefix) for n in names)]
               for prefix in ("lab_a", "lab_b")}
    assert len(holders["lab_a"]) == len(holders["lab_b"]) == 1 and holders["lab_a"] != holders["lab_b"], by_worker
    for prefix, (worker,) in holders.items():
        assert by_worker[worker][:3] == [f"{prefix}{i}" for i in range(3)], by_worker


def test_where_a_run_holds_the_lab_chain_every_other_test_gives_way_to_it(tmp_path: Path) -> None:
    """The lab tests run at the nice the run started at, every other test GIVE_WAY steps above it (the cap is 19);
    a run without lab tests leaves every test where it started."""
    lab = "\n".join(f"@pytest.mark.lab\ndef test_a{i}():\n    record('lab_a{i}')\n" for i in range(3))
    plain = "\n".join(f"def test_p{i}():\n    record('plain{i}')\n" for i in range(4))
    xdist = ("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")
    start = os.nice(0)
    ran = recorded_run(tmp_path, {"test_1_plain.py": plain, "test_2_lab.py": lab}, *xdist)
    assert {name: int(value) for _, name, value, _ in ran} == {
        **{f"lab_a{i}": start for i in range(3)}, **{f"plain{i}": min(start + GIVE_WAY, 19) for i in range(4)}}, ran
    ran = recorded_run(tmp_path, {"test_1_plain.py": plain}, *xdist, "test_1_plain.py")
    assert {name: int(value) for _, name, value, _ in ran} == {f"plain{i}": start for i in range(4)}, ran


def test_after_a_run_the_lab_goes_first_and_the_files_that_wait_are_spread_among_the_longest_first(
        tmp_path: Path) -> None:
    """A run writes each group's seconds and CPU seconds into pytest's cache (the groups it did not run keep
    theirs); the next run hands out the lab group first, then the other files longest first, the ones that mostly
    wait among them so that their share of the time handed out stays their share of the whole, whatever the
    collection order."""
    # (seconds, CPU seconds) the next run reads; "wait1" and "wait2" mostly wait: 55 s of the 150
    times = {"long": (60.0, 59.0), "wait1": (30.0, 1.0), "wait2": (25.0, 1.0), "mid": (20.0, 19.0),
             "short": (10.0, 9.0), "tiny": (5.0, 4.0)}
    collected = ["tiny", "wait2", "lab", "long", "wait1", "mid", "short"]
    files = {f"test_{i}_{label}.py": label for i, label in enumerate(collected, 1)}
    for name, label in files.items():
        fixture = "lab2" if label == "lab" else ""
        (tmp_path / name).write_text(RECORD.replace("{tests}", f"def test_x({fixture}):\n    record('{label}')\n"))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    lab: integration tests that bring up the lab\n")
    cache = tmp_path / ".pytest_cache" / "v" / "gpucheck"
    log = tmp_path / "grouping.log"
    xdist, logged = ("-n", "1", "--dist", "loadgroup", "--no-loadscope-reorder"), {"GROUPING_LOG": str(log)}
    done = pytest_run(tmp_path, None, *xdist, cache=True, given=logged)
    assert done.returncode == 0, outcome(done)
    first = [line.split()[1] for line in log.read_text().splitlines()]
    recorded = {key: json.loads((cache / key).read_text()) for key in ("group_seconds", "group_cpu_seconds")}
    by_file = {label: name for name, label in files.items()}
    (cache / "group_seconds").write_text(json.dumps(
        {**{by_file[label]: wall for label, (wall, _) in times.items()}, "lab": 900.0, "gone.py": 7.0}))
    (cache / "group_cpu_seconds").write_text(json.dumps(
        {by_file[label]: cpu for label, (_, cpu) in times.items()}))
    log.unlink()
    done = pytest_run(tmp_path, None, *xdist, cache=True, given=logged)
    assert done.returncode == 0, outcome(done)
    # no times yet: the lab first, then the collection order
    assert first == ["lab"] + [label for label in collected if label != "lab"], first
    for recorded_times in recorded.values():
        assert set(recorded_times) == {*files, "lab"} - {by_file["lab"]}, recorded
        assert min(recorded_times.values()) >= 0, recorded
    # by length alone: long, wait1, wait2, mid, short, tiny (the waits together); two computing files to one
    # waiting: long, mid, wait1, short, tiny, wait2
    assert [line.split()[1] for line in log.read_text().splitlines()] == [
        "lab", "long", "wait1", "mid", "short", "tiny", "wait2"]
    assert json.loads((cache / "group_seconds").read_text())["gone.py"] == 7.0


def test_under_ci_a_run_that_collects_no_lab_test_is_not_concerned(project: Path) -> None:
    done = pytest_run(project, "true", "-m", "not lab", "test_plain.py")  # like `pytest tests/node` in CI
    assert done.returncode == pytest.ExitCode.OK, outcome(done)


def test_lab_unavailable_fails_under_ci_and_skips_otherwise(project: Path) -> None:
    done = pytest_run(project, "true", "test_lab_unavailable.py")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, outcome(done)
    assert "1 error" in done.stdout and "under CI (CI=true) they must: the lab needs root" in done.stdout, \
        outcome(done)
    done = pytest_run(project, None, "test_lab_unavailable.py")
    assert done.returncode == pytest.ExitCode.OK and "1 skipped" in done.stdout, outcome(done)
    assert "the lab needs root" in done.stdout, outcome(done)


def test_ci_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in (("true", True), ("1", True), ("yes", True), (" True ", True), ("false", False),
                            ("0", False), ("", False), ("off", False), ("no", False)):
        monkeypatch.setenv("CI", value)
        assert ci() is expected, value
    monkeypatch.delenv("CI")
    assert ci() is False
    skipped = ended_by(lab_unavailable, "the lab needs root")
    assert type(skipped) is pytest.skip.Exception and str(skipped) == "the lab needs root"
    monkeypatch.setenv("CI", "true")
    failed = ended_by(lab_unavailable, "the lab needs root")
    assert type(failed) is pytest.fail.Exception and "under CI (CI=true) they must: the lab needs root" in str(failed)


def ended_by(function, *args) -> BaseException:
    """The skip or failure a helper ends the test with, caught either way (an uncaught skip would pass as a skip)."""
    try:
        function(*args)
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        return exc
    raise AssertionError(f"{function.__name__} returned")
