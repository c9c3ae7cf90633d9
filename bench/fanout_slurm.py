"""The node fan-out through Slurm (`gpucheck cluster --launcher slurm`: one salloc + srun over every node) against
the SSH fan-out (the default), on the same lab hosts, in one run, as a ratio.

Two commands on every host, each fanned out both ways, rounds alternating so both see the same machine load:
- `true`: nothing runs on the node, so what is timed is the launch path alone (SSH connections from here, or
  slurmctld's allocation and slurmd's fan-out tree);
- `gpucheck node`: the real node checks as the cluster command runs them (the fake NVML on the lab).
It needs the lab up with its Slurm (make demo ARGS=--keep, or: python3 -m lab up --admin, ansible-playbook -i
inventory/lab site.yml, then python3 -m lab slurm), and is run as root:
    .venv/bin/python bench/fanout_slurm.py [--rounds 5]
docs/slurm.md ("At 1,000 and 10,000 nodes") reads these figures."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "agent"), str(ROOT)]

from gpucheck import slurm  # noqa: E402
from gpucheck.cluster import fanout  # noqa: E402
from gpucheck.cluster.context import Options  # noqa: E402
from gpucheck.cluster.inventory import load  # noqa: E402
from gpucheck.cluster.slurm import fanout as slurm_fanout  # noqa: E402
from lab import config as lab_config  # noqa: E402
from lab import slurm as lab_slurm  # noqa: E402


def timed(fan, hosts, options, *more) -> tuple[float, int]:
    """Seconds for one fan-out, and how many hosts answered with a finished command."""
    got: list = []
    began = time.perf_counter()
    fan(hosts, options, *more, got.append)
    return time.perf_counter() - began, sum(1 for o in got if o.exit_code is not None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.update(lab_slurm.client_env())
    hosts = load([str(lab_config.INVENTORY_DIR)], None, None).hosts
    states = slurm.all_nodes()
    idle = [h for h in hosts if states.get(h.name) and states[h.name].runs_jobs_now]
    if len(idle) != len(hosts):
        print(f"not every lab host is idle in Slurm ({', '.join(f'{n} {s.state}' for n, s in states.items())}): "
              "resume them first (scontrol update nodename=... state=resume)", file=sys.stderr)
        return 3
    gpus = min(states[h.name].gpus for h in hosts)
    print(f"{len(hosts)} lab hosts, {args.rounds} rounds each way, alternating\n")
    print(f"{'command':<16} {'ssh median s':>13} {'srun median s':>14} {'srun / ssh':>11}   (min..max)")
    for label, command in (("true", "true"), ("gpucheck node", "gpucheck")):
        options = Options(remote_command=command, host_timeout=300)
        ssh_s, srun_s = [], []
        for _ in range(args.rounds):
            for into, fan, more in ((ssh_s, fanout.fan_out, ()), (srun_s, slurm_fanout.through_srun, (gpus,))):
                seconds, answered = timed(fan, hosts, options, *more)
                if answered != len(hosts):
                    print(f"{label}: only {answered} of {len(hosts)} hosts answered", file=sys.stderr)
                    return 1
                into.append(seconds)
        a, b = statistics.median(ssh_s), statistics.median(srun_s)
        print(f"{label:<16} {a:>13.2f} {b:>14.2f} {b / a:>10.2f}x   (ssh {min(ssh_s):.2f}..{max(ssh_s):.2f}, "
              f"srun {min(srun_s):.2f}..{max(srun_s):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
