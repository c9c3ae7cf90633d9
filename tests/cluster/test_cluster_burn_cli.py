"""`gpucheck cluster --burn-minutes` against a real sshd on 127.0.0.1 (one port, one node; its agent a script the
test controls): the node's burn is started over SSH with the stage's arguments, and Ctrl-C in the second round
ends the node's burn, keeps the first round and writes the report (interrupted, exit 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cluster_helpers import ROOT, LoopbackSshd, alive, load_report, node_report, write_inventory

from gpucheck.model import Result, Status
from support import default_sigint, wait_for


def burn_report(host: str) -> dict:
    """What `gpucheck node --only gpu.burn` prints for a healthy one-GPU node (the fields the stage reads)."""
    report = node_report(host, gpus=1)
    report["results"] = [Result("gpu.burn", Status.PASS, {"GPU0": {"TFLOPS_median": 661.1, "power_W_max": 693.2,
                                                                    "temperature_C_max": 61}}, None,
                                "sustained load for 300 s").to_dict()]
    report["facts"]["burnin"] = {"gpus": {"GPU0": {"sku": "h200-sxm-141gb", "burn_TFLOPS_median": 661.1,
                                                   "burn_temperature_C_max": 61}}}
    report["exit_code"] = 0
    return report


def test_ctrl_c_in_the_second_round_ends_the_node_s_burn_and_writes_the_report(sshd: LoopbackSshd,
                                                                               tmp_path: Path) -> None:
    port = sshd.ports[0]
    checks, burn = tmp_path / "checks.json", tmp_path / "burn.json"
    checks.write_text(json.dumps(node_report("node01", gpus=1)))
    burn.write_text(json.dumps(burn_report("node01")))
    rounds, argv = tmp_path / "rounds", tmp_path / "burn-argv"
    # the fan-out's check prints its report; the first burn its report; the second hangs (its pid kept)
    sshd.behave(port, f"""case "$*" in *gpu.burn*) ;; *) cat '{checks}'; exit 0;; esac
echo "$*" > '{argv}'
echo round >> '{rounds}'
if [ "$(wc -l < '{rounds}')" -eq 1 ]; then cat '{burn}'; exit 0; fi
echo $$ >> '{sshd.root / 'hung.pids'}'
exec sleep 600
""")
    inventory = write_inventory(tmp_path / "hosts.yml", sshd, {"node01": {"ansible_port": port, "rack": "A"}})
    report = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "agent")}
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "gpucheck", "cluster", "-i", str(inventory), "--remote-command",
                             str(sshd.agent), "--report", str(report), "--stages", "consistency",
                             "--burn-minutes", "10", "--no-history"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=default_sigint)
    said = []
    assert proc.stdout is not None
    for line in proc.stdout:
        said.append(line)
        if line.startswith("burn: round 2 of 2"):
            break
    wait_for(sshd.hung_pids, 60, "the second round's burn running on the node")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, (out, err)
    assert "burn: round 1 of 2 done: 1 of 1 node(s) pass" in "".join(said)
    assert "gpucheck: interrupted" in err
    words = (tmp_path / "burn-argv").read_text().split()
    assert words[words.index("--burn-seconds") + 1] == "300" and words[words.index("--only") + 1] == "gpu.burn"
    doc = load_report(report)
    assert doc["interrupted"] and doc["burn"]["rounds_done"] == 1 and doc["burn"]["interrupted"]
    assert doc["burn"]["nodes"]["node01"]["rack"] == "A"
    gpus = next(r for r in doc["cluster"] if r["check"] == "cluster.burn.gpus")
    assert gpus["status"] == "pass" and "1 of 2 round(s) of 300 s done), interrupted" in gpus["reason"]
    wait_for(lambda: not [p for p in sshd.hung_pids() if alive(p)], 30, "the node's burn ended")
