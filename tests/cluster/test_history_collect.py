"""`gpucheck history collect` (cluster/collect.py) against a real sshd on loopback, each "node" running the real
agent's `gpucheck kept` over its own kept-reports folder (GPUCHECK_STATE_DIR): what the nodes kept reaches the
store once, under the inventory's names, page by page, from where the last collect ended; a node that cannot be
reached costs that node only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cluster_helpers import ROOT, LoopbackSshd, node_report, write_inventory

from gpucheck.cluster.collect import MOST_PER_NODE, PAGE
from gpucheck.history.store import Store


def keep(state: Path, name: str, host: str, **kwargs) -> None:
    """A report as `gpucheck node` keeps it: <state>/reports/NAME, started at the time its name says."""
    doc = node_report(host, **kwargs)
    stamp = name[:16]
    doc["started"] = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}+00:00"
    (state / "reports").mkdir(parents=True, exist_ok=True)
    (state / "reports" / name).write_text(json.dumps(doc))


def real_agent(sshd: LoopbackSshd, port: int, state: Path) -> None:
    sshd.behave(port, f"GPUCHECK_STATE_DIR='{state}' PYTHONPATH='{ROOT / 'agent'}' exec '{sys.executable}' "
                      f"-m gpucheck \"$@\"\n")


def collect(sshd: LoopbackSshd, tmp_path: Path, hosts: dict[str, dict], *extra: str) -> subprocess.CompletedProcess:
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hosts)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "agent")}
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpucheck", "history", "collect", "-i", str(inventory),
                           "--remote-command", str(sshd.agent), "--store", str(tmp_path / "history.sqlite"),
                           "--connect-timeout", "5", *extra], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)


def runs(tmp_path: Path) -> list[dict]:
    with Store(tmp_path / "history.sqlite", create=False) as store:
        return store.query("SELECT r.source, r.started, nr.node, nr.status FROM runs r "
                           "JOIN node_runs nr ON nr.run_id = r.id ORDER BY r.id")


def test_every_kept_report_reaches_the_store_once_under_the_inventory_name(sshd: LoopbackSshd, tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    keep(a, "20261125T030000Z-pass-full.json", "dgx-a.example", measured={"gpu.gemm": 700.0})
    keep(a, "20261126T040000Z-fail.json", "dgx-a.example", fail={"gpu.ecc_errors": "GPU3: 2 uncorrected"})
    keep(a, "20261126T040000Z.2-pass.json", "dgx-a.example")
    (a / "reports" / "20261126T050000Z-fail.json").write_text("{cut off")  # a file the node could not finish
    for i in range(PAGE + 7):  # more than one page
        keep(b, f"202611{10 + i // 24:02d}T{i % 24:02d}0000Z-fail.json", "node02", fail={"host.disk": "full"})
    real_agent(sshd, sshd.ports[0], a)
    real_agent(sshd, sshd.ports[1], b)
    hosts = {"node01": {"ansible_port": sshd.ports[0]}, "node02": {"ansible_port": sshd.ports[1]}}

    done = collect(sshd, tmp_path, hosts)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  node01: 3 new run(s), 0 recorded before, newest 20261126T050000Z-fail.json" in done.stdout
    assert "  node01: kept report 20261126T050000Z-fail.json: " in done.stdout  # named, the others recorded
    assert f"  node02: {PAGE + 7} new run(s)" in done.stdout
    assert done.stdout.rstrip().endswith("history: 60 run(s) recorded from 2 of 2 node(s)")
    found = runs(tmp_path)
    mine = [(r["source"], r["node"], r["status"]) for r in found if r["node"] == "node01"]
    assert mine == [("node01:kept/20261125T030000Z-pass-full.json", "node01", "pass"),
                    ("node01:kept/20261126T040000Z-fail.json", "node01", "fail"),
                    ("node01:kept/20261126T040000Z.2-pass.json", "node01", "pass")]
    assert len([r for r in found if r["node"] == "node02"]) == PAGE + 7
    assert next(r["started"] for r in found if r["node"] == "node01") == "2026-11-25T03:00:00Z"  # the report's

    # again: nothing new is read (each node from its newest recorded report); then one new report on node01
    again = collect(sshd, tmp_path, hosts)
    assert "  node01: 0 new run(s), 0 recorded before" in again.stdout and again.returncode == 0, again.stdout
    assert "  node02: 0 new run(s), 0 recorded before" in again.stdout
    keep(a, "20261127T060000Z-fail.json", "dgx-a.example", fail={"gpu.xid": "Xid 79 on GPU2"})
    third = collect(sshd, tmp_path, hosts, "--limit", "node01")
    assert "  node01: 1 new run(s), 0 recorded before, newest 20261127T060000Z-fail.json" in third.stdout
    assert runs(tmp_path)[-1]["source"] == "node01:kept/20261127T060000Z-fail.json"


def test_a_node_that_cannot_be_read_costs_that_node_only(sshd: LoopbackSshd, tmp_path: Path):
    state = tmp_path / "a"
    keep(state, "20261126T040000Z-fail.json", "node01", fail={"gpu.ecc_errors": "GPU3: 2 uncorrected"})
    real_agent(sshd, sshd.ports[2], state)
    sshd.behave(sshd.ports[3], "echo 'gpucheck: error: argument command: invalid choice: kept' >&2\nexit 2\n")
    hosts = {"node01": {"ansible_port": sshd.ports[2]}, "node02": {"ansible_port": sshd.ports[3]},
             "node03": {"ansible_port": 9}}  # nothing listens there
    done = collect(sshd, tmp_path, hosts)
    assert done.returncode == 3
    assert "history: 1 run(s) recorded from 1 of 3 node(s)" in done.stdout
    errors = done.stderr.splitlines()
    assert ("gpucheck: error: node02: could not be read: `" + str(sshd.agent) + " kept` exited 2: gpucheck: error: "
            "argument command: invalid choice: kept (an agent older than `kept`?)") in errors, errors
    assert any(line.startswith("gpucheck: error: node03: could not be read: ") for line in errors), errors
    assert [r["node"] for r in runs(tmp_path)] == ["node01"]


def test_bad_input_is_one_line_and_exit_3(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "agent")}
    done = subprocess.run([sys.executable, "-m", "gpucheck", "history", "collect", "-i", str(tmp_path / "none.yml"),
                           "--store", str(tmp_path / "h.sqlite")], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 3 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("gpucheck: error: ") and "none.yml" in done.stderr


# A node's `gpucheck kept --json --max N [--after NAME]` that answers wrongly: every page the same full page, or ever
# new names. Each entry carries no report (each is a named problem, cheaply), so only the paging is under test.
ENDLESS = """exec '{python}' -c '
import json, sys
args = sys.argv[1:]
after = args[args.index("--after") + 1] if "--after" in args else None
start = 0 if {same} or after is None else int(after.split(".")[1].split("-")[0])
for n in range(start, start + {page}):
    print(json.dumps({{"name": "20261101T000000Z.%d-fail.json" % (n + 1), "error": "cut off"}}))
' "$@"
"""


def test_a_node_that_pages_forever_is_stopped_and_named(sshd: LoopbackSshd, tmp_path: Path):
    """The same full page again and again, or new names without end: each node is stopped (the same report twice;
    more than a node can keep), named, and what it sent before is kept; the collect ends (exit 3)."""
    sshd.behave(sshd.ports[0], ENDLESS.format(python=sys.executable, same=True, page=PAGE))
    sshd.behave(sshd.ports[1], ENDLESS.format(python=sys.executable, same=False, page=PAGE))
    hosts = {"node01": {"ansible_port": sshd.ports[0]}, "node02": {"ansible_port": sshd.ports[1]}}
    done = collect(sshd, tmp_path, hosts)
    assert done.returncode == 3, done.stdout + done.stderr
    errors = done.stderr.splitlines()
    assert ("gpucheck: error: node01: could not be read: sent kept report 20261101T000000Z.1-fail.json again: "
            "stopped there, what came before is recorded") in errors, errors
    assert (f"gpucheck: error: node02: could not be read: sent more than the {MOST_PER_NODE} kept reports a node "
            "can hold: stopped there, what came before is recorded") in errors, errors
    assert done.stdout.count("  node01: kept report ") == PAGE  # the first page was read, each entry named
    assert done.stdout.count("  node02: kept report ") == MOST_PER_NODE

