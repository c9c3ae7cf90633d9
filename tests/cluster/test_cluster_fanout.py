"""`gpucheck cluster` against a real sshd on 127.0.0.1: each simulated host is a port of that sshd,
and its agent is a script the test controls (healthy, failing, hung, crashed, missing...)."""

from __future__ import annotations

import hashlib
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cluster_helpers import (
    LoopbackSshd,
    alive,
    free_port,
    keygen,
    load_report,
    node_report,
    run_cluster,
    write_inventory,
)

from gpucheck.cluster import fanout
from gpucheck.cluster.context import Options
from gpucheck.cluster.inventory import load
from gpucheck.cluster.ssh import client as ssh
from gpucheck.model import Status
from gpucheck.report.cluster import FILES


def cluster(sshd: LoopbackSshd, tmp_path: Path, hosts: dict[str, dict], *extra: str, timeout: float = 120):
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    report = tmp_path / "report"
    began = time.monotonic()
    done = run_cluster(["-i", str(inventory), "--remote-command", str(sshd.agent), "--report", str(report), *extra],
                       timeout=timeout, cwd=tmp_path)
    return done, report, time.monotonic() - began


def healthy(sshd: LoopbackSshd, count: int) -> dict[str, dict]:
    hosts = {}
    for i, port in enumerate(sshd.ports[:count], 1):
        sshd.report(port, node_report(f"node{i:02d}"))
        hosts[f"node{i:02d}"] = {"ansible_port": port}
    return hosts


def test_all_healthy_exit_0_and_every_report_file(sshd: LoopbackSshd, tmp_path: Path) -> None:
    done, report, _ = cluster(sshd, tmp_path, healthy(sshd, 3))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in report.iterdir()) == sorted([*FILES, "nodes"])
    assert sorted(p.name for p in (report / "nodes").iterdir()) == ["node01.json", "node02.json", "node03.json"]
    doc = load_report(report)
    assert doc["complete"] is True and doc["exit_code"] == 0
    assert [n["status"] for n in doc["nodes"].values()] == ["pass"] * 3
    assert all(n["report"]["facts"]["driver_version"] == "535.183.01" for n in doc["nodes"].values())
    assert [h["name"] for h in doc["inventory"]["hosts"]] == ["node01", "node02", "node03"]
    assert set(doc["timings"]) >= {"fanout", "consistency", "stragglers"}
    assert (report / "drain.txt").read_text() == ""
    suites = ET.parse(report / "junit.xml").getroot()
    node_checks = sum(len(n["report"]["results"]) for n in doc["nodes"].values())
    assert int(suites.get("tests")) == node_checks + len(doc["cluster"])
    assert suites.get("failures") == "0" and suites.get("errors") == "0"
    assert "gpucheck cluster" in (report / "report.html").read_text()
    assert "verdict: PASS — exit 0" in done.stdout and f"report: {report}/" in done.stdout
    assert done.stdout.count("] node0") == 3  # one plain progress line per host (not a terminal)
    assert done.stderr == ""
    assert not list(report.glob(".*")), "temporary files left behind"


def test_one_failing_node_exits_2_and_is_drained(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 3)
    sshd.report(sshd.ports[1], node_report("node02", fail={"gpu.ecc_errors": "GPU3: 12 uncorrected volatile errors"}))
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 2, done.stdout + done.stderr
    drained = (report / "drain.txt").read_text()
    assert drained == "node02 gpucheck: gpu.ecc_errors GPU3: 12 uncorrected volatile errors\n"
    doc = load_report(report)
    assert doc["nodes"]["node02"]["status"] == "fail" and doc["nodes"]["node02"]["reason"] == "1 fail: gpu.ecc_errors"
    assert "drain (1): node02" in done.stdout


def test_each_run_is_recorded_in_the_history_and_a_broken_store_changes_no_verdict(sshd: LoopbackSshd,
                                                                                    tmp_path: Path) -> None:
    from gpucheck.history.store import Store

    hosts = healthy(sshd, 2)
    sshd.report(sshd.ports[1], node_report("node02", fail={"gpu.ecc_errors": "GPU3: 12 uncorrected volatile errors"},
                                           measured={"gpu.gemm": {"GPU0": {"bf16_TFLOPS": 701.5}}}))
    store = tmp_path / "history.sqlite"
    done, report, _ = cluster(sshd, tmp_path, hosts, "--history", str(store))
    said = f"history: run 1 recorded in {store} (cluster gpucheck)"  # the inventory names no cluster_name
    assert done.returncode == 2 and said in done.stdout, done.stdout + done.stderr
    with Store(store) as history:
        [run] = history.query("SELECT kind, source, exit_code, complete FROM runs")
        assert run == {"kind": "cluster", "source": str(report / "report.json"), "exit_code": 2, "complete": 1}
        parts = {r["node"]: r["status"] for r in history.query("SELECT node, status FROM node_runs")}
        assert parts == {"node01": "pass", "node02": "fail", "": "pass"}  # "": the cluster's own checks
        assert history.query("SELECT f.gpu, f.value FROM figures f JOIN names n ON n.id = f.name_id "
                             "WHERE n.check_name = 'gpu.gemm'") == [{"gpu": 0, "value": 701.5}]
    unrecorded, _, _ = cluster(sshd, tmp_path, hosts, "--history", str(store), "--no-history")
    assert unrecorded.returncode == 2 and "history:" not in unrecorded.stdout + unrecorded.stderr
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_bytes(b"no database" * 200)
    broken, _, _ = cluster(sshd, tmp_path, hosts, "--history", str(foreign))
    assert broken.returncode == 2 and "verdict: FAIL" in broken.stdout
    assert broken.stderr.strip() == (f"history: this run was not recorded: {foreign}: not a gpucheck history store "
                                     "(file is not a database)"), broken.stderr


def test_a_gpu_slower_than_its_baseline_warns_naming_it_though_every_floor_passes(sshd: LoopbackSshd,
                                                                                    tmp_path: Path) -> None:
    """Stage `history`: the first passing run with GPU figures is each node's baseline; a later run where node02's
    GPU3 is 10 % slower (every node check still passing) warns, naming node02, GPU3 by its UUID, and both figures."""
    def report(host: str, gpu3_bf16: float) -> dict:
        doc = node_report(host, measured={"gpu.gemm": {f"GPU{i}": {"bf16_TFLOPS": 790.0 if i != 3 else gpu3_bf16}
                                                       for i in range(8)}})
        doc["facts"]["gpus"] = [{"index": i, "uuid": f"GPU-{host}-{i}", "pci_bus_id": f"00000000:{i + 16:02X}:00.0",
                                 "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]
        return doc

    from gpucheck.history.records import utc

    hosts = {"node01": {"ansible_port": sshd.ports[0]}, "node02": {"ansible_port": sshd.ports[1]}}
    store, stages = tmp_path / "history.sqlite", ("--stages", "consistency,history", "--history")
    sshd.report(sshd.ports[0], report("node01", 790.0))
    sshd.report(sshd.ports[1], report("node02", 788.0))
    first, report_dir, _ = cluster(sshd, tmp_path, hosts, *stages, str(store))
    first_doc = load_report(report_dir)
    began = utc(first_doc["started"])  # a node's run in a cluster run is dated by the cluster run
    check = next(r for r in first_doc["cluster"] if r["check"] == "cluster.history.regression")
    assert first.returncode == 0 and check["status"] == "skip" and "no history yet" in check["reason"], first.stdout
    sshd.report(sshd.ports[1], report("node02", 711.0))
    second, report_dir, _ = cluster(sshd, tmp_path, hosts, *stages, str(store))
    doc = load_report(report_dir)
    check = next(r for r in doc["cluster"] if r["check"] == "cluster.history.regression")
    assert second.returncode == 1 and check["status"] == "warn", second.stdout + second.stderr
    assert check["nodes"] == {"node02": f"GPU3 (GPU-node02-3) gpu.gemm bf16_TFLOPS 711 TFLOPS: baseline 788 ({began})"
                                        " -9.8 %"}
    assert doc["nodes"]["node02"]["status"] == "warn" and doc["nodes"]["node01"]["status"] == "pass"
    assert all(r["status"] == "pass" for r in doc["nodes"]["node02"]["report"]["results"])  # every floor passes
    # what the report shows of its past: the GPUs' median per run (788 then 711 among seven 790s: 790 both times),
    # and the last run of active checks it passed (a warning is no failure)
    assert first_doc["history"] == {}  # no store yet: nothing to show
    [trend] = doc["history"]["node02"]["trends"]
    assert (trend["check"], trend["figure"], trend["unit"]) == ("gpu.gemm", "bf16_TFLOPS", "TFLOPS")
    assert [(p["started"] == began, p["value"]) for p in trend["points"]] == [(True, 790.0), (False, 790.0)]
    assert doc["history"]["node02"]["last_active_pass"] >= began


def test_a_node_failing_a_third_time_in_a_month_is_named_a_repeat_offender(sshd: LoopbackSshd, tmp_path: Path) -> None:
    import datetime as dt

    from gpucheck.history.records import from_document
    from gpucheck.history.store import Store

    store = tmp_path / "history.sqlite"
    now = dt.datetime.now(dt.timezone.utc)
    with Store(store) as history:  # its past: failed 20 days ago, passed, failed 6 days ago, passed
        for days_ago, fail in ((20, {"gpu.ecc_errors": "GPU3: 2 uncorrected"}), (12, None),
                               (6, {"gpu.memtest": "GPU3: 5 bad words"}), (3, None)):
            doc = node_report("node02", fail=fail)
            doc["started"] = (now - dt.timedelta(days=days_ago)).isoformat(timespec="seconds")
            history.record(from_document(doc), f"{days_ago} days ago")
    hosts = healthy(sshd, 2)
    sshd.report(sshd.ports[1], node_report("node02", fail={"gpu.ecc_errors": "GPU3: 12 uncorrected volatile errors"}))
    done, report, _ = cluster(sshd, tmp_path, hosts, "--stages", "consistency,history", "--history", str(store))
    check = next(r for r in load_report(report)["cluster"] if r["check"] == "cluster.history.repeat_offender")
    assert done.returncode == 2 and check["status"] == "warn", done.stdout + done.stderr
    day = lambda n: (now - dt.timedelta(days=n)).strftime("%Y-%m-%d")  # noqa: E731
    assert check["nodes"] == {"node02": f"repeat offender: failed 3 times in 30 days: {day(20)} (gpu.ecc_errors), "
                                        f"{day(6)} (gpu.memtest), {day(0)} (gpu.ecc_errors)"}


def test_a_gpu_failing_a_third_time_is_named_with_its_node(sshd: LoopbackSshd, tmp_path: Path) -> None:
    """GPU3 of node02 failed twice before (named GPU3, then by its bus id) and fails again now: the GPU is named a
    repeat offender by its UUID, beside its node; GPU5's one failure names nothing."""
    import datetime as dt

    from gpucheck.history.records import from_document
    from gpucheck.history.store import Store

    def with_gpus(doc: dict) -> dict:
        doc["facts"]["gpus"] = [{"index": i, "uuid": f"GPU-node02-{i}", "pci_bus_id": f"00000000:{i + 16:02X}:00.0",
                                 "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]
        return doc

    store = tmp_path / "history.sqlite"
    now = dt.datetime.now(dt.timezone.utc)
    with Store(store) as history:
        for days_ago, fail in ((20, {"gpu.ecc_errors": "GPU3: 2 uncorrected"}), (12, None),
                               (6, {"gpu.xid": "fatal: Xid 48 on 0000:13:00"}), (3, None),
                               (2, {"gpu.memtest": "GPU5: 5 bad words"}), (1, None)):
            doc = with_gpus(node_report("node02", fail=fail))
            doc["started"] = (now - dt.timedelta(days=days_ago)).isoformat(timespec="seconds")
            history.record(from_document(doc), f"{days_ago} days ago")
    hosts = healthy(sshd, 2)
    sshd.report(sshd.ports[1], with_gpus(node_report("node02", fail={"gpu.ecc_errors": "GPU3: 12 uncorrected"})))
    done, report, _ = cluster(sshd, tmp_path, hosts, "--stages", "consistency,history", "--history", str(store))
    check = next(r for r in load_report(report)["cluster"] if r["check"] == "cluster.history.repeat_offender")
    assert done.returncode == 2 and check["status"] == "warn", done.stdout + done.stderr
    day = lambda n: (now - dt.timedelta(days=n)).strftime("%Y-%m-%d")  # noqa: E731
    node = f"repeat offender: failed 4 times in 30 days: {day(20)} (gpu.ecc_errors), {day(6)} (gpu.xid), " \
           f"{day(2)} (gpu.memtest), {day(0)} (gpu.ecc_errors)"
    gpu3 = f"GPU3 (GPU-node02-3) of node02: repeat offender: failed 3 times in 30 days: {day(20)} (gpu.ecc_errors), " \
           f"{day(6)} (gpu.xid), {day(0)} (gpu.ecc_errors)"
    assert check["nodes"] == {"node02": f"{node}; {gpu3}"}
    assert sorted(check["measured"]) == ["GPU3 (GPU-node02-3) of node02", "node02"]


def test_unreachable_node_is_a_result_and_the_rest_are_checked(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    hosts["node03"] = {"ansible_port": free_port()}  # nothing listens there
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 2
    doc = load_report(report)
    node03 = doc["nodes"]["node03"]
    assert (node03["status"], node03["kind"]) == ("fail", "unreachable")
    assert node03["reason"].startswith("unreachable: 127.0.0.1:") and "connection refused" in node03["reason"]
    assert [doc["nodes"][n]["status"] for n in ("node01", "node02")] == ["pass", "pass"]
    assert (report / "drain.txt").read_text().startswith("node03 gpucheck: unreachable: ")
    case = ET.parse(report / "junit.xml").getroot().find("testsuite[@name='gpucheck.node.node03']/testcase")
    assert case.find("error") is not None and case.find("error").get("type") == "unreachable"


def test_every_node_unreachable_is_our_side_and_drains_nothing(sshd: LoopbackSshd, tmp_path: Path) -> None:
    done, report, _ = cluster(sshd, tmp_path, {"node01": {"ansible_port": free_port()},
                                               "node02": {"ansible_port": free_port()}})
    assert done.returncode == 3
    doc = load_report(report)
    assert {n["status"] for n in doc["nodes"].values()} == {"error"}
    assert "no node was reachable" in doc["nodes"]["node01"]["reason"]
    assert (report / "drain.txt").read_text() == ""


def test_wrong_key_is_an_authentication_failure(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    hosts["node02"]["ansible_ssh_private_key_file"] = str(sshd.other_key)
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3, done.stdout  # could not check node02; nothing failed
    node02 = load_report(report)["nodes"]["node02"]
    assert (node02["status"], node02["kind"]) == ("error", "auth")
    assert node02["reason"].startswith(f"authentication failed as root@127.0.0.1:{sshd.ports[1]} with key ")
    assert (report / "drain.txt").read_text() == ""  # our key is wrong: not the node's fault


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_unknown_host_key_is_refused_and_never_added(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    hosts["node02"]["ansible_ssh_common_args"] = (f"-o UserKnownHostsFile={empty} -o StrictHostKeyChecking=yes "
                                                  "-o GlobalKnownHostsFile=/dev/null")
    user_known = Path.home() / ".ssh" / "known_hosts"
    before = digest(user_known)
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3
    node02 = load_report(report)["nodes"]["node02"]
    assert (node02["status"], node02["kind"]) == ("error", "host-key")
    assert f"host key of [127.0.0.1]:{sshd.ports[1]} is not in known_hosts ({empty}): refused, not added" in \
        node02["reason"]
    assert empty.read_text() == "" and digest(user_known) == before


def test_changed_host_key_is_refused(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 1)
    other = keygen(tmp_path / "impostor")
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.ports[0]} " + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n")
    hosts["node01"]["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={wrong} -o GlobalKnownHostsFile=none"
    done, report, _ = cluster(sshd, tmp_path, hosts)
    node01 = load_report(report)["nodes"]["node01"]
    assert (node01["status"], node01["kind"]) == ("error", "host-key")
    assert "does not match known_hosts" in node01["reason"]


def test_strict_host_key_checking_no_connects_without_writing_known_hosts(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 1)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    hosts["node01"]["ansible_ssh_common_args"] = (f"-o UserKnownHostsFile={empty} -o StrictHostKeyChecking=no "
                                                  "-o GlobalKnownHostsFile=/dev/null")
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 0, done.stdout
    assert empty.read_text() == ""


def test_hung_agent_times_out_within_the_limit_and_is_ended(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 2)
    sshd.hang(sshd.ports[1])
    limit = 3.0
    done, report, elapsed = cluster(sshd, tmp_path, hosts, "--host-timeout", str(limit))
    assert done.returncode == 2
    node02 = load_report(report)["nodes"]["node02"]
    assert (node02["status"], node02["kind"]) == ("fail", "timeout")
    assert node02["reason"] == "timed out: no report within 3 s (hung agent?)"
    assert limit <= node02["wall_s"] < limit + 5  # connect + the limit + our 2 s backstop at most
    assert elapsed < limit + 15, f"the whole run took {elapsed:.1f} s"  # process start, ansible, ssh included
    time.sleep(0.5)
    assert not [pid for pid in sshd.hung_pids() if alive(pid)], "the hung agent still runs on the node"
    assert (report / "drain.txt").read_text().startswith("node02 gpucheck: timed out")


def test_version_drift_names_the_node_and_both_versions(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 3)
    sshd.report(sshd.ports[2], node_report("node03", driver="535.161.08"))
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 2
    result = next(r for r in load_report(report)["cluster"] if r["check"] == "cluster.consistency.driver_version")
    assert result["reason"] == "node03: driver 535.161.08, 2 others: 535.183.01"
    assert result["nodes"] == {"node03": "driver 535.161.08 (majority 535.183.01)"}
    assert (report / "drain.txt").read_text() == ("node03 gpucheck: cluster.consistency.driver_version driver "
                                                  "535.161.08 (majority 535.183.01)\n")
    assert "node03: driver 535.161.08, 2 others: 535.183.01" in done.stdout


@pytest.mark.parametrize(("script", "kind", "reason"), [
    ("echo 'Traceback (most recent call last):' >&2\necho '  File \"x.py\", line 1' >&2\n"
     "echo 'ZeroDivisionError: division by zero' >&2\nexit 1\n",
     "agent-crashed", "agent crashed: exit 1 and no JSON report: ZeroDivisionError: division by zero"),
    ("echo 'gpucheck: error: no profile named x (see --help)' >&2\nexit 3\n",
     "usage", "agent refused the command (exit 3): gpucheck: error: no profile named x (see --help)"),
    ("echo '{\"half\": ' \nexit 2\n", "agent-crashed", "agent crashed: exit 2 and no JSON report: {\"half\":"),
])
def test_broken_agents_are_errors_with_evidence(sshd: LoopbackSshd, tmp_path: Path, script, kind, reason) -> None:
    hosts = healthy(sshd, 2)
    sshd.behave(sshd.ports[1], script)
    done, report, _ = cluster(sshd, tmp_path, hosts)
    assert done.returncode == 3
    node02 = load_report(report)["nodes"]["node02"]
    assert (node02["status"], node02["kind"], node02["reason"]) == ("error", kind, reason)
    if kind == "agent-crashed" and "Traceback" in script:
        assert node02["evidence"].startswith("Traceback (most recent call last):")


def test_missing_agent_is_exit_127(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 1)
    done, report, _ = cluster(sshd, tmp_path, hosts, "--remote-command", str(tmp_path / "no" / "gpucheck"))
    node01 = load_report(report)["nodes"]["node01"]
    assert (node01["status"], node01["kind"], node01["exit_code"]) == ("error", "agent-missing", 127)
    assert node01["reason"].startswith("gpucheck agent not found on the node (exit 127)")


def test_values_reach_the_remote_shell_quoted(sshd: LoopbackSshd, tmp_path: Path) -> None:
    hosts = healthy(sshd, 1)
    argv_file = tmp_path / "argv.json"
    sshd.behave(sshd.ports[0], f"python3 -c 'import json, sys; json.dump(sys.argv[1:], open(\"{argv_file}\", \"w\"))' "
                               "\"$@\"\nexit 3\n")
    evil = f"x'; touch {tmp_path}/pwned; echo '$(id)"
    cluster(sshd, tmp_path, hosts, "--profile", evil, "--timeout", "7", "--full")
    assert json.loads(argv_file.read_text()) == ["node", "--format", "json", "--profile", evil, "--timeout", "7",
                                                 "--full"]
    assert not (tmp_path / "pwned").exists()


def test_forks_bound_the_hosts_checked_at_once(sshd: LoopbackSshd, tmp_path: Path) -> None:
    log = tmp_path / "concurrency.log"
    hosts = {}
    for i, port in enumerate(sshd.ports[:4], 1):
        path = sshd.agent_dir / f"report-{port}.json"
        path.write_text(json.dumps(node_report(f"node{i:02d}")))
        sshd.behave(port, f"echo start >> '{log}'; sleep 1; echo end >> '{log}'; cat '{path}'\n")
        hosts[f"node{i:02d}"] = {"ansible_port": port}
    done, _, _ = cluster(sshd, tmp_path, hosts, "--forks", "2")
    assert done.returncode == 0
    running, peak = 0, 0
    for line in log.read_text().split():
        running += 1 if line == "start" else -1
        peak = max(peak, running)
    assert peak == 2


def test_fan_out_in_process_keeps_inventory_order(sshd: LoopbackSshd, tmp_path: Path) -> None:
    sshd.report(sshd.ports[0], node_report("node01", fail={"gpu.xid": "Xid 79 on GPU2"}))
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, {"zeta": {"ansible_port": free_port()},
                                                               "node01": {"ansible_port": sshd.ports[0]}})
    seen = []
    outcomes = fanout.fan_out(load([str(inventory)]).hosts, Options(remote_command=str(sshd.agent)), seen.append)
    assert list(outcomes) == ["zeta", "node01"] and sorted(o.host for o in seen) == ["node01", "zeta"]
    assert outcomes["node01"].status == Status.FAIL and outcomes["node01"].report["exit_code"] == 2
    assert (outcomes["zeta"].status, outcomes["zeta"].kind) == (Status.FAIL, "unreachable")


def test_connect_errors_are_classified() -> None:
    import socket

    from paramiko.ssh_exception import SSHException

    from gpucheck.cluster.inventory import Host

    host = Host("n1", "n1.example", 22, "root", None, ("/k",), True)
    cases = [
        (socket.gaierror(-2, "Name or service not known"), Status.FAIL, "unreachable",
         "unreachable: cannot resolve n1.example: Name or service not known"),
        (TimeoutError(), Status.FAIL, "unreachable", "unreachable: n1.example:22: no answer within 10 s"),
        (OSError(113, "No route to host"), Status.FAIL, "unreachable", "unreachable: n1.example:22: no route to host"),
        (SSHException("Error reading SSH protocol banner"), Status.ERROR, "ssh",
         "SSH handshake with n1.example:22 failed: Error reading SSH protocol banner"),
    ]
    for exc, status, kind, reason in cases:
        assert ssh.classify_connect_error(host, exc, 10) == (status, kind, reason)


def test_connect_errors_of_our_own_are_classified() -> None:
    from paramiko.ssh_exception import ProxyCommandFailure

    from gpucheck.cluster.inventory import Host
    from gpucheck.cluster.ssh.connect import KeyFileUnreadable, NoBanner

    host = Host("n1", "n1.example", 22, "root", "/k", ("/k",), True)
    assert ssh.classify_connect_error(host, KeyFileUnreadable("/k", "Permission denied"), 10) == (
        Status.ERROR, "auth", "cannot read key file /k: Permission denied")
    assert ssh.classify_connect_error(host, NoBanner(), 2) == (
        Status.FAIL, "unreachable", "unreachable: n1.example:22: accepted the connection but sent no SSH banner "
        "within 2 s (a hung sshd?)")
    status, kind, reason = ssh.classify_connect_error(host, ProxyCommandFailure("sshpass -p pw nc", "exit 1"), 10)
    assert (status, kind, reason) == (Status.ERROR, "ssh", "the proxy command to n1.example:22 failed: exit 1")


def test_an_unreadable_key_is_that_hosts_error_before_any_connection(tmp_path: Path) -> None:
    from gpucheck.cluster.inventory import Host

    gone = tmp_path / "id_gone"
    host = Host("n1", "127.0.0.1", free_port(), "root", str(gone), (), True)
    outcome = fanout.collect(host, Options(), "true")
    assert (outcome.status, outcome.kind) == (Status.ERROR, "auth")
    assert outcome.reason == f"cannot read key file {gone}: No such file or directory"


def test_finding_the_report_is_linear_in_the_output() -> None:
    import tracemalloc

    from gpucheck.cluster import agent_report

    report = node_report("n1")
    noise = ('{"log": "' + "x" * 40 + '"} and more\n') * 8_000  # 440 kB, a line starting with { every 55 bytes
    text = noise + json.dumps(report, indent=2)
    tracemalloc.start()
    try:
        assert agent_report.find(text) == report
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(text), f"{peak / 2**20:.0f} MiB to read {len(text) / 2**20:.1f} MiB"  # was 1.6 GiB
    began = time.monotonic()
    assert agent_report.find(noise * 20) is None  # 9 MB
    assert agent_report.find(noise + "{" * 100_000) is None  # deeper than Python parses: no RecursionError
    assert agent_report.find("{" + '"a": [' * 100_000) is None
    assert time.monotonic() - began < 5
    assert agent_report.find(json.dumps(report)) == report  # compact, alone
    inner = "{\n" + ",\n".join(f'"k{i}":\n{{"v": {i}}}' for i in range(40)) + ',\n"results": [], "exit_code": 0\n}'
    assert agent_report.find(inner)["k39"] == {"v": 39}  # a report alone, however its inner lines start


@pytest.mark.parametrize(("change", "problem"), [
    ({"exit_code": True}, "exit_code is a boolean (True), not 0, 1, 2 or 3"),
    ({"exit_code": 4}, "exit_code is a number (4), not 0, 1, 2 or 3"),
    ({"exit_code": None}, "exit_code is missing, not 0, 1, 2 or 3"),
    ({"results": {"a": 1}}, "results is a mapping, not a list"),
    ({"results": [{"check": "", "status": "pass"}]}, "results[0].check is '', not a check name"),
    ({"results": [{"check": "a", "status": "pass", "reason": 3}]}, "results[0].reason is a number, not text"),
    ({"results": [{"check": "a", "status": "pass", "duration_s": "1"}]}, "results[0].duration_s is a string, "
                                                                          "not a number"),
    ({"thresholds": []}, "thresholds is a list, not a mapping"),
    ({"counts": "3"}, "counts is a string, not a mapping"),
    ({"facts": {"frameworks": {"tf": "2.15"}}}, "facts.frameworks.tf is a string, not a mapping"),
    ({"host": ["n1"]}, "host is a list, not text"),
    ({"exit_code": 3}, "exit_code 3 but its results say 0"),
    ({"results": [], "exit_code": 0}, "results is empty: the agent judged no check"),  # counted as passing before
])
def test_a_report_of_the_wrong_shape_says_what_is_wrong(change, problem) -> None:
    from gpucheck.cluster import agent_report

    report = node_report("n1")
    assert agent_report.problem(report) is None
    report.update(change)
    if change.get("exit_code", "") is None:
        del report["exit_code"]
    assert agent_report.problem(report) == problem
    outcome = fanout.interpret("n1", json.dumps(report), "", 0, 1.0, 300)
    assert (outcome.status, outcome.kind, outcome.reason) == (Status.ERROR, "malformed",
                                                              f"agent report malformed: {problem}")
    assert outcome.report is None


def test_bounded_output_keeps_the_head_and_the_tail() -> None:
    from gpucheck.cluster.ssh.output import Bounded

    kept = Bounded(tail_chars=100, head_chars=10)
    for i in range(1000):
        kept.add(f"{i:04d}\n")
    text = kept.text()
    assert text.startswith("0000\n0001\n") and text.endswith("0998\n0999\n")
    assert "[gpucheck: 4890 characters of output cut here]" in text and len(text) < 100 + 10 + 60 + 5
    small = Bounded(tail_chars=100, head_chars=10)
    small.add("abc")
    small.add("def")
    assert small.text() == "abcdef"


def test_interpret_tolerates_a_banner_before_the_report() -> None:
    report = node_report("n1")
    outcome = fanout.interpret("n1", "Welcome to n1\n" + json.dumps(report, indent=2), "", 0, 1.0, 300)
    assert outcome.kind == "report" and outcome.status == Status.PASS and outcome.report == report
    outcome = fanout.interpret("n1", "", "", 124, 300.0, 300)
    assert (outcome.status, outcome.kind) == (Status.FAIL, "timeout")


def test_a_report_cut_for_its_size_is_said_so_not_called_a_crash() -> None:
    """A node report over the bound the fan-out keeps was read as "agent crashed"."""
    from gpucheck.cluster.agent_report import find as agent_report_of
    from gpucheck.cluster.ssh.output import Bounded

    report = node_report("n1")
    report["results"][0]["evidence"] = "x" * 5000
    text = json.dumps(report) + "\n"
    kept = Bounded(tail_chars=1000, head_chars=100)
    for start in range(0, len(text), 50):
        kept.add(text[start:start + 50])
    assert agent_report_of(kept.text()) is None  # cut in two: no report can be read from it
    outcome = fanout.interpret("n1", kept.text(), "", 0, 1.0, 300)
    assert (outcome.status, outcome.kind) == (Status.ERROR, "oversized")
    assert outcome.reason.startswith("report too large: the agent's output ran over what gpucheck keeps") \
        and "characters cut" in outcome.reason
