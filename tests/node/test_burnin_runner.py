"""The burn-in's runner (node/burnin/runner.py) with stand-in child programs: small Python scripts that print
contract lines, wait for each other, hang or die. The real GPU programs are tested elsewhere."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from gpucheck.node.burnin import runner as burnin_runner
from gpucheck.node.burnin.runner import Program, parse_line, run_programs


def program(code: str, **env: str) -> Program:
    """A stand-in GPU program: `line(event, **fields)` prints one contract line."""
    prelude = textwrap.dedent("""\
        import json, os, sys, time
        def line(event, **fields):
            print("GPUCHECK_GPUWORK " + json.dumps({"event": event, **fields}), flush=True)
        """)
    return Program([sys.executable, "-c", prelude + textwrap.dedent(code)], dict(os.environ, **env))


def test_programs_run_at_the_same_time(tmp_path):
    # each waits for the other's file: run one after the other, neither would finish before the limit
    waits = """
        open(os.environ["MINE"], "w").close()
        line("begin", device={"name": "stand-in"})
        for _ in range(200):
            if os.path.exists(os.environ["THEIRS"]):
                break
            time.sleep(0.05)
        else:
            sys.exit(9)
        line("start", test="sdc")
        line("result", test="sdc", seconds=0.1, error=None, fault=None, checksum=os.environ["MINE"][-1] * 64)
        line("end")
    """
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    began = time.monotonic()
    outcomes = run_programs({"GPU0": program(waits, MINE=a, THEIRS=b),
                             "GPU1": program(waits, MINE=b, THEIRS=a)}, 30)
    assert time.monotonic() - began < 20
    for label, mine in (("GPU0", "a"), ("GPU1", "b")):
        outcome = outcomes[label]
        assert outcome.exit == 0 and outcome.ended and not outcome.timed_out, outcome
        assert outcome.begin["device"] == {"name": "stand-in"}
        assert outcome.results["sdc"]["checksum"] == mine * 64


def test_a_hung_program_is_killed_with_its_group_and_keeps_what_it_said(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hangs = f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        line("begin")
        line("start", test="memtest")
        line("result", test="memtest", seconds=0.8, error=None, fault=None, bad_words=0)
        line("start", test="burn")
        print("burning", file=sys.stderr, flush=True)
        time.sleep(600)
    """
    quick = """
        line("begin")
        line("result", test="memtest", seconds=0.8, error=None, fault=None, bad_words=0)
        line("end")
    """
    began = time.monotonic()
    outcomes = run_programs({"GPU0": program(hangs), "GPU1": program(quick)}, 3)
    assert time.monotonic() - began < 3 + burnin_runner.KILL_GRACE_S + 2
    hung, other = outcomes["GPU0"], outcomes["GPU1"]
    assert hung.timed_out and hung.exit is None and not hung.ended and not hung.stuck
    assert hung.results["memtest"]["bad_words"] == 0 and hung.running == "burn"
    assert "burning" in hung.stderr_tail
    assert other.exit == 0 and other.ended and not other.timed_out
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL to the group: the grandchild dies too (a zombie at most, reaped by init)
        try:
            with open(f"/proc/{grandchild}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung program's child {grandchild} outlived the kill")


def test_a_program_that_dies_gives_its_exit_status_and_last_words():
    dies = """
        line("begin")
        line("start", test="gemm")
        print("Segmentation fault in the stand-in", file=sys.stderr, flush=True)
        os._exit(7)
    """
    outcome = run_programs({"GPU0": program(dies)}, 30)["GPU0"]
    assert outcome.exit == 7 and not outcome.timed_out and not outcome.ended
    assert outcome.running == "gemm" and outcome.results == {}
    assert "Segmentation fault in the stand-in" in outcome.stderr_tail


def test_unavailable_is_kept_with_its_reason():
    says = """
        line("unavailable", reason="CuPy is not installed: install gpucheck's gpu extra")
        sys.exit(3)
    """
    outcome = run_programs({"GPU0": program(says)}, 30)["GPU0"]
    assert outcome.exit == 3 and outcome.unavailable.startswith("CuPy is not installed")


def test_a_program_that_cannot_start_is_unavailable(tmp_path):
    missing = Program([str(tmp_path / "no-such-python"), "-m", "gpucheck.gpuwork.worker"], dict(os.environ))
    outcome = run_programs({"GPU0": missing}, 5)["GPU0"]
    assert outcome.unavailable.startswith("the worker could not be started") and outcome.exit is None


def test_other_output_is_counted_not_taken(monkeypatch):
    monkeypatch.setattr(burnin_runner, "LINE_MAX_B", 1000)
    noisy = """
        print("a warning from a library")
        print("GPUCHECK_GPUWORK {not json")
        print("GPUCHECK_GPUWORK " + json.dumps(["not", "an", "event"]))
        print("GPUCHECK_GPUWORK " + json.dumps({"event": "result", "test": "gemm", "pad": "x" * 200000}), flush=True)
        line("result", test="sdc", error=None, fault=None, checksum="ab" * 32)
        sys.stdout.write("GPUCHECK_GPUWORK " + json.dumps({"event": "end"}))  # no newline at the end
    """
    outcome = run_programs({"GPU0": program(noisy)}, 30)["GPU0"]
    assert set(outcome.results) == {"sdc"} and outcome.ended and outcome.stray_lines == 4


@pytest.mark.parametrize("text,event", [
    ('GPUCHECK_GPUWORK {"event": "end"}', {"event": "end"}),
    ('GPUCHECK_GPUWORK {"event": "end"}\r', {"event": "end"}),
    ('GPUCHECK_GPUWORK {"test": "sdc"}', None),
    ("GPUCHECK_RESULT {}", None),
    ("GPUCHECK_GPUWORK " + "[" * 100000, None),
])
def test_parse_line(text, event):
    assert parse_line(text) == event


def test_results_arrive_in_the_order_printed():
    many = """
        for test in ("sdc", "gemm", "memory_bandwidth"):
            line("start", test=test)
            line("result", test=test, error=None, fault=None)
        line("end")
    """
    outcome = run_programs({"GPU0": program(many)}, 30)["GPU0"]
    assert list(outcome.results) == ["sdc", "gemm", "memory_bandwidth"] and outcome.running is None
    assert json.loads(json.dumps(outcome.results["gemm"]))["test"] == "gemm"
