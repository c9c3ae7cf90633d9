"""Fan-out time of `gpucheck cluster` for 1, 4 and 16 hosts, against the same collection done with
`ansible -m command` on the same hosts, as ratios from one run.

Every host is a port of one real sshd on 127.0.0.1 (the tests' loopback sshd), and its agent is a
trivial script printing a canned node report, so what is measured is the fan-out itself: process
start, inventory, SSH, collection. Both tools are timed as fresh processes, end to end:
    python bench/fanout.py [--sizes 1 4 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "agent")]

from cluster_helpers import LoopbackSshd, node_report, write_inventory  # noqa: E402

ANSIBLE = Path(sys.executable).with_name("ansible")


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PYTHONPATH=str(ROOT / "agent"), ANSIBLE_CONFIG=str(tmp / "none.cfg"),  # no repository ansible.cfg
               ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp / "cp"),  # fresh: no master left by a previous run
               ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3", ANSIBLE_HOME=str(tmp / "ansible-home"))
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - began, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        sshd = LoopbackSshd(tmp / "sshd", ports=max(args.sizes))
        try:
            for i, port in enumerate(sshd.ports, 1):
                sshd.report(port, node_report(f"node{i:02d}"))
            rows = []
            for size in args.sizes:
                run = tmp / f"run{size}"
                (run / "cp").mkdir(parents=True)
                hosts = {f"node{i:02d}": {"ansible_port": p} for i, p in enumerate(sshd.ports[:size], 1)}
                inventory = write_inventory(run / "hosts.yml", sshd, hosts)
                env = clean_env(run)
                ours, done = timed([sys.executable, "-m", "gpucheck.cluster", "-i", str(inventory), "--remote-command",
                                    str(sshd.agent), "--report", str(run / "report"),
                                    "--stages", "consistency"], env, run)
                if done.returncode != 0:
                    raise SystemExit(f"gpucheck cluster failed ({done.returncode}):\n{done.stdout}{done.stderr}")
                fan = json.loads((run / "report" / "report.json").read_text())["timings"]["fanout"]
                theirs, done = timed([str(ANSIBLE), "gpu_nodes", "-i", str(inventory), "-f", "50", "-o", "-m",
                                      "ansible.builtin.command", "-a", f"{sshd.agent} node --format json"], env, run)
                if done.returncode != 0 or done.stdout.count("CHANGED") != size:
                    raise SystemExit(f"ansible failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
                rows.append((size, ours, fan, theirs))
        finally:
            sshd.stop()
    print("one run each, fresh processes, hosts = ports of one loopback sshd, trivial agent")
    print(f"{'hosts':>5}  {'gpucheck cluster':>16}  {'(of it fan-out)':>15}  {'ansible -m command':>18}  {'ratio':>6}")
    for size, ours, fan, theirs in rows:
        print(f"{size:>5}  {ours:>14.2f} s  {fan:>13.2f} s  {theirs:>16.2f} s  {ours / theirs:>5.2f}x")
    print("ratio = gpucheck cluster wall time / ansible wall time (below 1: gpucheck is faster)")


if __name__ == "__main__":
    main()
