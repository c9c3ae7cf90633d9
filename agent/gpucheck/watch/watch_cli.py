"""`gpucheck watch`: the watcher's command line (the gpucheck_agent role's gpucheck-watch.service runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import tell
from ..cli_types import EXIT_CODES_HELP, Bounded, fail, seconds

# Below a second the poll costs more than it finds; above a minute a thermal slowdown is judged too late.
interval = Bounded(float, "a number of seconds", 1, 60, low_included=True, limits="seconds, 1 to 60")

EPILOG = EXIT_CODES_HELP + """

It runs until stopped (SIGTERM, Ctrl-C) and prints one line per event. The kernel log: /dev/kmsg (a record as
the kernel writes it), or a text file a syslog daemon writes (followed across rotation). A restarted watcher
resumes where it stopped (the state file watch.json under /var/lib/gpucheck), so no line is judged twice; the
first start judges only what is logged from then on (Slurm's health check judges the past).

On a change it runs only the checks the change concerns (an Xid line: gpu.xid, judged from the line itself; an
ECC counter: gpu.ecc_errors; a clock slowdown: gpu.clocks; Fabric Manager gone: gpu.fabric_manager ...), keeps the
report as every run is kept, and with --slurm drains this node at once ("gpucheck: watch: <check> <why>"), with
--kubernetes taints its Node (gpucheck/unhealthy=watch:NoSchedule, the condition GPUCheckHealthy False). It never
resumes: a node it drained returns after its active checks pass (docs/watch.md). Slurm's health check stays.

Repairs (with --slurm, where the profile's `repair:` names one for every check that failed; none by default): once
the node's jobs end it restarts Fabric Manager or DCGM, resets the GPUs the failures name (nvidia-smi -r) or, where
node.yaml allows, reboots; then proves the node (the GPU checks, then the repaired GPUs' burn-in) and resumes it,
or leaves it drained "gpucheck: needs-hands: ..." with an RMA archive in /var/lib/gpucheck/rma.

examples:
  gpucheck watch                           watch and report; drain nothing
  gpucheck watch --slurm                   drain this node in Slurm on a failure (the systemd unit's way)
  gpucheck watch --kubernetes --kubernetes-node "$NODE_NAME"
                                           taint this node's Node on a failure (in a pod: its service account)
  gpucheck watch --kernel-log /var/log/kern.log --interval 2
"""


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser("watch", help="watch the kernel log and NVML; judge and drain as a fault appears",
                         description="Follow the kernel log as it is written and poll NVML's cheap fields; on a "
                                     "change, run the checks it concerns and (with --slurm or --kubernetes) take "
                                     "this node out of scheduling.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("--kernel-log", metavar="PATH", default="/dev/kmsg",
                     help="/dev/kmsg (default) or a text file the syslog daemon writes the kernel's lines to")
    cmd.add_argument("--interval", type=interval, default=5.0, metavar="SECONDS",
                     help="how often NVML's fields are read (default: 5)")
    cmd.add_argument("--nvml-timeout", type=seconds, default=10.0, metavar="SECONDS",
                     help="an NVML poll not answered by then is a hung NVML (default: 10)")
    cmd.add_argument("--slurm", action="store_true", help="drain this node in Slurm on a failure")
    cmd.add_argument("--slurm-node", metavar="NAME", help="this node's NodeName in Slurm (default: the node whose "
                     "NodeName or NodeHostName is this host's name)")
    kube = cmd.add_argument_group("Kubernetes (docs/kubernetes.md)")
    kube.add_argument("--kubernetes", action="store_true", help="taint this node's Node on a failure")
    tell.add_kubernetes_options(kube)
    cmd.add_argument("--config", metavar="FILE", help="site configuration (default: /etc/gpucheck/node.yaml)")


def run(args: argparse.Namespace) -> int:
    from .. import config
    from .watcher import Settings, Watcher

    if args.slurm_node and not args.slurm:
        fail("--slurm-node needs --slurm")
    if wrong := tell.misused(args):
        fail(wrong)
    scheduler: tell.Scheduler | None = (tell.Slurm(args.slurm_node) if args.slurm else
                                        tell.Kubernetes(args.kubernetes_node, args.kubeconfig) if args.kubernetes
                                        else None)
    try:
        watcher = Watcher(Settings(kernel_log=args.kernel_log, interval_s=args.interval, scheduler=scheduler,
                                   config_path=args.config, call_limit_s=args.nvml_timeout))
    except config.ConfigError as exc:
        fail(str(exc))
    return watcher.run()
