"""`gpucheck cluster` under faults, run as a user runs it (the real command line in a subprocess) against
a real sshd on 127.0.0.1 (tests/cluster's LoopbackSshd; each simulated host is one of its ports, its
agent a script the test controls). Every scenario checks the exit code, the node named and the
message, that the run ended with every report file written and complete (nothing left "pending"),
and that no traceback reached the terminal. Nothing here touches any address but 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster_helpers import (  # noqa: E402
    ROOT,
    LoopbackSshd,
    free_port,
    node_report,
    run_cluster,
    running_sshd,
    write_inventory,
)

from gpucheck.report.cluster import FILES  # noqa: E402

STAGES = ("--stages", "consistency,stragglers")  # fake agents on one machine: no network/MPI/training stages


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    with running_sshd(tmp_path_factory.mktemp("sshd"), ports=4) as server:
        yield server


def healthy(sshd: LoopbackSshd, count: int) -> dict[str, dict[str, Any]]:
    hosts = {}
    for i, port in enumerate(sshd.ports[:count], 1):
        sshd.report(port, node_report(f"node{i:02d}"))
        hosts[f"node{i:02d}"] = {"ansible_port": port}
    return hosts


def cluster(sshd: LoopbackSshd, tmp_path: Path, hosts: dict[str, dict[str, Any]], *extra: str,
            timeout: float = 120) -> tuple[subprocess.CompletedProcess, Path]:
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    report = tmp_path / "report"
    done = run_cluster(["-i", str(inventory), "--remote-command", str(sshd.agent), "--report", str(report), *extra],
                       timeout=timeout, cwd=tmp_path)
    return done, report


def strict_json(text: str) -> Any:
    """JSON as any other language reads it: NaN and Infinity are not JSON."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def complete(report: Path, done: subprocess.CompletedProcess, interrupted: bool = False) -> dict[str, Any]:
    """Every report file is there, parses, and says the run ended; nothing on stderr is a traceback."""
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    assert sorted(p.name for p in report.iterdir()) == sorted([*FILES, "nodes"])
    doc = strict_json((report / "report.json").read_text())
    assert doc["complete"] is (not interrupted) and doc["interrupted"] is interrupted
    assert doc["exit_code"] == done.returncode
    ET.parse(report / "junit.xml")
    for name in FILES:
        text = (report / name).read_text()
        assert "pending" not in text.lower(), f"{name} still says pending"
    if not interrupted:
        assert "Incomplete" not in (report / "report.md").read_text()
        assert "Incomplete" not in (report / "report.html").read_text()
    files = {entry["file"] for entry in doc["nodes"].values()}
    assert len(files) == len(doc["nodes"])  # one file per node, none shared
    written = {f"nodes/{p.name}" for p in (report / "nodes").iterdir()}
    assert written == ({f for f in files if (report / f).exists()} if interrupted else files)
    assert not list(report.glob(".*")) and not list((report / "nodes").glob(".*")), "temporary files left"
    return doc


def refused(done: subprocess.CompletedProcess, message: str, tmp_path: Path) -> None:
    """Bad input: one line on stderr, exit 3, nothing checked, no report directory."""
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith("gpucheck: error: "), done.stderr
    assert message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "report").exists()


# ---------------------------------------------------------------- a node's report that is not one


def malformed(**changes: Any) -> dict[str, Any]:
    report = node_report("node02")
    for key, value in changes.items():
        report[key] = value
    return report


def without_check() -> dict[str, Any]:
    report = node_report("node02")
    del report["results"][1]["check"]
    return report


@pytest.mark.parametrize(("report", "exit_code", "problem"), [
    (without_check(), 0, "results[1] has no 'check'"),
    (malformed(facts=["driver", "535"]), 0, "facts is a list, not a mapping"),
    (malformed(results=["gpu.count pass", 7]), 0, "results[0] is a string, not a mapping"),
    (malformed(exit_code="0"), 0, "exit_code is a string ('0'), not 0, 1, 2 or 3"),
    (malformed(exit_code=0, results=[{"check": "gpu.ecc", "status": "fail"}]), 0,
     "exit_code 0 but its results say 2"),
    (malformed(results=[{"check": "gpu.count", "status": "great"}]), 0,
     "results[0].status is 'great', not one of pass, warn, fail, skip, error"),
    (malformed(facts={"libraries": ["nccl"]}), 0, "facts.libraries is a list, not a mapping"),
], ids=["no-check", "facts-list", "result-strings", "exit-code-string", "exit-code-lies", "odd-status",
        "libraries-list"])
def test_a_malformed_node_report_is_that_nodes_error(sshd: LoopbackSshd, tmp_path: Path, report, exit_code,
                                                     problem) -> None:
    hosts = healthy(sshd, 3)
    path = sshd.agent_dir / f"odd-{sshd.ports[1]}.json"
    path.write_text(json.dumps(report))
    sshd.behave(sshd.ports[1], f"cat '{path}'\nexit {exit_code}\n")
    done, out = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3, done.stdout + done.stderr  # node02 could not be checked; nothing failed
    doc = complete(out, done)
    node02 = doc["nodes"]["node02"]
    assert (node02["status"], node02["kind"]) == ("error", "malformed")
    assert node02["reason"] == f"agent report malformed: {problem}"
    assert node02["report"] is None and node02["evidence"]  # what it printed is kept as evidence
    assert [doc["nodes"][n]["status"] for n in ("node01", "node03")] == ["pass", "pass"]
    assert f"ERROR   node02: agent report malformed: {problem}" in done.stdout
    assert (out / "drain.txt").read_text() == ""  # a report we cannot read is our problem, not the node's


def test_odd_values_in_a_valid_report_still_render(sshd: LoopbackSshd, tmp_path: Path) -> None:
    """NaN measurements, terminal escapes and NUL in evidence, markup in reasons: every file stays valid."""
    hosts = healthy(sshd, 2)
    report = node_report("node02", measured={"bw.nccl_allreduce": float("nan"), "bw.h2d": float("inf")})
    report["results"][0].update(status="warn", reason="| pipe <b>bold</b> \x1b[31mred\x1b[0m",
                                evidence="\x1b[1mTraceback-free\x00 \x07 text\r\nline two")
    report["exit_code"] = 1
    report["counts"] = {"warn": 1, "pass": 3}
    sshd.report(sshd.ports[1], report)  # json.dumps writes NaN/Infinity, as the agent would
    done, out = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = complete(out, done)
    measured = {r["check"]: r["measured"] for r in doc["nodes"]["node02"]["report"]["results"]}
    assert measured["bw.nccl_allreduce"] == "nan" and measured["bw.h2d"] == "inf"
    case = ET.parse(out / "junit.xml").getroot().find("testsuite[@hostname='node02']/testcase[@name='gpu.count']")
    assert case.find("failure").get("type") == "warn"
    assert "<b>bold</b>" not in (out / "report.html").read_text()


# ---------------------------------------------------------------- output that must not sink the controller


MEASURE = """import resource, subprocess, sys
done = subprocess.run(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(done.returncode)
"""


def measured_cluster(sshd: LoopbackSshd, tmp_path: Path, hosts: dict[str, dict[str, Any]],
                     *extra: str) -> tuple[subprocess.CompletedProcess, Path, float, float]:
    """The run, its peak memory (MiB) and its time (s)."""
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    report, rss = tmp_path / "report", tmp_path / "rss"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MEASURE, str(rss), sys.executable, "-m", "gpucheck", "cluster",
                           "-i", str(inventory), "--remote-command", str(sshd.agent), "--report", str(report),
                           *STAGES, *extra], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    return done, report, int(rss.read_text()) / 1024, time.monotonic() - began


def test_many_lines_starting_with_a_brace_cost_linear_memory(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    noise = sshd.agent_dir / "braces.txt"
    line = "{" + '"log": "' + "x" * 480 + '"} trailing\n'  # each line starts with {, none is the report
    noise.write_text(line * 2048)  # 1 MiB: a candidate per line
    report = sshd.agent_dir / "after-braces.json"
    report.write_text(json.dumps(node_report("node02"), indent=2))
    sshd.behave(sshd.ports[1], f"cat '{noise}' '{report}'\n")
    done, out, peak_mib, elapsed = measured_cluster(sshd, tmp_path, hosts)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = complete(out, done)
    assert doc["nodes"]["node02"]["status"] == "pass"  # the report after the noise is still found
    assert peak_mib < 400, f"the controller peaked at {peak_mib:.0f} MiB for 1 MiB of node output"
    assert elapsed < 60


def test_a_flood_of_output_is_bounded_and_the_report_at_its_end_still_read(sshd: LoopbackSshd,
                                                                          tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    report = sshd.agent_dir / "after-flood.json"
    report.write_text(json.dumps(node_report("node02")))
    # 64 MiB of log on stdout and 8 MiB on stderr before the report
    sshd.behave(sshd.ports[1], "head -c 8388608 /dev/zero | tr '\\0' e >&2\n"
                               "head -c 67108864 /dev/zero | tr '\\0' 'x' | fold -w 1023; echo\n"
                               f"cat '{report}'\n")
    done, out, peak_mib, elapsed = measured_cluster(sshd, tmp_path, hosts, "--host-timeout", "90")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = complete(out, done)
    assert doc["nodes"]["node02"]["status"] == "pass"
    assert peak_mib < 400, f"the controller peaked at {peak_mib:.0f} MiB for 72 MiB of node output"
    assert elapsed < 90


def test_deeply_nested_output_is_a_crashed_agent_not_a_crashed_run(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    sshd.behave(sshd.ports[1], "python3 -c 'print(\"{\\\"a\\\": \" + \"[\" * 200000)'\nexit 2\n")
    done, out = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3, done.stdout + done.stderr
    doc = complete(out, done)
    node02 = doc["nodes"]["node02"]
    assert (node02["status"], node02["kind"]) == ("error", "agent-crashed")
    assert node02["reason"].startswith("agent crashed: exit 2 and no JSON report")


# ---------------------------------------------------------------- signals


def test_sigterm_writes_the_final_report_like_ctrl_c(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    sshd.hang(sshd.ports[1])
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    out = tmp_path / "report"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
    proc = subprocess.Popen([sys.executable, "-m", "gpucheck", "cluster", "-i", str(inventory), "--remote-command",
                             str(sshd.agent), "--report", str(out), "--host-timeout", "120", *STAGES],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (out / "nodes" / "node01.json").exists() or not sshd.hung_pids():
        assert time.monotonic() < deadline and proc.poll() is None, "the run did not get going"
        time.sleep(0.1)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - began < 10
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 3, stdout + stderr
    assert stderr.strip().splitlines()[-1] == "gpucheck: terminated (SIGTERM)"
    doc = complete(out, done, interrupted=True)
    assert doc["nodes"]["node01"]["status"] == "pass"
    node02 = doc["nodes"]["node02"]
    assert (node02["status"], node02["reason"]) == ("error", "not checked: the run was interrupted")
    assert "verdict: COULD NOT CHECK EVERYTHING — exit 3" in stdout


# ---------------------------------------------------------------- inventory names and secrets


def test_host_names_that_make_the_same_file_name_get_their_own_files(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = {}
    for i, name in enumerate(("n/1", "n_1", "n%1"), 0):
        sshd.report(sshd.ports[i], node_report(name))
        hosts[name] = {"ansible_port": sshd.ports[i]}
    done, out = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = complete(out, done)
    assert doc["nodes"]["n_1"]["file"] == "nodes/n_1.json"
    for name in hosts:
        saved = json.loads((out / doc["nodes"][name]["file"]).read_text())
        assert saved["host"] == name and saved["report"]["host"] == name


@pytest.mark.parametrize(("name", "shown"), [("node 01", "'node 01'"), ("node01\nnode99", "'node01\\nnode99'"),
                                             ("node\t01", "'node\\t01'")], ids=["space", "newline", "tab"])
def test_a_host_name_with_whitespace_is_refused(sshd: LoopbackSshd, tmp_path: Path, name: str, shown: str) -> None:
    hosts = healthy(sshd, 1)
    hosts[name] = {"ansible_port": sshd.ports[1]}
    done, _ = cluster(sshd, tmp_path, hosts)
    refused(done, f"host name {shown} has whitespace or a control character", tmp_path)


def test_an_unreadable_key_file_is_that_hosts_error(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 3)
    missing = tmp_path / "keys" / "id_gone"
    hosts["node02"]["ansible_ssh_private_key_file"] = str(missing)
    hosts["node03"]["ansible_ssh_private_key_file"] = str(tmp_path)  # a directory
    done, out = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3, done.stdout + done.stderr
    doc = complete(out, done)
    node02, node03 = doc["nodes"]["node02"], doc["nodes"]["node03"]
    assert (node02["status"], node02["kind"]) == ("error", "auth")
    assert node02["reason"] == f"cannot read key file {missing}: No such file or directory"
    assert (node03["status"], node03["kind"], node03["reason"]) == (
        "error", "auth", f"cannot read key file {tmp_path}: Is a directory")
    assert doc["nodes"]["node01"]["status"] == "pass"
    assert (out / "drain.txt").read_text() == ""


@pytest.mark.parametrize(("limit", "message"), [
    ("node01,nothere", "--limit 'nothere' matches no host"),
    ("!nothere", "--limit 'nothere' matches no host"),
    ("", "--limit '' matches no host"),
    (",", "--limit ',' matches no host"),
])
def test_a_limit_that_matches_no_host_is_refused(sshd: LoopbackSshd, tmp_path: Path, limit: str, message: str) -> None:
    done, _ = cluster(sshd, tmp_path, healthy(sshd, 2), "--limit", limit)
    refused(done, message, tmp_path)


def test_an_empty_remote_command_is_refused(sshd: LoopbackSshd, tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, healthy(sshd, 1))
    done = run_cluster(["-i", str(inventory), "--remote-command", " ", "--report", str(tmp_path / "report")],
                       cwd=tmp_path)
    refused(done, "--remote-command is empty", tmp_path)
    done = run_cluster(["-i", str(inventory), "--remote-command", "", "--report", str(tmp_path / "report")],
                       cwd=tmp_path)
    refused(done, "--remote-command is empty", tmp_path)


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5", "infinity"])
def test_a_connect_timeout_that_is_not_a_time_is_refused(sshd: LoopbackSshd, tmp_path: Path, value: str) -> None:
    hosts = healthy(sshd, 2)
    hosts["node02"]["ansible_ssh_common_args"] = f"-o ConnectTimeout={value} -o StrictHostKeyChecking=no"
    done, _ = cluster(sshd, tmp_path, hosts)
    refused(done, f"node02: ConnectTimeout={value!r} is not a number of seconds above 0", tmp_path)


SECRETS = ("hunter2", "s3cr3t", "pr0xypw", "letmein")


def test_secrets_in_ssh_options_and_commands_stay_out_of_the_report(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 3)
    base = f"-o UserKnownHostsFile={sshd.known_hosts} -o GlobalKnownHostsFile=/dev/null"
    hosts["node02"]["ansible_ssh_common_args"] = (
        f"{base} -o 'ProxyCommand=sshpass -p hunter2 ssh -W %h:%p jump.invalid' -o PasswordAuthentication=no")
    hosts["node03"]["ansible_ssh_common_args"] = f'{base} -o ProxyCommand="sshpass -ps3cr3t false"'
    agent = f"env HTTPS_PROXY=http://ops:pr0xypw@proxy.invalid:3128 {sshd.agent}"
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    out = tmp_path / "report"
    done = run_cluster(["-i", str(inventory), "--remote-command", agent, "--report", str(out), "--connect-timeout",
                        "5"], cwd=tmp_path)
    doc = complete(out, done)
    assert doc["nodes"]["node01"]["status"] == "pass"  # the agent ran, through its env
    assert {doc["nodes"][n]["status"] for n in ("node02", "node03")} <= {"error", "fail"}
    written = [p.read_text() for p in out.rglob("*") if p.is_file()] + [done.stdout, done.stderr]
    for secret in SECRETS:
        assert not [t for t in written if secret in t], f"{secret} was written"
    assert doc["options"]["remote_command"].startswith("env HTTPS_PROXY=http://ops:")
    assert str(sshd.agent) in doc["options"]["remote_command"]
    assert [h["proxy_command"] for h in doc["inventory"]["hosts"]] == [None, "[redacted]", "[redacted]"]


# ---------------------------------------------------------------- a silent sshd


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never says a word (a hung sshd, a dead port forward)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def test_an_sshd_that_never_speaks_is_unreachable_within_the_connect_timeout(sshd: LoopbackSshd,
                                                                           tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    silent = SilentServer()
    try:
        hosts["node03"] = {"ansible_port": silent.port}
        began = time.monotonic()
        done, out = cluster(sshd, tmp_path, hosts, "--connect-timeout", "2", "--host-timeout", "60")
        elapsed = time.monotonic() - began
    finally:
        silent.close()
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # no paramiko log line, no traceback
    doc = complete(out, done)
    node03 = doc["nodes"]["node03"]
    assert (node03["status"], node03["kind"]) == ("fail", "unreachable")
    assert node03["reason"] == (f"unreachable: 127.0.0.1:{silent.port}: accepted the connection but sent no SSH "
                                "banner within 2 s (a hung sshd?)")
    assert node03["wall_s"] < 2 + 2
    assert elapsed < 30
    assert [doc["nodes"][n]["status"] for n in ("node01", "node02")] == ["pass", "pass"]
    assert (out / "drain.txt").read_text().startswith("node03 gpucheck: unreachable: ")


def test_a_dead_fleet_and_a_silent_one_drain_nothing(sshd: LoopbackSshd, tmp_path: Path) -> None:
    silent = SilentServer()
    try:
        done, out = cluster(sshd, tmp_path, {"node01": {"ansible_port": silent.port},
                                             "node02": {"ansible_port": free_port()}}, "--connect-timeout", "1")
    finally:
        silent.close()
    assert done.returncode == 3, done.stdout + done.stderr
    doc = complete(out, done)
    assert {n["status"] for n in doc["nodes"].values()} == {"error"}
    assert (out / "drain.txt").read_text() == ""
