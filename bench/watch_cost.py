"""What an idle `gpucheck watch` costs: CPU (user + system, of one core) and resident memory over a stretch of
time, beside an idle `sleep` measured the same way in the same run (the baseline: what "nothing" reads as on this
machine). The watcher runs as the unit runs it, with the fake NVML answering for an 8-GPU DGX H100 (each poll is
the same NVML calls a real node answers; a real driver answers them through ioctls, which cost more per call than
the fake's memory reads) and a kernel log file it follows. The issue's limits: 1 % of one core, 100 MiB.

    python3 bench/watch_cost.py [--seconds 600] [--interval 5] [--real-nvml]

--real-nvml: the machine's own NVML and GPUs (a GPU node, the lent GPU machine), not the fake.

Prints one line per process and the watcher's figures against the limits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree_for  # noqa: E402

TICK_HZ = os.sysconf("SC_CLK_TCK")
CPU_LIMIT, RSS_LIMIT_MIB = 0.01, 100


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_HZ  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=5.0, help="the watcher's NVML poll (default: the unit's 5)")
    parser.add_argument("--real-nvml", action="store_true", help="this machine's NVML and GPUs, not the fake")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="watch-cost-") as tmp:
        work = Path(tmp)
        scenario = work / "scenario.scn"
        shutil.copy(scenario_path("dgx-h100"), scenario)
        (work / "kern.log").touch()
        (work / "node.yaml").write_text("profile: dgx-h100\n")
        env = {**os.environ, "GPUCHECK_STATE_DIR": str(work / "state"), "GPUCHECK_CONFIG": str(work / "node.yaml"),
               "PYTHONPATH": str(ROOT / "agent")}
        if args.real_nvml:
            (work / "node.yaml").write_text("profile: auto\n")
        else:
            env.update(env_for(scenario, build_library()),
                       GPUCHECK_SYSFS_ROOT=str(write_pci_tree_for(scenario, work / "sys")))
        watcher = subprocess.Popen([sys.executable, "-m", "gpucheck", "watch", "--kernel-log", str(work / "kern.log"),
                                    "--interval", str(args.interval)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        sleeper = subprocess.Popen(["sleep", str(args.seconds + 60)])
        try:
            state = work / "state" / "watch.json"
            deadline = time.monotonic() + 60
            while not state.exists():  # started: imports done, NVML read once
                if time.monotonic() > deadline or watcher.poll() is not None:
                    raise SystemExit("the watcher did not start")
                time.sleep(0.1)
            start = {p.pid: cpu_seconds(p.pid) for p in (watcher, sleeper)}
            began = time.monotonic()
            peak = 0.0
            while time.monotonic() - began < args.seconds:
                time.sleep(min(5.0, args.seconds))
                peak = max(peak, rss_mib(watcher.pid))
            took = time.monotonic() - began
            used = {pid: cpu_seconds(pid) - was for pid, was in start.items()}
            rss = {p.pid: rss_mib(p.pid) for p in (watcher, sleeper)}
        finally:
            for proc in (watcher, sleeper):
                proc.terminate()
                proc.wait(timeout=30)
    nvml = "this machine's NVML" if args.real_nvml else "8 GPUs, fake NVML"
    print(f"idle over {took:.0f} s, NVML polled every {args.interval:g} s ({nvml}), a log file followed")
    for name, proc in (("sleep (baseline)", sleeper), ("gpucheck watch", watcher)):
        print(f"  {name:<18} CPU {used[proc.pid]:6.2f} s = {used[proc.pid] / took:7.3%} of one core   "
              f"RSS {rss[proc.pid]:6.1f} MiB")
    share = used[watcher.pid] / took
    print(f"  watcher - baseline: {(used[watcher.pid] - used[sleeper.pid]) / took:.3%} of one core "
          f"(limit {CPU_LIMIT:.0%}: {share / CPU_LIMIT:.2f}x of it); RSS peak {peak:.1f} MiB "
          f"(limit {RSS_LIMIT_MIB} MiB: {peak / RSS_LIMIT_MIB:.2f}x of it, {peak / max(rss[sleeper.pid], 0.1):.0f}x "
          f"sleep's)")


if __name__ == "__main__":
    main()
