"""Kernel log Xid events: the values SOURCES.md lists, then log formats and severities."""

from __future__ import annotations

import pytest

from gpucheck.parsers import ParseError, parse
from gpucheck.parsers.xid import SEVERITY
from support import REAL


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def xid(text: str) -> dict:
    return parse("xid", text)


def test_single_xid63_line_without_timestamp() -> None:
    r = xid(real("xid/a100-xid63-row-remapper-stas00.txt"))
    assert r["events"] == [{
        "xid": 63, "pci": "0000:10:1c", "pid": 1896, "process": None,
        "message": "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "severity": "warn", "timestamp": None, "uptime_s": None,
    }]
    assert r["counts"] == {"63": 1} and r["fallen_off_bus"] == []


def test_mmu_fault_then_microcontroller_halt_then_preemption_storm() -> None:
    r = xid(real("xid/gpu-xid31-mmu-fault-xid62-then-xid45-storm-chia301.txt"))
    assert r["counts"] == {"31": 1, "45": 8, "62": 1}
    assert {e["pci"] for e in r["events"]} == {"0000:0a:00"}
    first, second = r["events"][:2]
    assert (first["pid"], first["process"], first["timestamp"], first["severity"]) == (
        13332, "cuda_plot_k32_v", "14328.198504", "info")
    assert "FAULT_PRIV_VIOLATION" in first["message"]
    assert (second["xid"], second["pid"], second["severity"]) == (62, None, "fatal")  # pid='<unknown>'
    assert {e["severity"] for e in r["events"] if e["xid"] == 45} == {"info"}
    assert r["worst_severity"] == "fatal"
    assert len(r["events"]) == 10  # "sched: RT throttling activated" is not an event


def test_fallen_off_the_bus_without_xid_wrapped_over_three_lines() -> None:
    r = xid(real("xid/fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt"))
    assert r["events"] == [] and r["counts"] == {}
    assert r["fallen_off_bus"] == ["0000:b3:00"]  # not the "10de:26b5" PCI vendor:device id
    assert r["worst_severity"] == "fatal"


def test_blackwell_nvlink_severity_comes_from_the_line() -> None:
    r = xid(real("xid/gb200-xid149-xid145-xid144-nvlink-kmsg-no-timestamp-gpud1174-1160.txt"))
    assert r["counts"] == {"144": 1, "145": 1, "149": 3}
    assert [(e["xid"], e["pci"], e["severity"]) for e in r["events"]] == [
        (149, "0019:01:00", "fatal"), (149, "0000:00:00", "fatal"), (145, "0018:01:00", "warn"),
        (144, "0000:01:00", "warn"), (149, "0000:00:00", "fatal")]
    assert r["events"][0]["message"].startswith("NETIR Fatal XC0 i0 Link -1 (0x000fe406")
    assert all(e["timestamp"] is None for e in r["events"])


def test_the_table_is_used_when_the_line_has_no_word() -> None:
    # Same NVLink code, no Fatal/Nonfatal word after the unit: the table's default.
    line = "NVRM: Xid (PCI:0000:01:00): {code}, {text}\n"
    assert xid(line.format(code=149, text="NETIR XC0 i0 Link 2"))["events"][0]["severity"] == SEVERITY[149]


@pytest.mark.parametrize(("code", "text", "severity"), [
    (13, "pid=4242, name=fatal, Graphics Exception: ESR 0x405840=0x3f", "info"),  # failed the node before
    (48, "pid=4242, name=nonfatal, An uncorrectable double bit error (DBE) has been detected", "fatal"),  # warn before
    (13, "pid=1, name=python, Graphics Exception Fatal", "info"),
    (79, "pid=1, name=Nonfatal, GPU has fallen off the bus.", "fatal"),
    (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13, pid=7, name=Fatal", "warn"),  # NVIDIA's word, not the name
    (149, "NETIR XC0 i0 Link 2 pid=7, name=Fatal", SEVERITY[149]),
])
def test_severity_comes_from_the_code_never_from_a_process_name(code: int, text: str, severity: str) -> None:
    line = f"[  12.5] NVRM: Xid (PCI:0000:3b:00): {code}, {text}\n"
    assert xid(line)["events"][0]["severity"] == severity


@pytest.mark.parametrize(("code", "severity"), [
    (13, "info"), (31, "info"), (43, "info"), (45, "info"), (48, "fatal"), (61, "fatal"), (62, "fatal"),
    (63, "warn"), (64, "fatal"), (74, "fatal"), (79, "fatal"), (92, "warn"), (94, "warn"), (95, "fatal"),
    (119, "fatal"), (120, "fatal"), (999, "warn"),
])
def test_severity_table(code: int, severity: str) -> None:
    r = xid(f"[  12.5] NVRM: Xid (PCI:0000:3b:00): {code}, pid=77, name=python, something happened\n")
    assert r["events"][0]["severity"] == severity


JOURNAL = """\
-- Logs begin at Mon 2024-05-13 08:00:01 UTC, end at Sat 2024-05-18 19:05:00 UTC. --
May 18 19:02:39 gpu-node-17 kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
May 18 19:02:39 gpu-node-17 kernel: NVRM: Xid (PCI:0000:2B:00): 79, pid='<unknown>', name=<unknown>, \
GPU has fallen off the bus.
May 18 19:02:39 gpu-node-17 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
May 18 19:02:40 gpu-node-17 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User \
Channel (0x9). RST: No, D-RST: No
May 18 19:02:41 gpu-node-17 kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 \
(None) to 0x1 (GPU Reset Required)
May 18 19:03:41 gpu-node-17 kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 \
(GPU Reset Required) to 0x0 (None)
"""


def test_journalctl_with_mig_instance_recovery_action_and_fallen_gpu() -> None:
    r = xid(JOURNAL.replace("\n", "\r\n"))
    assert [(e["xid"], e["pci"], e["severity"]) for e in r["events"]] == [
        (79, "0000:2b:00", "fatal"), (94, "0000:01:00", "warn"), (154, "0000:01:00", "fatal"),
        (154, "0000:01:00", "info")]
    assert r["events"][0]["timestamp"] == "May 18 19:02:39"
    assert r["events"][1]["pid"] == 7194
    assert r["fallen_off_bus"] == ["0000:2b:00"]  # the Xid 79 and the plain report name the same GPU
    assert r["counts"] == {"79": 1, "94": 1, "154": 2}


@pytest.mark.parametrize(("line", "timestamp"), [
    ("[Sat May 18 19:02:39 2024] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error)",
     "Sat May 18 19:02:39 2024"),
    ("6,10423,3392810457,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error)", "3392810457"),
    ("2024-05-18T19:02:39+0000 gpu17 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE", "2024-05-18T19:02:39+0000"),
    ("node03: [ 1843.3] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error)", "1843.3"),
], ids=["dmesg-T", "kmsg", "journal-iso", "pdsh-dmesg"])
def test_timestamps_as_written(line: str, timestamp: str) -> None:
    (event,) = xid(line + "\n")["events"]
    assert (event["xid"], event["pci"], event["timestamp"]) == (48, "0000:3b:00", timestamp)


@pytest.mark.parametrize(("line", "uptime"), [
    ("[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", 1843.308145),
    ("[    0.500000] gpu17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", 0.5),
    ("6,10423,3392810457,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", 3392.810457),
    ("node03: [ 1843.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", 1843.3),
    ("May 18 19:02:39 gpu17 kernel: [  77.25] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", 77.25),
    ("[Sat May 18 19:02:39 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None),
    ("May 18 19:02:39 gpu17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None),
    (f"[{'9' * 13}.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None),
    (f"6,1,{'9' * 19},-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None),
], ids=["dmesg", "journalctl-short-monotonic", "kmsg-microseconds", "pdsh-dmesg", "syslog-with-kernel-stamp",
        "dmesg-T-wall-clock", "syslog-wall-clock", "no-stamp", "too-many-digits", "kmsg-too-many-digits"])
def test_each_event_carries_its_time_since_boot(line: str, uptime: float | None) -> None:
    """The Xid window compares these with /proc/uptime: only a stamp counted from boot is one; a wall clock
    (dmesg -T, syslog) is not, and a number too long to be a stamp is none (never infinity)."""
    r = xid(line + "\n")
    (event,) = r["events"]
    assert event["uptime_s"] == uptime
    assert r["fallen_reports"] == [{"pci": "0000:3b:00", "timestamp": event["timestamp"], "uptime_s": uptime}]
    assert r["last_uptime_s"] == uptime


def test_the_log_reaches_its_last_stamp_and_fallen_reports_keep_theirs() -> None:
    r = xid(real("xid/fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt"))
    assert r["fallen_reports"] == [{"pci": "0000:b3:00", "timestamp": "1843.308145", "uptime_s": 1843.308145}]
    assert r["last_uptime_s"] == 1843.439669  # the probe failure after it, though no Xid: read up to there
    storm = xid(real(STORM))
    assert [e["uptime_s"] for e in storm["events"]][:3] == [14328.198504, 14370.687545, 14370.688139]
    assert storm["last_uptime_s"] == 14397.322674
    # a message that quotes a stamp-like text is not the line's stamp
    quoted = xid("[  10.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=app, dump [ 99999.0]\n")
    assert quoted["events"][0]["uptime_s"] == 10.0 and quoted["last_uptime_s"] == 10.0
    assert xid(real("xid/gb200-xid149-xid145-xid144-nvlink-kmsg-no-timestamp-gpud1174-1160.txt"))[
        "last_uptime_s"] is None


def test_healthy_kernel_log_has_no_events() -> None:
    r = xid("[    0.000000] Linux version 6.1.0-18-amd64\n[    3.2] nvidia: loading out-of-tree module\n")
    assert r == {"events": [], "counts": {}, "fallen_off_bus": [], "fallen_reports": [], "last_uptime_s": 3.2,
                 "worst_severity": None, "suspended_s": 0.0, "stray_bytes": 0}


def test_iso_8601_stamps_are_read_with_their_time() -> None:
    """As some distributions and log shippers print the kernel log: the Xid was read, its time was not."""
    r = xid("kern: warning: [2026-04-22T21:26:20.599Z]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=app, "
            "GPU has fallen off the bus.\n")
    assert [(e["xid"], e["timestamp"], e["uptime_s"]) for e in r["events"]] == [(79, "2026-04-22T21:26:20.599Z", None)]
    quiet = xid("kern  :info  : [2026-04-22T21:26:20,599012+00:00] Linux version 6.1.0-18-amd64\n")
    assert quiet["events"] == []  # a kernel log with no Xid, not "not a kernel log"


def test_the_time_spent_suspended_is_added_up() -> None:
    r = xid("[ 1000.5] PM: suspend entry (deep)\n[ 1000.6] Timekeeping suspended for 90000.250 seconds\n"
            "[ 1000.7] PM: suspend exit\n[ 2000.0] Suspended for 12.5 seconds\n")
    assert r["suspended_s"] == 90012.75 and r["last_uptime_s"] == 2000.0


def test_log_cut_mid_line_keeps_the_complete_events() -> None:
    text = real("xid/gpu-xid31-mmu-fault-xid62-then-xid45-storm-chia301.txt")
    r = xid(text[: text.index("Ch 0000000f") - 40])
    assert r["counts"] == {"31": 1, "45": 7, "62": 1}


STORM = "xid/gpu-xid31-mmu-fault-xid62-then-xid45-storm-chia301.txt"


@pytest.mark.parametrize("junk", ["\x00", "\x00" * 64, "\x1b\x01\x7f\x9c", "\ufffd\ufffd"],
                         ids=["one-nul", "nul-run", "control-bytes", "not-utf8"])
def test_stray_bytes_in_the_kernel_log_hide_no_xid(junk: str) -> None:
    text = real(STORM)
    lines = text.splitlines(keepends=True)
    # Between two records, and inside the Xid 62 record itself.
    middle = len(lines) // 2
    dirty = "".join(lines[:middle]) + junk + "".join(lines[middle:])
    dirty = dirty.replace("NVRM: Xid (PCI:0000:0a:00): 62", "NVRM: Xid (PCI:0000:0a:00): 62" + junk, 1)
    r = xid(dirty)
    assert r["counts"] == {"31": 1, "45": 8, "62": 1}
    assert r["worst_severity"] == "fatal" and r["stray_bytes"] == 2 * len(junk)


def test_a_binary_file_is_still_not_a_kernel_log() -> None:
    with pytest.raises(ParseError, match="no kernel log lines"):
        xid("\x7fELF\x02\x01\x01\x00" + "\x00" * 64 + "GLIBC_2.2.5\x00libc.so.6\x00")
