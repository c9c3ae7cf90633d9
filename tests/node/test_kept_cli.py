"""`gpucheck kept` (kept_cli.py): the node's kept reports as `gpucheck node` left them, oldest first, from a name
on, a page at a time, whole as JSON lines; what `gpucheck history collect` reads over SSH."""

from __future__ import annotations

import json
import os

import pytest

from support import run_gpucheck

NAMES = ["20261126T040000Z.2-pass.json", "20261125T030000Z-pass-full.json", "20261126T040000Z-fail.json",
         "20261126T040000Z.10-warn.json"]
OLDEST_FIRST = [NAMES[1], NAMES[2], NAMES[0], NAMES[3]]  # by time, then the run's number within its second


@pytest.fixture
def state(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    for i, name in enumerate(NAMES):
        (reports / name).write_text(json.dumps({"host": "node01", "started": name[:16], "results": [], "i": i}))
    (reports / "notes.txt").write_text("not a report")  # not named as one: never listed
    (reports / "20261124T010000Z.tmp").write_text("half written")
    return tmp_path


def kept(state, *args):
    return run_gpucheck(["kept", *args], env={**os.environ, "GPUCHECK_STATE_DIR": str(state)})


def test_the_names_oldest_first_and_from_a_name_on(state):
    done = kept(state)
    assert done.returncode == 0 and done.stdout.split() == OLDEST_FIRST
    assert kept(state, "--after", NAMES[2]).stdout.split() == [NAMES[0], NAMES[3]]
    assert kept(state, "--after", NAMES[3]).stdout == ""
    assert kept(state, "--max", "2").stdout.split() == OLDEST_FIRST[:2]


def test_json_lines_carry_each_report_whole_and_say_which_could_not_be_read(state):
    (state / "reports" / NAMES[3]).write_text("{cut")
    done = kept(state, "--json", "--after", NAMES[1])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [entry["name"] for entry in lines] == OLDEST_FIRST[1:]
    assert lines[0]["report"] == {"host": "node01", "started": NAMES[2][:16], "results": [], "i": 2}
    assert "report" not in lines[2] and lines[2]["error"]


def test_nothing_kept_yet_is_an_empty_list(tmp_path):
    done = kept(tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(("args", "message"), [
    (["--after", "yesterday"], "'yesterday' is not a kept report's name"),
    (["--max", "0"], "--max"),
])
def test_bad_input_is_one_line_and_exit_3(state, args, message):
    done = kept(state, *args)
    assert done.returncode == 3 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_folder_that_cannot_be_read_is_one_line_and_exit_3(tmp_path):
    (tmp_path / "reports").write_text("a file where the folder should be")
    done = kept(tmp_path)
    assert done.returncode == 3 and done.stderr.startswith("gpucheck: error: cannot read ")
