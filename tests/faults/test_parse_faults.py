"""Tool output under faults, through the real command line: `gpucheck parse KIND FILE` (JSON, or one line
and exit 3) and the kernel-log collector of `gpucheck node` with a dmesg that prints stray bytes or
something that is not a kernel log. A verdict must hold: no failure figure lost, no "no Xids" read from
a log the parser could not read, nothing claimed that the input cannot know.

Each case runs the agent in its own process (support.run_gpucheck)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from support import REAL, report_of, run_gpucheck

LIMIT_S = 60  # a hang is a failure (subprocess.TimeoutExpired), not a wait
GH200 = (REAL / "nccl-tests" / "gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt").read_text()
GCP = (REAL / "nccl-tests" / "h100-2node-16gpu-allreduce-gcp-a3mega.txt").read_text()
PERFTEST = (REAL / "perftest" / "ib_write_bw-loopback-8M-MBsec-client+server-superbench.txt").read_text()
STORM = (REAL / "xid" / "gpu-xid31-mmu-fault-xid62-then-xid45-storm-chia301.txt").read_text()
FALLEN = (REAL / "xid" / "fallen-off-bus-multiline-NO-xid-open-module-570-nvsentinel155.txt").read_text()


def parse_file(tmp_path: Path, kind: str, data: str | bytes):
    path = tmp_path / f"{kind}.out"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path, run_gpucheck(["parse", kind, str(path)], timeout=LIMIT_S)


def parsed(done) -> dict:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, (done.returncode, done.stderr)
    return json.loads(done.stdout)


def error_line(done) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3, (done.returncode, done.stdout[-500:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def dcgmi_row(name: str, info: str) -> str:
    """One row as dcgmi draws it: "| <name, 25> | <info, 46> |"."""
    return f"| {name:<25} | {info:<46} |"


THERMAL = ("GPU 3 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 3 "
           "Verify that the cooling on this machine is functional.")
DCGMI_ROWS = [dcgmi_row("Diagnostic", "Pass - GPUs: 0, 1, 2"), dcgmi_row("", "Fail - GPU: 3"),
              *(dcgmi_row("Warning" if i == 0 else "", THERMAL[i:i + 45]) for i in range(0, len(THERMAL), 45)),
              dcgmi_row("SM Stress", "Pass - All")]
PCIE_ONLY_TOPO = ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-19\nGPU1\tPIX\t X \t0-19\n\nLegend:\n\n"
                  "  X    = Self\n  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge\n"
                  "  PIX  = Connection traversing at most a single PCIe bridge\n")
SOCKET_LOG = ("node01:1201:1288 [0] NCCL INFO NET/IB : No device found.\n"
              "node01:1201:1288 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>\n"
              "node01:1201:1288 [0] NCCL INFO Using network Socket\n")

# name -> (kind, input, {key: value expected in the JSON})
READ: dict[str, tuple[str, str | bytes, dict]] = {
    # 1. a 40 kB line (a binary dump, a wrapped log) in a capture: read, and the figures are unchanged
    "perftest-40kB-line": ("perftest", PERFTEST + "Device " * 6_000 + "\n" + "a" * 40_000 + "\n",
                           {"bw_avg_Gbps": 192.45376, "device": "ib0", "failed": False}),
    # 2. a later run's "0 OK" footer does not hide the first run's wrong values, nor its average
    "nccl-tests-failed-then-ok": ("nccl-tests", GH200 + GCP,
                                  {"out_of_bounds": 4, "failed": True, "avg_busbw_GBps": 4.79995,
                                   "footers": [{"out_of_bounds": 4, "avg_busbw_GBps": 4.79995},
                                               {"out_of_bounds": 0, "avg_busbw_GBps": 70.742}]}),
    "nccl-tests-footer-on-one-line": ("nccl-tests", GH200.replace("4 FAILED\n", "4 FAILED"),
                                      {"out_of_bounds": 4, "avg_busbw_GBps": 4.79995, "failed": True}),
    # 3. dcgmi: a message cut into 45-character rows, per-GPU result rows, a fragment with no header
    "dcgmi-fragment-wrapped-per-gpu": ("dcgmi", "\n".join(DCGMI_ROWS) + "\n",
                                       {"tests": {"Diagnostic": "fail", "SM Stress": "pass"}, "failed": True,
                                        "details": {"Diagnostic": [f"Warning: {THERMAL}"]}}),
    "dcgmi-fragment-no-borders": ("dcgmi", "\n".join(r.strip("|").strip() for r in DCGMI_ROWS[:2]) + "\n",
                                  {"tests": {"Diagnostic": "fail"}}),
    # 4. `nvidia-smi topo -mp` cannot show NVLink: unknown, not "no NVLink"
    "topo-mp": ("topo", PCIE_ONLY_TOPO, {"nvlink": None, "matrix": "pcie", "gpu_link_types": ["PIX"]}),
    # 5. the network NCCL selected is a transport
    "nccl-debug-socket": ("nccl-debug", SOCKET_LOG, {"transports": ["NET/Socket"], "network": "Socket"}),
    # 6. stray bytes in a kernel log hide no Xid
    "xid-nul-bytes": ("xid", STORM.replace("\n", "\x00\n", 3),
                      {"counts": {"31": 1, "45": 8, "62": 1}, "worst_severity": "fatal", "stray_bytes": 3}),
    "xid-not-utf8": ("xid", b"\xff\xfe" + FALLEN.encode() + b"\xc3(\n",
                     {"fallen_off_bus": ["0000:b3:00"], "worst_severity": "fatal", "stray_bytes": 3}),  # 3 U+FFFD
}

# name -> (kind, input, the error after "gpucheck: error: FILE: ")
REFUSED: dict[str, tuple[str, str | bytes, str]] = {
    "xid-elf-binary": ("xid", b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64 + b"GLIBC_2.2.5\x00",
                       "not xid input: no kernel log lines (dmesg, journalctl, syslog or kmsg)"),
    "nccl-tests-with-nul": ("nccl-tests", GCP.replace("\n", "\x00\n", 1), "not nccl-tests output: binary data"),
    "perftest-empty": ("perftest", "\n\n", "not perftest output: empty input"),
    "dcgmi-rows-with-no-result": ("dcgmi", "| colour | blue |\n| size | large |\n",
                                  "not dcgmi output: no dcgmi diag result table or JSON"),
}


@pytest.mark.parametrize("case", list(READ))
def test_faulty_output_is_read_and_keeps_its_verdict(tmp_path: Path, case: str) -> None:
    kind, data, expected = READ[case]
    _, done = parse_file(tmp_path, kind, data)
    result = parsed(done)
    assert {key: result[key] for key in expected} == expected


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_is_not_the_tools_output_is_one_line(tmp_path: Path, case: str) -> None:
    kind, data, error = REFUSED[case]
    path, done = parse_file(tmp_path, kind, data)
    assert error_line(done) == f"gpucheck: error: {path}: {error}"


# ---------------------------------------------------------------- the kernel-log collector of `gpucheck node`

def fake_tool(directory: Path, name: str, output: bytes, exit_code: int = 0) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.out").write_bytes(output)
    script = directory / name
    script.write_text(f"#!/bin/sh\ncat '{directory / name}.out'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def xid_result(tmp_path: Path, dmesg: bytes, journalctl: bytes = b"", journalctl_exit: int = 1) -> dict:
    """gpu.xid from `gpucheck node --only gpu.xid`, with dmesg and journalctl replaced."""
    tools = tmp_path / "bin"
    fake_tool(tools, "dmesg", dmesg)
    fake_tool(tools, "journalctl", journalctl, journalctl_exit)
    config = tmp_path / "node.yaml"
    config.write_text("profile: generic\n")
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}", "GPUCHECK_CONFIG": str(config)}
    # since boot: the fixtures' stamps (1843 s, 14328 s) would fall before the 24 h look-back on a machine up
    # longer than a day
    done = run_gpucheck(["node", "--only", "gpu.xid", "--xid-since", "boot", "--format", "json"], env,
                        timeout=LIMIT_S)
    assert "Traceback" not in done.stderr, done.stderr
    (result,) = [r for r in report_of(done)["results"] if r["check"] == "gpu.xid"]
    return result


def test_a_nul_in_the_kernel_log_hides_no_xid(tmp_path: Path) -> None:
    # Before: the parser refused the whole log as "binary data" and the collector read that as no Xids.
    result = xid_result(tmp_path, b"[    0.000000] Linux version 6.1.0\x00\n" + FALLEN.encode())
    assert result["status"] == "fail"
    assert result["reason"] == "GPU 0000:b3:00 has fallen off the bus"


def test_a_kernel_log_that_cannot_be_read_is_an_error_with_the_evidence(tmp_path: Path) -> None:
    dmesg = b"\x1b]0;title\x07this is not a kernel log\nnor this\n"
    result = xid_result(tmp_path, dmesg, b"-- journal corrupted --\n", journalctl_exit=0)
    assert result["status"] == "error"
    assert result["reason"] == (
        "cannot read the kernel log: dmesg: output not readable as a kernel log: not xid input: no kernel log "
        "lines (dmesg, journalctl, syslog or kmsg); journalctl: output not readable as a kernel log: not xid "
        "input: no kernel log lines (dmesg, journalctl, syslog or kmsg)")
    assert "$ dmesg\n\\x1b]0;title\\x07this is not a kernel log\nnor this" in result["evidence"]
    assert "$ journalctl -k -b --no-pager -q -o short-monotonic\n-- journal corrupted --" in result["evidence"]


def test_journalctl_is_read_when_dmesg_output_cannot_be(tmp_path: Path) -> None:
    result = xid_result(tmp_path, b"not a kernel log\n", STORM.encode(), journalctl_exit=0)
    assert result["status"] == "fail" and result["measured"]["counts"] == {"31": 1, "45": 8, "62": 1}


def test_an_empty_ring_buffer_has_no_xids(tmp_path: Path) -> None:
    result = xid_result(tmp_path, b"")
    assert (result["status"], result["reason"]) == ("pass", "no Xid errors in the kernel log")


BLANKS = " " * 400_000  # a long run of blanks inside one line: where a lazy `.*?\s*$` goes quadratic
# kind -> one hostile line (400 KB) shaped as that tool's lines start; parse xid took 110 s on a 200 KB one,
# parse ibstat 16 s on 120 KB. Each must end well inside LIMIT_S (a hang guard, not a speed test: bench/ has those).
HOSTILE_LINES = {
    "xid": "[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, a" + BLANKS + "x\n",
    "ibstat": "CA 'mlx5_0'\n\tPort 1:\n\t\tState: a" + BLANKS + "x\n",
    "horovod-build": "Available Frameworks:\n    [X] a" + BLANKS + "x\n",
    "ldconfig": "1 libs found in cache `/etc/ld.so.cache'\n\tlibnccl.so.2 (libc6,x86-64) => /a" + BLANKS + "x\n",
    "nccl-tests": "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1b] a" + BLANKS + "x\n",
}


@pytest.mark.parametrize("kind", list(HOSTILE_LINES))
def test_one_long_hostile_line_is_read_in_linear_time(tmp_path: Path, kind: str) -> None:
    path, done = parse_file(tmp_path, kind, HOSTILE_LINES[kind])  # subprocess.TimeoutExpired at LIMIT_S: a hang
    assert "Traceback" not in done.stderr and done.returncode in (0, 3), done.stderr[-500:]
