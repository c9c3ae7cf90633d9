"""The watcher's kernel log: /dev/kmsg itself (this machine's, read as the watcher reads it: a marker of our own
written there, at debug priority, and nothing else), and a text file followed across rotation and truncation;
both resumed from a saved cursor without reading an old line again."""

from __future__ import annotations

import os
import uuid

import pytest

from gpucheck.watch.kernel_source import KMSG, KernelLog, SourceError

BOOT = "boot-1"


def record(seq: int, message: str, usec: int = 1_234_567) -> str:
    return f"3,{seq},{usec},-;{message}\n"


def test_a_file_is_followed_from_its_end_and_a_half_written_line_waits(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(record(1, "NVRM: Xid (PCI:0000:18:00): 79, old"))
    follower = KernelLog(str(log), BOOT)
    assert follower.read_new() == []  # the first start judges what comes from now on
    with log.open("a") as fh:
        fh.write(record(2, "NVRM: Xid (PCI:0000:18:00): 48, new") + "3,3,99,-;NVRM: half")
    assert follower.read_new() == [record(2, "NVRM: Xid (PCI:0000:18:00): 48, new").rstrip("\n")]
    with log.open("a") as fh:
        fh.write(" written\n")
    assert follower.read_new() == ["3,3,99,-;NVRM: half written"]
    assert follower.read_new() == []


def test_rotation_reads_the_rest_of_the_old_file_then_the_new_one_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = KernelLog(str(log), BOOT)
    follower.read_new()
    with log.open("a") as fh:
        fh.write("last line of the old file\n")
    log.rename(tmp_path / "kern.log.1")
    log.write_text("first line of the new file\n")
    assert follower.read_new() == ["last line of the old file", "first line of the new file"]
    assert any("rotated" in note for note in follower.notes)


def test_a_file_cut_shorter_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("a long line that was there before the cut\n")
    follower = KernelLog(str(log), BOOT)
    follower.read_new()
    log.write_text("new\n")  # `> kern.log` and one line: shorter than where reading stood
    assert follower.read_new() == ["new"]
    assert any("cut shorter" in note for note in follower.notes)


def test_a_restart_resumes_at_its_cursor_and_a_cursor_of_another_file_reads_it_whole(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("seen before the restart\n")
    first = KernelLog(str(log), BOOT)
    assert first.read_new() == []  # stands at the end
    with log.open("a") as fh:
        fh.write("logged while the watcher was down\n")
    again = KernelLog(str(log), BOOT, first.state())
    assert again.read_new() == ["logged while the watcher was down"]
    other = tmp_path / "other.log"
    other.write_text("a file the cursor is not of\n")
    assert KernelLog(str(other), BOOT, {**first.state(), "source": str(other)}).read_new() == [
        "a file the cursor is not of"]


def test_what_is_not_a_log_is_one_line(tmp_path):
    with pytest.raises(SourceError, match="cannot open the kernel log .*No such file"):
        KernelLog(str(tmp_path / "none"), BOOT).open()
    with pytest.raises(SourceError, match="neither /dev/kmsg nor a log file"):
        KernelLog(str(tmp_path), BOOT).open()


kmsg_writable = pytest.mark.skipif(not os.access(KMSG, os.R_OK | os.W_OK), reason="needs root's /dev/kmsg")


def kmsg_marker(text: str) -> None:
    with open(KMSG, "w") as fh:  # "<7>": debug priority, as quiet as the kernel log has
        fh.write(f"<7>gpucheck-test: {text}\n")


@kmsg_writable
def test_dev_kmsg_gives_only_new_records_and_resumes_after_its_sequence_number():
    marker = uuid.uuid4().hex
    follower = KernelLog(KMSG, BOOT)
    follower.open()
    assert follower.waitable is not None  # select() can wait on the device
    kmsg_marker(f"{marker} one")
    ours = [line for line in follower.read_new() if marker in line]
    assert len(ours) == 1 and ours[0].split(";", 1)[1].startswith("gpucheck-test:")
    saved = follower.state()
    follower.close()
    kmsg_marker(f"{marker} two")
    kmsg_marker(f"{marker} three")
    resumed = KernelLog(KMSG, BOOT, saved)
    ours = [line.split(";", 1)[1] for line in resumed.read_new() if marker in line]
    assert ours == [f"gpucheck-test: {marker} two", f"gpucheck-test: {marker} three"]  # "one" not again
    resumed.close()
    another_boot = KernelLog(KMSG, "boot-2", saved)  # a reboot: this boot's records are all new
    assert any(f"{marker} one" in line for line in another_boot.read_new())
    another_boot.close()
