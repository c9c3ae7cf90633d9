"""The Xid window, run as a user runs it (a separate `gpucheck node --only gpu.xid` process): a fake `dmesg`
(and `journalctl`) on PATH, a fake /proc (GPUCHECK_PROC_ROOT: uptime, boot id) and a state directory of the
test's own (GPUCHECK_STATE_DIR).

The rule under test (node/kernel_log.py): the Xids judged are those logged after the later of the last clean
run of this boot (the state file) and the look-back (--xid-lookback, 24 h by default); older ones are shown
(counted in `measured`, named in the reason, kept in the evidence), never judged; an event without a time
since boot is always judged; --xid-since boot judges the whole boot; the state is written only after a run
whose gpu.xid passed, and a state file that cannot be read or written costs the run nothing but a note.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucheck.node import kept_reports
from support import REAL, by_check, report_of, run_gpucheck

BOOT = "3f1c2a8e-0b7d-4c55-9d7e-5a1f0c2e9b41"
OTHER_BOOT = "9d0e6b1a-2c3f-4a5b-8c7d-6e5f4a3b2c1d"
DAY = 24 * 3600
QUIET = "[    0.000000] Linux version 6.1.0-18-amd64\n[    2.114000] nvidia: loading out-of-tree module\n"


def xid(at: float, code: int, pci: str = "0000:3b:00", text: str = "Ch 00000010") -> str:
    return f"[{at:12.6f}] NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python, {text}\n"


class Node:
    """One node: its kernel log, its /proc and its state directory."""

    def __init__(self, tmp_path: Path, fake_bin) -> None:
        self.tmp, self.fake_bin = tmp_path, fake_bin
        self.proc = tmp_path / "proc"
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir()
        self.state = self.state_dir / "xid-window.json"
        (tmp_path / "node.yaml").write_text("profile: auto\n")
        self.boot(200000.0)

    def boot(self, uptime: float | None, boot_id: str | None = BOOT) -> None:
        (self.proc / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
        for path, text in ((self.proc / "uptime", uptime), (self.proc / "sys/kernel/random/boot_id", boot_id)):
            path.unlink(missing_ok=True)
            if text is not None:
                path.write_text(f"{text:.2f} 1234.56\n" if isinstance(text, float) else f"{text}\n")

    def remember(self, read_to: float, boot_id: str = BOOT, source: str = "dmesg") -> None:
        self.state.write_text(json.dumps({"boot_id": boot_id, "read_to_s": read_to, "source": source}))

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PATH": self.fake_bin.path(), "GPUCHECK_CONFIG": str(self.tmp / "node.yaml"),
                "GPUCHECK_PROC_ROOT": str(self.proc), "GPUCHECK_STATE_DIR": str(self.state_dir), **extra}

    def run(self, dmesg: str | None, *args: str, **env: str) -> tuple[int, dict, str]:
        if dmesg is not None:
            self.fake_bin.add("dmesg", dmesg)
        done = run_gpucheck(["node", "--profile", "generic", "--only", "gpu.xid", "--format", "json", *args],
                            self.env(**env))
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, by_check(report_of(done))["gpu.xid"], done.stderr


@pytest.fixture
def node(tmp_path, fake_bin) -> Node:
    return Node(tmp_path, fake_bin)


# ---------------------------------------------------------------- the look-back

def test_a_fatal_xid_older_than_the_look_back_is_shown_not_judged(node):
    old = xid(100.0, 74, text="NVLink: fatal error detected on link 3")
    code, result, stderr = node.run(QUIET + old + xid(150000.0, 13, text="Graphics Exception"))
    assert (code, result["status"]) == (0, "pass")
    assert result["reason"] == ("only application-level Xids: Xid 13 on 0000:3b:00; 1 older event before the "
                                "window, not judged: Xid 74 on 0000:3b:00 at 100 s after boot")
    measured = result["measured"]
    assert measured["counts"] == {"13": 1}
    assert measured["older"] == {"events": 1, "counts": {"74": 1}, "fallen_off_bus": []}
    assert measured["window"]["start_s"] == 200000 - DAY
    assert measured["window"]["since"] == "in the last 24 h (since 113600 s after boot)"
    assert old.strip() in result["evidence"]  # the old line is still the evidence
    assert stderr == ""


def test_the_same_fatal_xid_inside_the_look_back_fails(node):
    code, result, _ = node.run(QUIET + xid(100.0, 48, "0000:18:00", "DBE") + xid(199000.0, 79))
    assert (code, result["status"]) == (2, "fail")
    assert result["reason"] == ("fatal: Xid 79 on 0000:3b:00; 1 older event before the window, not judged: "
                                "Xid 48 on 0000:18:00 at 100 s after boot")
    assert result["remediation"].startswith("keep the evidence first (gpucheck rma): a reset or reboot clears what an "
                                            "RMA needs; drain the node")
    assert not node.state.exists()


def test_a_node_up_for_less_than_the_look_back_judges_its_whole_boot(node):
    node.boot(50000.0)
    code, result, _ = node.run(QUIET + xid(100.0, 79))
    assert (code, result["status"], result["reason"]) == (2, "fail", "fatal: Xid 79 on 0000:3b:00")
    assert result["measured"]["window"]["start_s"] is None and "older" not in result["measured"]


def test_a_shorter_look_back_and_an_old_fallen_gpu_and_storm(node):
    """A GPU fallen off the bus two hours ago and a storm of 629 Xid 45 are shown, counted, not judged."""
    fallen = (REAL / "xid" / "fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt").read_text()
    storm = "".join(xid(1900.0 + i, 45, "0000:0a:00", "Ch 00000008") for i in range(629))
    node.boot(9000.0)
    code, result, _ = node.run(QUIET + fallen + storm, "--xid-lookback", "3600")
    assert (code, result["status"]) == (0, "pass")
    assert result["reason"] == (
        "no Xid errors in the last 1 h (since 5400 s after boot); 630 older events before the window, not "
        "judged: Xid 45 on 0000:0a:00 x629 (the last at 2528 s after boot), GPU 0000:b3:00 fallen off the bus "
        "at 1843 s after boot")
    assert result["measured"]["older"] == {"events": 630, "counts": {"45": 629}, "fallen_off_bus": ["0000:b3:00"]}
    assert result["measured"]["fallen_off_bus"] == []
    # a look-back shorter than the default passed: not a clean run (it did not judge what the default window
    # holds), so the next default run still judges the fallen GPU; remembered, it stopped being judged
    assert not node.state.exists()
    code, result, _ = node.run(None)
    assert (code, result["status"]) == (2, "fail") and result["reason"].startswith("GPU 0000:b3:00 has fallen off")
    code, result, _ = node.run(None, "--xid-lookback", "7200")  # the GPU fell 7157 s ago: inside 2 h
    assert (code, result["status"]) == (2, "fail") and result["reason"].startswith("GPU 0000:b3:00 has fallen off")


# ---------------------------------------------------------------- the last clean run

def test_after_a_clean_run_only_the_new_xids_are_judged(node):
    log = QUIET + xid(400.0, 13, text="Graphics Exception") + "[  500.000000] eth0: link becomes ready\n"
    node.boot(550.0)
    code, result, _ = node.run(log)
    assert (code, result["status"]) == (0, "pass")  # a clean run: it read the log up to 500 s of this boot
    assert json.loads(node.state.read_text()) == {"boot_id": BOOT, "read_to_s": 500.0, "source": "dmesg"}
    node.boot(700.0)
    code, result, _ = node.run(log + xid(600.0, 79, "0000:5d:00"))
    assert (code, result["status"]) == (2, "fail")
    assert result["reason"] == ("fatal: Xid 79 on 0000:5d:00; 1 older event before the window, not judged: "
                                "Xid 13 on 0000:3b:00 at 400 s after boot")
    assert result["measured"]["window"]["start_s"] == 500.0
    assert result["measured"]["window"]["since"] == "since the last clean run (500 s after boot)"
    assert json.loads(node.state.read_text())["read_to_s"] == 500.0  # a failed run is not remembered


def test_a_fatal_xid_before_the_last_clean_run_is_not_judged_again(node):
    """The GPU behind the Xid 48 was reset and a run passed since (its window was past the Xid): from then on
    only what comes after that run counts, long before the look-back would let the Xid go."""
    node.remember(500.0)
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(400.0, 48, text="DBE") + xid(600.0, 79, "0000:5d:00"))
    assert (code, result["status"]) == (2, "fail")
    assert result["reason"] == ("fatal: Xid 79 on 0000:5d:00; 1 older event before the window, not judged: "
                                "Xid 48 on 0000:3b:00 at 400 s after boot")
    code, result, _ = node.run(QUIET + xid(400.0, 48, text="DBE"))
    assert (code, result["status"]) == (0, "pass")
    assert result["reason"] == ("no Xid errors since the last clean run (500 s after boot); 1 older event before "
                                "the window, not judged: Xid 48 on 0000:3b:00 at 400 s after boot")


def test_a_clean_run_of_another_boot_counts_for_nothing(node):
    node.remember(500.0, boot_id=OTHER_BOOT)
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(400.0, 48, text="DBE") + xid(600.0, 79, "0000:5d:00"))
    assert (code, result["reason"]) == (2, "fatal: Xid 48 on 0000:3b:00, Xid 79 on 0000:5d:00")
    assert result["measured"]["window"]["start_s"] is None


def test_a_clean_run_read_from_another_log_is_not_compared(node):
    """journalctl's stamps may differ from dmesg's by seconds (systemd 256): the look-back decides instead."""
    node.remember(500.0, source="journalctl")
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(450.0, 79))
    assert (code, result["reason"]) == (2, "fatal: Xid 79 on 0000:3b:00")


FIFO, DIRECTORY = "FIFO", "DIRECTORY"
CORRUPT = {
    "not-json": ("{boot_id: oops", "is not an Xid state file (ignored)"),
    "empty": ("", "is not an Xid state file (ignored)"),
    "a-list": ("[1, 2]", "is not an Xid state file (ignored)"),
    "no-boot-id": ('{"read_to_s": 900, "source": "dmesg"}', "is not an Xid state file (ignored)"),
    "text-stamp": (f'{{"boot_id": "{BOOT}", "read_to_s": "900", "source": "dmesg"}}', "is not an Xid state file"),
    "infinite-stamp": (f'{{"boot_id": "{BOOT}", "read_to_s": 1e999, "source": "dmesg"}}', "is not an Xid state"),
    "nan-stamp": (f'{{"boot_id": "{BOOT}", "read_to_s": NaN, "source": "dmesg"}}', "is not an Xid state file"),
    "negative-stamp": (f'{{"boot_id": "{BOOT}", "read_to_s": -1, "source": "dmesg"}}', "is not an Xid state"),
    "true-stamp": (f'{{"boot_id": "{BOOT}", "read_to_s": true, "source": "dmesg"}}', "is not an Xid state"),
    "from-the-future": (f'{{"boot_id": "{BOOT}", "read_to_s": 5000, "source": "dmesg"}}',
                        "says 5000 s after boot, later than now (700 s; ignored)"),
    "deep-nesting": ("[" * 3000 + "]" * 3000, "larger than 4096 bytes"),
    "nested-in-bounds": ("[" * 2000 + "]" * 2000, "is not an Xid state file (ignored)"),
    "not-utf8": (b"\xff\xfe{\x00", "(not UTF-8 text)"),
    "a-fifo": (FIFO, "(not a regular file)"),
    "a-directory": (DIRECTORY, "(not a regular file)"),
}


@pytest.mark.parametrize("case", CORRUPT, ids=list(CORRUPT))
def test_a_state_file_that_cannot_be_read_is_ignored_with_a_note(node, case):
    content, note = CORRUPT[case]
    if content == FIFO:
        os.mkfifo(node.state)
    elif content == DIRECTORY:
        node.state.mkdir()
    elif isinstance(content, bytes):
        node.state.write_bytes(content)
    else:
        node.state.write_text(content)
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(600.0, 79))
    assert (code, result["status"]) == (2, "fail")  # judged as if no clean run were known: never hidden
    assert result["reason"].startswith("fatal: Xid 79 on 0000:3b:00; the last clean run is not known: ")
    assert note in result["reason"] and str(node.state) in result["reason"]


def test_a_clean_run_replaces_a_corrupt_state_file(node):
    node.state.write_text("garbage")
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(600.0, 13, text="Graphics Exception"))
    assert (code, result["status"]) == (0, "pass")
    assert json.loads(node.state.read_text()) == {"boot_id": BOOT, "read_to_s": 600.0, "source": "dmesg"}


# ---------------------------------------------------------------- writing the state

def test_the_state_is_written_only_after_a_pass(node):
    node.boot(700.0)
    code, result, _ = node.run(QUIET + xid(600.0, 63, text="Row Remapper: New row marked for remapping"))
    assert (code, result["status"]) == (1, "warn") and not node.state.exists()
    code, result, _ = node.run(QUIET + xid(600.0, 79))
    assert (code, result["status"]) == (2, "fail") and not node.state.exists()
    code, result, _ = node.run(QUIET)
    assert (code, result["status"], result["reason"]) == (0, "pass", "no Xid errors in the kernel log")
    assert json.loads(node.state.read_text()) == {"boot_id": BOOT, "read_to_s": 2.114, "source": "dmesg"}
    left = [p.name for p in node.state_dir.iterdir() if p.name not in ("xid-window.json", "reports")]
    left += [p.name for p in (node.state_dir / "reports").iterdir() if not kept_reports.NAME.fullmatch(p.name)]
    assert not left  # no temporary left (reports/: the node's kept reports, node/kept_reports.py)
    before = node.state.read_text()
    assert node.run(QUIET + xid(600.0, 79))[0] == 2
    assert node.state.read_text() == before


def test_a_missing_state_dir_is_made_private_on_the_first_clean_run(node):
    """It was a note ("No such file or directory") and the clean run was never remembered."""
    state_dir = node.tmp / "no" / "such" / "dir"
    code, result, stderr = node.run(QUIET, GPUCHECK_STATE_DIR=str(state_dir))
    assert (code, result["status"], stderr) == (0, "pass", "")
    assert json.loads((state_dir / "xid-window.json").read_text())["boot_id"] == BOOT
    assert (state_dir.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize(("where", "why"), [("a-file", "Not a directory"), ("state-is-a-directory", "Is a directory"),
                                           ("under-a-file", "Not a directory")])
def test_an_unwritable_state_dir_costs_the_run_nothing_but_a_note(node, where, why):
    state_dir = node.state_dir
    if where == "under-a-file":
        (node.tmp / "plain").write_text("")
        state_dir = node.tmp / "plain" / "dir"
    elif where == "a-file":
        state_dir = node.tmp / "plain-file"
        state_dir.write_text("")
    else:
        node.state.mkdir()
    code, result, stderr = node.run(QUIET, GPUCHECK_STATE_DIR=str(state_dir))
    assert (code, result["status"]) == (0, "pass")
    kept = "" if where == "state-is-a-directory" else (  # the kept reports' folder cannot be made either
        f"gpucheck: note: this report is not kept on the node: cannot write {state_dir}/reports ({why})\n")
    assert stderr == (f"gpucheck: note: this clean run is not remembered: cannot write {state_dir}/xid-window.json "
                      f"({why}); the Xid window falls back to the look-back\n{kept}")


def test_a_log_with_no_stamp_is_not_remembered(node):
    """No time since boot to remember: nothing is written (the next run judges the same lines again)."""
    node.run("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=app, Graphics Exception\n")
    assert not node.state.exists()


# ---------------------------------------------------------------- events without a stamp, since boot, /proc

def test_events_without_a_stamp_are_always_judged(node):
    """dmesg -t style lines cannot be placed in time: judged, and the reason says the window does not apply."""
    row_remap = (REAL / "xid" / "a100-xid63-row-remapper-stas00.txt").read_text()
    code, result, _ = node.run(QUIET + xid(100.0, 79) + row_remap)
    assert (code, result["status"]) == (1, "warn")
    assert result["reason"] == (
        "needs attention: Xid 63 on 0000:10:1c; 1 older event before the window, not judged: Xid 79 on "
        "0000:3b:00 at 100 s after boot; 1 without a time since boot, judged whatever their age (the window "
        "cannot be applied to them)")
    assert result["measured"]["unstamped"] == 1
    code, result, _ = node.run(QUIET + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    assert (code, result["status"]) == (2, "fail")
    assert result["reason"] == ("GPU 0000:3b:00 has fallen off the bus; fatal: Xid 79 on 0000:3b:00; 1 without a "
                                "time since boot, judged whatever their age (the window cannot be applied to them)")


def test_since_boot_judges_everything_and_ignores_the_state(node):
    node.remember(500.0)
    node.boot(200000.0)
    code, result, _ = node.run(QUIET + xid(100.0, 79), "--xid-since", "boot")
    assert (code, result["status"], result["reason"]) == (2, "fail", "fatal: Xid 79 on 0000:3b:00")
    assert result["measured"]["window"]["since"] == "since boot (--xid-since boot)"


def test_without_uptime_or_boot_id_the_window_only_widens(node):
    node.boot(None, boot_id=None)
    node.remember(500.0)
    code, result, _ = node.run(QUIET + xid(100.0, 79))
    assert (code, result["status"]) == (2, "fail")
    proc = node.proc
    assert result["reason"] == (
        f"fatal: Xid 79 on 0000:3b:00; no clean run can be remembered: cannot read "
        f"{proc}/sys/kernel/random/boot_id (No such file or directory); the look-back cannot be applied: cannot "
        f"read {proc}/uptime (No such file or directory)")
    (proc / "uptime").write_text("up for a while\n")
    (proc / "sys/kernel/random/boot_id").write_text("\n")
    code, result, _ = node.run(QUIET)
    assert (code, result["status"]) == (0, "pass")
    assert result["reason"] == (f"no Xid errors in the kernel log; no clean run can be remembered: "
                                f"{proc}/sys/kernel/random/boot_id holds no boot id; the look-back cannot be "
                                f"applied: {proc}/uptime does not say the uptime")
    assert json.loads(node.state.read_text())["read_to_s"] == 500.0  # not overwritten: no boot to tie it to


def test_journalctl_is_asked_for_stamps_since_boot(node, fake_bin):
    """dmesg refused (kernel.dmesg_restrict): journalctl -k -b, asked for short-monotonic stamps; a journal
    in wall-clock time would leave every event judged whatever its age."""
    fake_bin.add("dmesg", "dmesg: read kernel buffer failed: Operation not permitted\n", exit_code=1)
    log = fake_bin.dir / "journal.out"
    log.write_text("[  100.000000] gpu17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    script = fake_bin.dir / "journalctl"
    script.write_text(f'#!/bin/sh\ncase " $* " in *" -o short-monotonic "*) cat \'{log}\';; '
                      f'*) echo "May 18 19:02:39 gpu17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen";; esac\n')
    script.chmod(0o755)
    code, result, _ = node.run(None)
    assert (code, result["status"]) == (0, "pass")
    assert result["measured"]["window"]["source"] == "journalctl"
    assert "1 older event before the window, not judged: Xid 79 on 0000:3b:00 at 100 s after boot" in \
        result["reason"]
    assert json.loads(node.state.read_text())["source"] == "journalctl"


# ---------------------------------------------------------------- the options

@pytest.mark.parametrize(("args", "message"), [
    (["--xid-lookback", "inf"], "argument --xid-lookback: 'inf' is not a number of seconds"),
    (["--xid-lookback", "nan"], "argument --xid-lookback: 'nan' is not a number of seconds"),
    (["--xid-lookback", "-5"], "argument --xid-lookback: must be greater than 0"),
    (["--xid-lookback", "0"], "argument --xid-lookback: must be greater than 0"),
    (["--xid-lookback", "a day"], "argument --xid-lookback: 'a day' is not a number of seconds"),
    (["--xid-lookback", "1e999"], "argument --xid-lookback: must be at most 604800 (one week)"),
    (["--xid-since", "yesterday"], "argument --xid-since: invalid choice: 'yesterday' (choose from 'boot')"),
    (["--xid-since", "boot", "--xid-lookback", "60"],
     "argument --xid-lookback: not allowed with argument --xid-since"),
])
def test_bad_window_options_are_one_line_and_exit_3(node, args, message):
    node.fake_bin.add("dmesg", QUIET)
    done = run_gpucheck(["node", "--profile", "generic", "--only", "gpu.xid", *args], node.env())
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == f"gpucheck: error: {message} (see --help)\n"
    assert not node.state.exists()


# ---------------------------------------------------------------- the log's clock and what cannot be read

def test_time_spent_suspended_never_ages_an_event(node):
    """/proc/uptime counts the 25 h the machine slept, the log's stamps do not: the Xid 79 logged a minute before
    the suspend was judged 25 h old, outside the 24 h window, and the run saved as clean."""
    log = (QUIET + xid(1000.0, 79, "0000:5d:00", "GPU has fallen off the bus.")
           + "[ 1060.000000] PM: suspend entry (deep)\n[ 1060.100000] Timekeeping suspended for 90000.000 seconds\n"
           + "[ 1060.200000] PM: suspend exit\n")
    node.boot(1000.0 + 90000.0 + 100.0)
    code, result, _ = node.run(log)
    assert (code, result["status"]) == (2, "fail"), result["reason"]
    assert "25 h spent suspended (in /proc/uptime, not in the log's stamps) is not counted" in result["reason"]
    assert not node.state.exists()


def test_a_journal_this_user_may_not_read_is_not_a_clean_log(node, fake_bin):
    """As a non-root user: dmesg refused, journalctl printed nothing with exit 0, and gpu.xid said PASS."""
    fake_bin.add("dmesg", "", exit_code=1)
    (fake_bin.dir / "dmesg.out").write_text("")
    fake_bin.add("journalctl", "")
    code, result, _ = node.run(None)
    assert (code, result["status"]) == (3, "error")
    assert "journalctl -k printed nothing (exit 0): this user may not read the journal" in result["reason"]
    assert not node.state.exists()
