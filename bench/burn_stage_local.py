"""The cluster's burn stage (agent/gpucheck/cluster/stages/burn.py) on this machine alone, as a one-node cluster,
for a lent GPU machine (bench/gpu_session.sh, step cluster-burn) where no sshd runs: the stage's commands go to a
local shell instead of SSH, through the same RemoteHosts interface the tests' fakes use. Everything else is the
stage's own: the node's `gpucheck node --only gpu.burn` started with the stage's arguments, followed, judged, and
the report built with its `burn` section (the heat map's data). One node has no fabric to load: the all-reduce
part needs two.

    PYTHONPATH=agent python3 bench/burn_stage_local.py --seconds 60 [--report DIR] [--agent CMD]

Prints one JSON line: the stage's results (check, status, reason) and per GPU its burn median and hottest sample;
exit 0 when the node burned and every result passed (or was skipped), 1 otherwise."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "agent"))

from gpucheck.cluster import fanout, handoff  # noqa: E402
from gpucheck.cluster.context import ClusterContext, Options  # noqa: E402
from gpucheck.cluster.inventory import Host, Inventory  # noqa: E402
from gpucheck.cluster.ssh.client import limited  # noqa: E402
from gpucheck.cluster.ssh.result import Remote  # noqa: E402
from gpucheck.cluster.stages import burn  # noqa: E402

NODE = "local"


class LocalBackground:
    """A command left running here, as ssh's Background follows one on a node."""

    def __init__(self, cmd: str, timeout: float):
        self.cmd, self.began, self.killed = cmd, time.monotonic(), False
        self.proc = subprocess.Popen(["sh", "-c", limited(cmd, timeout)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)

    def wait(self, timeout: float | None = None) -> Remote:
        out, err = self.proc.communicate()
        return Remote(NODE, self.cmd, out, err, self.proc.returncode, wall_s=time.monotonic() - self.began)

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)


class LocalHosts:
    """RemoteHosts for the one node that is this machine."""

    def start(self, node: str, cmd: str, timeout: float) -> LocalBackground:
        return LocalBackground(cmd, timeout)

    def run(self, node: str, cmd: str, timeout: float) -> Remote:
        done = subprocess.run(["sh", "-c", limited(cmd, timeout)], capture_output=True, text=True, check=False)
        return Remote(NODE, cmd, done.stdout, done.stderr, done.returncode)


def node_checks(options: Options) -> Any:
    """What the fan-out would have gathered from this node (its facts and thresholds), judged as the fan-out judges
    it; of its checks only gpu.count: the node's passive checks are not this bench's subject, and a lent machine
    fails some (a VM's memory under a profile's minimum) that must not keep it from the burn."""
    argv = [*options.agent_argv(), "node", "--format", "json", "--only", "gpu.count"]
    argv += ["--profile", options.profile] if options.profile else []
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=options.host_timeout)
    return fanout.interpret(NODE, done.stdout, done.stderr, done.returncode, time.monotonic() - began,
                            options.host_timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="the burn's length (default: 60)")
    parser.add_argument("--agent", default=f"{shlex.quote(sys.executable)} -m gpucheck",
                        help="the agent's command (default: this python -m gpucheck)")
    parser.add_argument("--profile", help="the node's profile (default: its own)")
    parser.add_argument("--report", type=Path, help="write report.json, report.html ... here")
    args = parser.parse_args(argv)
    options = Options(profile=args.profile, remote_command=args.agent, stages=("burn",), stages_asked=("burn",),
                      burn_seconds=args.seconds)
    host = Host(NODE, "127.0.0.1", 22, "root", None, (), True, vars={"rack": "local"})
    ctx = ClusterContext(options, Inventory(["this machine"], "all", None, [host]))
    ctx.nodes[NODE] = node_checks(options)
    began = time.monotonic()
    results = burn.burn_stage(ctx, LocalHosts())  # type: ignore[arg-type]
    ctx.results.extend(results)
    if args.report:
        from gpucheck.report.cluster import ReportWriter

        ReportWriter(args.report).write(handoff.document(ctx, "", time.monotonic() - began, sys.argv, True))
    gpus = {label: {"TFLOPS_median": g.get("burn_TFLOPS_median"), "temperature_C_max": g.get("burn_temperature_C_max"),
                    "points": len(((g.get("burn_timeline") or {}).get("TFLOPS") or {}).get("TFLOPS") or [])}
            for label, g in ((ctx.burn.get("nodes") or {}).get(NODE, {}).get("gpus") or {}).items()}
    print(json.dumps({"node": ctx.nodes[NODE].status.value, "wall_s": round(time.monotonic() - began, 1),
                      "results": [{"check": r.check, "status": r.status.value, "reason": r.reason} for r in results],
                      "gpus": gpus}))
    burned = any(r.check == "cluster.burn.gpus" for r in results)
    return 0 if burned and all(r.status.value in ("pass", "skip") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
