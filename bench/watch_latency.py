"""From a GPU fault to a drained node: how long from an Xid 79 line written to a lab node's kernel log until
`sinfo -R` (this machine as a client of the lab's slurmctld) shows the node drained with gpucheck watch's reason,
over N plants (the node resumed between two). Needs the lab up with its admin node and Slurm, and the watcher on
for the node (gpucheck_agent_watch), as tests/cluster_lab/test_watch_lab.py sets it up, or by hand:

    python3 -m lab up --admin --hosts 1      # then site.yml with -e gpucheck_agent_watch=true (docs/watch.md)
    python3 bench/watch_latency.py [--node node01] [--plants 20]

Prints every latency, then P50 and P99 against the issue's 5 s and NVSentinel's published 10.1 s (P50) / 10.3 s (P99)
from a detected fault to a cordoned node.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lab import kernel_log  # noqa: E402

TARGET_S = 5.0
NVSENTINEL_P50_S, NVSENTINEL_P99_S = 10.1, 10.3
WATCH_REASON = "gpucheck: watch: gpu.xid"


def sinfo_reason(node: str, env: dict[str, str]) -> str:
    """The node's drain reason as `sinfo -R` lists it ("" when it is not drained)."""
    done = subprocess.run(["sinfo", "-R", "--noheader", "--format=%n|%E", f"--nodes={node}"], capture_output=True,
                          text=True, timeout=30, env={**os.environ, **env})
    if done.returncode != 0:
        raise RuntimeError(f"sinfo -R failed: {done.stderr.strip()}")
    return next((line.split("|", 1)[1] for line in done.stdout.splitlines() if line.startswith(f"{node}|")), "")


def resume(node: str, env: dict[str, str], timeout: float = 30) -> None:
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, text=True,
                   timeout=30, env={**os.environ, **env})
    deadline = time.monotonic() + timeout
    while sinfo_reason(node, env):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node} is still drained {timeout:g} s after a resume")
        time.sleep(0.1)


def xid_to_drain(node: str, env: dict[str, str], plants: int, timeout: float = 60) -> list[float]:
    """Seconds from each planted Xid 79 to `sinfo -R` naming the watcher's drain; the node resumed before each."""
    latencies = []
    for _ in range(plants):
        resume(node, env)
        planted = kernel_log.plant(node, kernel_log.xid_message(79))
        while not sinfo_reason(node, env).startswith(WATCH_REASON):
            if time.monotonic() - planted > timeout:
                raise RuntimeError(f"{node} not drained by gpucheck watch within {timeout:g} s of an Xid 79 "
                                   "(is the watcher on? `systemctl status gpucheck-watch` on the node)")
            time.sleep(0.02)
        latencies.append(time.monotonic() - planted)
    resume(node, env)
    return latencies


def percentile(values: list[float], share: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(share * len(ranked) + 0.5) - 1))]  # nearest rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", default="node01")
    parser.add_argument("--plants", type=int, default=20)
    args = parser.parse_args()
    from lab import slurm as lab_slurm

    latencies = xid_to_drain(args.node, lab_slurm.client_env(), args.plants)
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(f"Xid 79 planted on {args.node} -> drained in sinfo -R, {len(latencies)} plants: "
          + " ".join(f"{s:.2f}" for s in latencies))
    print(f"  P50 {p50:.2f} s ({p50 / TARGET_S:.2f}x the 5-s target; NVSentinel's {NVSENTINEL_P50_S} s is "
          f"{NVSENTINEL_P50_S / p50:.1f}x it)")
    print(f"  P99 {p99:.2f} s ({p99 / TARGET_S:.2f}x the 5-s target; NVSentinel's {NVSENTINEL_P99_S} s is "
          f"{NVSENTINEL_P99_S / p99:.1f}x it)")


if __name__ == "__main__":
    main()
