""".ci/timings.py, which `.ci/run` runs after the tests: the wall time against CI's limit, the time per test
directory and the slowest tests, read from pytest's own JUnit XML of a small run made here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from support import ROOT

TIMINGS = ROOT / ".ci" / "timings.py"


def test_a_runs_junit_gives_its_directories_and_slowest_tests(tmp_path: Path) -> None:
    for folder, body in (("fast", "def test_quick():\n    pass\n"),
                         ("slow", "import time\n\nclass TestSlow:\n    def test_naps(self):\n"
                                  "        time.sleep(0.6)\n\n    def test_fails(self):\n        time.sleep(0.3)\n"
                                  "        assert False\n")):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / f"test_{folder}.py").write_text(body)
    (tmp_path / "tests" / "test_top.py").write_text("import pytest\n\ndef test_skipped():\n    pytest.skip('no')\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                    "-c", "/dev/null", f"--junitxml={junit}", "tests"], cwd=tmp_path, capture_output=True, timeout=120)
    done = subprocess.run([sys.executable, str(TIMINGS), str(junit), "--wall", "2700", "--slowest", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "CI: the suite took 45:00 of its 90:00 limit (50 %; over CI's budget of 40:00)", done.stdout
    assert lines[1].startswith("4 tests, 0:00 of test time"), done.stdout
    rows = [line.split()[0] for line in lines[2:5]]
    assert rows[0] == "tests/slow" and set(rows[1:]) == {"tests/fast", "tests"}, done.stdout
    assert lines[5] == "the 2 slowest tests (setup, call and teardown):", done.stdout
    assert lines[6].endswith("s  tests/slow/test_slow.py::TestSlow::test_naps"), done.stdout
    assert lines[7].endswith("s  tests/slow/test_slow.py::TestSlow::test_fails  [failure]"), done.stdout


def test_markdown_table_and_an_unreadable_report(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase classname="tests.cluster_lab.test_x" name="test_a@lab" time="600.5">
            <properties><property name="cpu_s" value="30.25"/></properties></testcase>
          <testcase classname="tests.node.test_y" name="test_b[a@b]" time="30"/>
        </testsuite></testsuites>"""))
    done = subprocess.run([sys.executable, str(TIMINGS), str(junit), "--markdown"], capture_output=True, text=True,
                          timeout=60)
    assert "| `tests/cluster_lab` | 1 | 10:00 | 95 % | 0:30 |" in done.stdout, done.stdout
    assert "| `tests/node` | 1 | 0:30 | 5 % | 0:00 |" in done.stdout, done.stdout
    assert "2 tests, 10:30 of test time, 0:30 of CPU" in done.stdout, done.stdout
    assert "  600.5 s  tests/cluster_lab/test_x.py::test_a\n" in done.stdout  # without xdist's @group
    assert "tests/node/test_y.py::test_b[a@b]" in done.stdout
    broken = subprocess.run([sys.executable, str(TIMINGS), str(tmp_path / "none.xml")], capture_output=True,
                            text=True, timeout=60)
    assert broken.returncode == 3 and broken.stderr.startswith("timings: cannot read"), broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1


def test_this_suites_conftest_records_each_tests_cpu_with_its_children(tmp_path: Path) -> None:
    """tests/conftest.py puts each test's CPU seconds (its children's included) in the JUnit report."""
    (tmp_path / "test_cpu.py").write_text(textwrap.dedent("""\
        import subprocess, sys

        def test_busy_child():
            subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)

        def test_idle():
            pass
    """))
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "agent")])}
    env.pop("CI", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                           "-c", "/dev/null", "--rootdir", str(tmp_path), f"--junitxml={junit}", "test_cpu.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    cpu = {case.nodeid.split("::")[-1]: case.cpu_s for case in load_cases(junit)}
    assert cpu["test_busy_child"] is not None and cpu["test_idle"] is not None, cpu
    assert cpu["test_busy_child"] > 0.1 > cpu["test_idle"], cpu


def load_cases(junit: Path):
    """.ci/timings.py's reading of a report (it is a script, not a package: loaded by its path)."""
    spec = importlib.util.spec_from_file_location("ci_timings", TIMINGS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module.cases(str(junit))
