"""What Slurm's health check costs on a provisioned lab node: `gpucheck node --slurm`'s checks (`gpucheck node`:
the same passive checks, with no Slurm to tell), run on the node itself, with its stack's framework probe asked in
every run (the kept answers removed first: what every run cost before they were kept) against the kept answers
reused. CPU seconds are the run's and its children's (bash's `time`), the fraction is of the health check's
60-s deadline (`--deadline`'s default). Needs the lab up, provisioned (`python3 -m lab up --hosts 1` from a golden
image, or site.yml run on it):
    python3 bench/health_check_cost.py [--host node01] [--runs 5]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys

DEADLINE_S = 60.0
# Each run prints "<wall> <user> <sys>" on a line of its own (bash's TIMEFORMAT), its report going to /dev/null.
RUN = "TIMEFORMAT='COST %R %U %S'; {forget} time (gpucheck node --format json >/dev/null 2>&1)"
FORGET = "rm -rf /root/.local/state/gpucheck/probes;"


def measure(host: str, runs: int, forget: bool) -> list[tuple[float, float]]:
    script = "; ".join([RUN.format(forget=FORGET if forget else "")] * runs)
    done = subprocess.run([sys.executable, "-m", "lab", "ssh", host, "--", "bash", "-c", shlex.quote(script)],
                          capture_output=True, text=True, timeout=600, check=False)
    costs = [line.split()[1:] for line in done.stderr.splitlines() if line.startswith("COST ")]
    if done.returncode != 0 or len(costs) != runs:
        raise SystemExit(f"the runs on {host} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return [(float(wall), float(user) + float(system)) for wall, user, system in costs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="node01")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    measure(args.host, 1, forget=False)  # a first run keeps the answers the reusing runs read
    asked = measure(args.host, args.runs, forget=True)
    reused = measure(args.host, args.runs, forget=False)
    base_cpu = statistics.median(cpu for _, cpu in asked)
    print(f"gpucheck node on {args.host}, {args.runs} runs each (median; CPU = the run and its children)")
    for label, costs in (("the framework probe asked (before)", asked), ("its kept answers reused (now)", reused)):
        wall, cpu = statistics.median(w for w, _ in costs), statistics.median(c for _, c in costs)
        print(f"  {label:<36} {wall:6.2f} s wall ({wall / DEADLINE_S:5.1%} of the 60-s deadline)  "
              f"{cpu:6.2f} CPU-s  {cpu / base_cpu:5.2f}x")


if __name__ == "__main__":
    main()
