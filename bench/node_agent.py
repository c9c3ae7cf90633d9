"""How long `gpucheck node` takes on a healthy simulated DGX H100, against `import pynvml` alone.

Both run as fresh processes in this same run, so the ratio holds on any machine:
    python bench/node_agent.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.fakenvml import build_library, env_for, scenario_path  # noqa: E402


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=120)
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "node.yaml"
        config.write_text("{}\n")
        env = env_for(scenario_path("dgx-h100"), build_library())
        env.update(GPUCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT / "agent") + os.pathsep + env.get("PYTHONPATH", ""))
        # As installed by pip: byte-compiled once, not recompiled on every start.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "agent")], check=True, env=env)
        baseline = timed([sys.executable, "-c", "import pynvml"], env, args.runs)
        gpu_only = timed([sys.executable, "-m", "gpucheck", "node", "--profile", "dgx-h100", "--only", "gpu",
                          "--skip", "gpu.xid", "--format", "json"], env, args.runs)
        whole = timed([sys.executable, "-m", "gpucheck", "node", "--profile", "dgx-h100", "--format", "json"],
                      env, args.runs)
    base = statistics.median(baseline)
    print(f"runs per command: {args.runs} (median wall time, fresh process each)")
    print(f"  python -c 'import pynvml'                 {base * 1000:7.1f} ms   1.00x")
    for label, times in (("gpucheck node --only gpu (NVML checks)", gpu_only),
                         ("gpucheck node (every passive check)", whole)):
        med = statistics.median(times)
        print(f"  {label:<42}{med * 1000:7.1f} ms  {med / base:5.2f}x   (agent time above import: "
              f"{(med - base) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
