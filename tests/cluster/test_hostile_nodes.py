"""Nodes that lie, over a real sshd on 127.0.0.1 (issue 35): the admin node's `gpucheck cluster` and its history
store against a node that claims another node's GPU, one whose text carries terminal escapes, a forged line and
secrets, one whose report has numbers SQLite cannot hold and fields of the wrong type, and one that answers with no
report at all, beside an honest node that fails. The honest node's failure is still drained, every report file and
the store hold no secret and no escape, nothing prints a traceback, and recording never changes the exit code.
(A node that pages `history collect` forever: tests/cluster/test_history_collect.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cluster_helpers import LoopbackSshd, load_report, node_report, run_cluster, write_inventory

SECRET = "hunter2-0123456789abcdef"
HONEST_GPUS = [f"GPU-8f6e2c1a-0000-4000-8000-00000000000{i}" for i in range(8)]


def with_gpus(doc: dict, uuids: list[str], machine_id: str) -> dict:
    doc["facts"]["gpus"] = [{"index": i, "uuid": u, "pci_bus_id": f"00000000:{i + 16:02X}:00.0",
                             "name": "NVIDIA H100 80GB HBM3"} for i, u in enumerate(uuids)]
    doc["facts"]["machine"] = {"machine_id": machine_id, "boot_id": machine_id[::-1], "gpu_uuids": uuids}
    return doc


def hostile_fleet(sshd: LoopbackSshd) -> dict[str, dict]:
    ports = sshd.ports
    honest = node_report("node01", fail={"gpu.ecc_errors": "GPU3: 2 uncorrected"})
    sshd.report(ports[0], with_gpus(honest, HONEST_GPUS, "a" * 32))
    thief = node_report("node02")  # lists the honest node's GPU3 as its own GPU0
    sshd.report(ports[1], with_gpus(thief, [HONEST_GPUS[3], *(f"GPU-thief-{i}" for i in range(1, 8))], "b" * 32))
    loud = node_report("node03\x1b]0;owned\x07", fail={
        "host.disk": f"full\nnode04: pass (forged)\x1b[2J token={SECRET} https://ops:{SECRET}@repo.example/x"})
    loud["facts"]["driver_version"] = "535\x1b[31m"
    loud["results"].append({"check": "gpu.gemm", "status": "pass", "measured": {"GPU0": {"bf16_TFLOPS": 10 ** 400}},
                            "expected": None, "reason": "x", "remediation": None})
    loud["duration_s"] = [1, 2]  # a list where a number belongs
    sshd.report(ports[2], loud)
    sshd.behave(ports[3], "printf 'not a report \\033[2J\\n'\nexit 0\n")
    return {f"node0{i + 1}": {"ansible_port": port} for i, port in enumerate(ports[:4])}


def test_lying_nodes_cannot_undo_a_failure_reach_the_terminal_or_leave_secrets(sshd: LoopbackSshd,
                                                                                tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, hostile_fleet(sshd))
    store = tmp_path / "history.sqlite"
    outputs = []
    for run in ("first", "second"):  # the second compares with what the first recorded
        done = run_cluster(["-i", str(inventory), "--remote-command", str(sshd.agent), "--report",
                            str(tmp_path / run), "--stages", "consistency,history", "--history", str(store)],
                           cwd=tmp_path)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 2, done.stdout + done.stderr  # node01 failed; recording changed nothing
    for text in outputs:
        assert "Traceback" not in text and "internal error" not in text
        assert "\x1b" not in text and "\x07" not in text
        assert "\nnode04: pass (forged)" not in text
        assert SECRET not in text

    doc = load_report(tmp_path / "second")
    drained = (tmp_path / "second" / "drain.txt").read_text().splitlines()
    assert [line.split()[0] for line in drained][:1] == ["node01"]  # the thief did not set its failure aside
    assert doc["nodes"]["node01"]["status"] == "fail"
    assert "its machine facts contradict node01's" in doc["nodes"]["node02"]["reason"]
    assert doc["nodes"]["node04"]["status"] == "error"  # no report: a named error, the others judged
    claims = next(r for r in doc["cluster"] if r["check"] == "cluster.history.gpu_claims")
    assert claims["status"] == "warn" and sorted(claims["nodes"]) == ["node01", "node02"], claims
    assert HONEST_GPUS[3] in claims["nodes"]["node01"]

    for path in (tmp_path / "second").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert SECRET not in text, path
            if path.suffix in (".md", ".txt", ".html"):
                assert "\x1b" not in text, path
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        dump = "\n".join(db.iterdump())
    assert SECRET not in dump
    recorded = json.loads(json.dumps(sorted({row for row in dump.splitlines() if "node_runs" in row})))
    assert any("node01" in row for row in recorded) and any("node02" in row for row in recorded)
