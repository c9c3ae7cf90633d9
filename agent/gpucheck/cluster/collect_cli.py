"""`gpucheck history collect`'s command line (the work is collect.py). A verb of `gpucheck history` that lives here
because it reads the inventory and goes over SSH, which the history package does not; main.py hangs it there."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..cli_types import seconds, whole_number
from ..history.store import HistoryError, default_path
from ..model import EXIT_OK, EXIT_UNKNOWN
from ..redact import for_terminal
from .cli import DEFAULTS, fail
from .context import Options

EPILOG = """\
Run it from the admin node as often as the history should be current (a timer every hour, or before reading
`gpucheck history`): each node is read from where the last collect ended, so a collect that finds nothing new costs
one SSH command per node. Nodes keep their last 500 reports (every failure, every run of active checks, the latest
passive pass): collect at least that often.

exit codes: 0 every node read; 3 bad input, a store that cannot be used, or a node that could not be read (the
others are still recorded).

examples:
  gpucheck history collect -i inventory/prod                 every GPU node's new kept reports
  gpucheck history collect -i inventory/prod --limit node07  one node
  gpucheck history runs --node node07                        then: its runs, the scheduled checks among them
"""


def add_parser(verbs: Any, common: argparse.ArgumentParser) -> None:
    p = verbs.add_parser("collect", parents=[common], help="record every node's kept reports (over SSH)",
                         description="Read each node's kept reports (`gpucheck kept` on the node, over SSH) into "
                                     "the history store: what Slurm's health check and the scheduled checks saw "
                                     "between cluster runs. Each report once; each node from where it was last "
                                     "collected.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--inventory", action="append", metavar="INVENTORY",
                   help="inventory file, directory or host list; repeatable (default: as Ansible finds it)")
    p.add_argument("--pattern", metavar="PATTERN", help="Ansible host pattern (default: the gpu_nodes group if the "
                   "inventory has one, else all)")
    p.add_argument("-l", "--limit", metavar="SUBSET", help="further limit the hosts, as ansible --limit")
    p.add_argument("--forks", type=whole_number, default=DEFAULTS.forks, metavar="N",
                   help="nodes read at once (default: %(default)s)")
    p.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS",
                   help="limit of each SSH command (a page of 50 reports) (default: %(default)g)")
    p.add_argument("--connect-timeout", type=seconds, default=DEFAULTS.connect_timeout, metavar="SECONDS",
                   help="SSH connect limit per node (default: %(default)g)")
    p.add_argument("--remote-command", default=DEFAULTS.remote_command, metavar="CMD",
                   help="the agent's command on the nodes (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from .collect import collect  # SSH and Ansible's inventory: imported by the commands that use them only
    from .inventory import InventoryError, load

    options = Options(forks=args.forks, connect_timeout=args.connect_timeout, remote_command=args.remote_command)
    try:
        if not options.agent_argv():
            raise ValueError("empty: give the agent's command on the nodes, e.g. /opt/gpucheck/bin/gpucheck")
        inventory = load(args.inventory, args.pattern, args.limit)
        path = args.store or default_path(cluster=inventory.cluster)
    except ValueError as exc:
        return fail(f"--remote-command: {exc}")
    except RuntimeError as exc:
        return fail(f"{exc}: give one with --store FILE")
    except (InventoryError, HistoryError) as exc:
        return fail(str(exc))
    print(f"history collect: the kept reports of {len(inventory.hosts)} node(s) of cluster {inventory.cluster} into "
          f"{path}", flush=True)
    try:
        found = collect(list(inventory.hosts), options, Path(path), args.timeout, say)
    except HistoryError as exc:
        return fail(str(exc))
    read = sum(c.failed is None for c in found)
    print(f"history: {sum(c.recorded for c in found)} run(s) recorded from {read} of {len(found)} node(s)")
    return EXIT_OK if read == len(found) else EXIT_UNKNOWN


def say(done: Any) -> None:
    """One node's outcome (collect.Collected), as it is known."""
    where = f", newest {done.newest}" if done.newest else ""
    if done.recorded or done.known or not done.failed:
        print(f"  {done.node}: {done.recorded} new run(s), {done.known} recorded before{for_terminal(where)}",
              flush=True)
    for problem in done.problems:  # the node's own words (names, errors): shown as escapes where a terminal acts
        print(f"  {done.node}: {for_terminal(problem)}", flush=True)
    if done.failed:
        print(f"gpucheck: error: {done.node}: could not be read: {for_terminal(done.failed)}", file=sys.stderr,
              flush=True)
