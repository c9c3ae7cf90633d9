"""`build` and `demo` say the playbook's task output is in a log: it is, all of it, line by line as it comes,
while the terminal shows the plays, the failures that count and the recap. Needs neither root nor a lab:
ansible-playbook runs against this machine over its local connection."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from lab import config, playbook

# What ansible-core 2.19 prints (the repository's ansible.cfg: yaml results) for a play with an ignored failure,
# a task that passes and one that fails.
OUTPUT = """\

PLAY [Preflight] ***************************************************************

TASK [preflight : Probe something optional] ************************************
[ERROR]: Task failed: Module failed: non-zero return code
fatal: [node01]: FAILED! =>
    msg: non-zero return code
...ignoring

TASK [preflight : Check the OS] ************************************************
ok: [node01]

TASK [gpu : Install the driver] ************************************************
changed: [node02]
fatal: [node01]: FAILED! =>
    msg: 'No package matching ''nvidia-driver'' is available'

PLAY RECAP *********************************************************************
node01                     : ok=2    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=1
node02                     : ok=3    changed=1    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
"""


def test_the_terminal_shows_plays_failures_that_count_and_the_recap() -> None:
    shown = "".join(playbook.shown(OUTPUT.splitlines(keepends=True)))
    assert shown == """\
PLAY [Preflight] ***************************************************************
TASK [gpu : Install the driver] ************************************************
changed: [node02]
fatal: [node01]: FAILED! =>
    msg: 'No package matching ''nvidia-driver'' is available'
PLAY RECAP *********************************************************************
node01                     : ok=2    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=1
node02                     : ok=3    changed=1    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
"""


def test_the_command_is_ansible_playbook_on_the_lab_inventory_with_the_extra_vars() -> None:
    cmd = playbook.playbook_command(config.DEFAULT_PLAYBOOK, {"gpucheck_validate_fail": False})
    assert Path(cmd[0]).name == "ansible-playbook"
    assert cmd[1:] == ["-i", str(config.INVENTORY), str(config.DEFAULT_PLAYBOOK), "--extra-vars",
                       '{"gpucheck_validate_fail": false}']


def test_a_real_playbook_run_puts_every_task_in_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    book = tmp_path / "site.yml"
    book.write_text("- name: A tiny play\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - name: An optional probe that fails\n      ansible.builtin.command: 'false'\n"
                    "      ignore_errors: true\n"
                    "    - name: Say what the task found\n      ansible.builtin.debug: {msg: the task output}\n")
    monkeypatch.setattr(config, "INVENTORY", inventory)
    terminal, log = io.StringIO(), tmp_path / "playbook.log"
    assert playbook.run_playbook(book, log, terminal=terminal) == 0
    kept = log.read_text()
    for line in ("TASK [An optional probe that fails]", "...ignoring", "TASK [Say what the task found]",
                 "the task output", "PLAY RECAP"):
        assert line in kept, kept
    said = terminal.getvalue()
    assert "PLAY [A tiny play]" in said and "ok=2" in said and "ignored=1" in said
    assert "TASK [" not in said and "the task output" not in said, said


def test_each_line_is_in_the_log_before_the_next_one_comes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in ansible-playbook that prints a line, then waits until the log holds it: a log written in
    # blocks (or only at the end) leaves it waiting, and it exits 1
    fake = tmp_path / "ansible-playbook"
    fake.write_text("#!/bin/sh\necho 'TASK [first] ***'\necho 'ok: [node01]'\n"
                    "for i in $(seq 100); do grep -q 'ok: \\[node01\\]' \"$LAB_TEST_LOG\" && exit 0; sleep 0.05; done\n"
                    "exit 1\n")
    fake.chmod(0o755)
    log = tmp_path / "playbook.log"
    monkeypatch.setattr(playbook, "ansible_playbook", lambda: str(fake))
    monkeypatch.setenv("LAB_TEST_LOG", str(log))
    assert playbook.run_playbook(tmp_path / "site.yml", log, terminal=io.StringIO()) == 0
    assert log.read_text() == "TASK [first] ***\nok: [node01]\n"


def test_a_quiet_task_is_said_to_be_running_with_its_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that says nothing for long (Horovod compiling) gets a line on the terminal each heartbeat: a stand-in
    ansible-playbook starts a task, then waits, silent, until the terminal (a file here) says it is running."""
    terminal_file = tmp_path / "terminal.txt"
    fake = tmp_path / "ansible-playbook"
    fake.write_text("#!/bin/sh\necho 'PLAY [Frameworks] ***'\necho 'TASK [frameworks : Build Horovod] ***'\n"
                    "for i in $(seq 200); do\n  grep -q 'still running' \"$LAB_TEST_TERMINAL\" && exit 0; sleep 0.05\n"
                    "done\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(playbook, "ansible_playbook", lambda: str(fake))
    monkeypatch.setenv("LAB_TEST_TERMINAL", str(terminal_file))
    log = tmp_path / "playbook.log"
    with open(terminal_file, "w", buffering=1) as terminal:
        assert playbook.run_playbook(tmp_path / "site.yml", log, terminal=terminal, heartbeat_s=0.3) == 0
    said = terminal_file.read_text().splitlines()
    assert said[0] == "    PLAY [Frameworks] ***"
    assert said[1].startswith("    ... still running TASK [frameworks : Build Horovod]: ") and " s on it, " in said[1]
    assert said[1].endswith(f" in all (every line: tail -f {log})")
    assert "still running" not in log.read_text()  # the log is Ansible's own output
