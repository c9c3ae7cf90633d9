"""`python3 -m lab`: the command line of the lab (argument parsing and output only)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from lab import config
from lab.errors import EXIT_OK, EXIT_UNKNOWN, LabError, reported
from lab.progress import say

DESCRIPTION = """\
The gpucheck lab: a real multi-host cluster on this one machine, with simulated GPUs.

Each lab host boots systemd (systemd-nspawn --boot) in a network namespace of its own (its own
address on a private /24 behind the bridge gclab0), with its own hostname, its own root filesystem
(a cached Debian 12 base + a per-host overlay) and its own sshd (Debian's ssh.service); root logs in
with a key the lab generates, checked against a known_hosts the lab writes. A reboot inside a host
(`systemctl reboot`, Ansible's reboot module) boots it again with a new boot id. A small proxy on
the bridge lets hosts reach the package archives (Debian, PyPI) and nothing else. Each host sees
simulated GPUs (lab/fakenvml) from its own scenario.

Typical session (as root, from the repository root, in the virtualenv `make` creates: . .venv/bin/activate):
  python3 -m lab up --hosts 3                 # hosts node01..node03, inventory/lab/hosts.yml
  python3 -m lab status
  python3 -m lab ssh node02 -- ls /etc/fakenvml   # any command; no command = interactive shell
  ansible-playbook -i inventory/lab site.yml
  python3 -m lab build                        # golden image: site.yml run once, later `up`s start provisioned
  python3 -m lab fault node03 scenario ecc-uncorrected
  python3 -m lab down                         # removes every namespace, link, mount and process
  python3 -m lab demo                         # all of it: build, up 4 (one faulty), site.yml, validate, down

Several labs on one machine: GPUCHECK_LAB_INSTANCE=K (1 to 9; 0, the default, is the one above) gives every
command a lab of its own: bridge gcKlab0, 10.213.(7+K).0/24, inventory/lab-K (the images are shared).

Exit codes: 0 done, 1 status: something is not as expected, 2 a fault/build step failed,
3 could not run (not root, no namespaces, lab already up / not up, bad arguments).
"""

FAULT_HELP = """\
Inject a fault into one lab host, to prove that the checks name the right node.

kinds:
  down                 stop the host's sshd (systemctl stop ssh): the host stays alive but is unreachable
  up                   start its sshd again (undoes `down`)
  hang [CALL]          make an NVML call hang on that host (default: nvmlDeviceGetCount_v2,
                       which every agent run makes)
  scenario NAME        replace the host's simulated GPUs with scenario NAME (lab/scenarios/NAME.scn); a
                       program that keeps NVML open sees the change, as counters change on a real GPU
  xid [CODE]           log an Xid (default 79, fallen off the bus) in the host's kernel log, the file its
                       gpucheck watch follows (lab/kernel_log.py)
  ib [DEV/]COUNTER[+N] raise one counter of a simulated InfiniBand port by N (default mlx5_0's link_downed by 1: a
                       flap); the host needs `up --ib-ports N`
  drift PKG==VER       pip-install another version of one package in the host's virtualenvs
                       (those under /opt, /usr/local, /root, /srv that have it, or --venv DIR)
  drift PKG=VER        apt-get install another version of one Debian package

examples:
  python3 -m lab fault node02 down
  python3 -m lab fault node03 scenario ecc-uncorrected
  python3 -m lab fault node01 drift numpy==1.26.0
  python3 -m lab fault node02 ib mlx5_3/symbol_error+50
"""


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python3 -m lab", description=DESCRIPTION, formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("up", help="bring up N lab hosts and write inventory/lab/hosts.yml", formatter_class=fmt,
                       description="Bring up N lab hosts (node01, node02, ...). The first run builds the Debian"
                                   " base with mmdebstrap (~40 s, cached in /var/cache/gpucheck-lab); later"
                                   " runs take a few seconds. Uses the golden image of --playbook if `build`"
                                   " made one for the playbook as it is now.")
    p.add_argument("--hosts", type=int, metavar="N", help="number of hosts (default 3, or one per --scenarios)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scenario", metavar="NAME",
                   help=f"simulated GPUs of every host (default {config.DEFAULT_SCENARIO})")
    g.add_argument("--scenarios", metavar="A,B,...", help="one scenario per host, in order, e.g. "
                   "dgx-h100,dgx-h100,dgx-h100,ecc-uncorrected")
    p.add_argument("--subnet", default=config.DEFAULT_SUBNET,
                   help=f"private /24 for the hosts (default {config.DEFAULT_SUBNET})")
    p.add_argument("--allow", action="append", default=[], metavar="HOST",
                   help="one more host name the hosts may reach through the proxy (besides Debian and PyPI)")
    p.add_argument("--no-golden", action="store_true", help="start from the bare base even if a golden image exists")
    p.add_argument("--playbook", type=Path, default=config.DEFAULT_PLAYBOOK,
                   help="whose golden image to use (default site.yml)")
    p.add_argument("--admin", action="store_true",
                   help=f"also an admin node, {config.ADMIN_HOST} (no GPUs, the address before node01): inventory "
                        "group admin, where site.yml's scheduler stage runs slurmctld")
    p.add_argument("--ib-ports", type=int, default=0, metavar="N",
                   help="give every GPU host N simulated InfiniBand ports (ConnectX-7, NDR 400, ACTIVE, counters at 0) "
                        "in its fake sysfs; `fault HOST ib` steps their counters")
    p.add_argument("--share", action="append", default=[], type=Path, metavar="DIR",
                   help="bind DIR (absolute) read-only at the same path into every GPU host, as a site's shared "
                        "filesystem gives the nodes one copy of, e.g., a training virtualenv; repeatable")
    p.add_argument("--kubernetes", action="store_true",
                   help="also a Kubernetes 1.20 control plane on the bridge, and every GPU host a node (its own "
                        "kubelet, containerd and runc): built from Debian's source package once per machine "
                        "(minutes), then cached; kubectl with `python3 -m lab kubectl ...` (docs/kubernetes.md)")

    sub.add_parser("slurm", help="make this machine a client of the lab's Slurm (admin01's slurmctld): prints "
                   "the SLURM_CONF to export for scontrol, sinfo and gpucheck cluster --drain")
    sub.add_parser("status", help="show the lab's hosts, whether they run and answer SSH, their scenario and faults"
                   ).add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("kubectl", help="kubectl as the lab's admin, against the control plane of up --kubernetes",
                       description="Runs the kubectl built with the control plane, with the lab's admin "
                                   "kubeconfig (/run/gpucheck-lab/kubernetes/kubeconfig), e.g. `python3 -m lab "
                                   "kubectl get nodes -o wide`.")
    p.add_argument("args", nargs=argparse.REMAINDER, help="kubectl's arguments")
    sub.add_parser("down", help="remove the whole lab (also after an interrupted up or a killed host)")

    p = sub.add_parser("fault", help="inject a fault into one host (down, up, hang, scenario, xid, ib, drift)",
                       description=FAULT_HELP, formatter_class=fmt)
    p.add_argument("host", help="host name (node02) or address")
    p.add_argument("kind", choices=["down", "up", "hang", "scenario", "drift", "xid", "ib"])
    p.add_argument("arg", nargs="?", help="scenario NAME, drift PKG==VER / PKG=VER, hang CALL, xid CODE or ib "
                                          "[DEV/]COUNTER[+N]")
    p.add_argument("--venv", help="for drift: the virtualenv to change (default: every one that has the package)")

    p = sub.add_parser("ssh", help="ssh into a host as root (interactive, or run CMD)",
                       description="ssh into a lab host as root with the lab's key and known_hosts, e.g."
                                   " `python3 -m lab ssh node01 -- ls -l /etc/fakenvml`.")
    p.add_argument("host", help="host name (node01) or address")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="command to run (default: a login shell)")

    p = sub.add_parser("build", help="build (or reuse) the golden image: one host provisioned by the playbook",
                       formatter_class=fmt,
                       description="Bring up one fresh host, run `ansible-playbook PLAYBOOK` against it and keep"
                                   " its filesystem as a layer that later `up`s start from. Cached by the content"
                                   " of the playbook's directory tree: an unchanged tree reuses the image.")
    p.add_argument("--fresh", action="store_true", help="rebuild even if an image for this tree exists")
    p.add_argument("--playbook", type=Path, default=config.DEFAULT_PLAYBOOK, help="default: site.yml")

    p = sub.add_parser("demo", help="the whole story: build, up 4 hosts (one faulty), provision, validate, down",
                       formatter_class=fmt,
                       description="Build (or reuse) the golden image of the playbook, bring up 4 hosts (three"
                                   " healthy simulated DGX H100s and one with --fault), run the playbook against"
                                   " inventory/lab, validate it with this repository's `gpucheck cluster` (every"
                                   " host's agent, then the cluster-wide stages), print the report's path and"
                                   " the faulty host, and take the lab down."
                                   " Exit 0 when exactly the faulty host was named.")
    p.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    p.add_argument("--playbook", type=Path, default=config.DEFAULT_PLAYBOOK, help="default: site.yml")
    p.add_argument("--fresh", action="store_true", help="rebuild the golden image even if it is up to date")
    p.add_argument("--stages", help="gpucheck cluster stages to run (default: all; a playbook without MPI and "
                                    "frameworks needs consistency,stragglers)")
    p.add_argument("--fault", default="ecc-uncorrected", metavar="SCENARIO",
                   help="scenario of the faulty 4th host (default ecc-uncorrected)")
    return parser


def stays_up(what: str = "the lab is up") -> str:
    """What to try on a lab left up for the user, said last by `up` and `demo --keep`; never said of hosts taken
    down again before the user could use them (the golden image's build host, a demo without --keep)."""
    from lab import state

    st = state.load()
    hosts = [h.name for h in st.hosts] if st is not None else []
    node = next((name for name in hosts if name != config.ADMIN_HOST), config.host_name(1))
    return (f"{what}: {', '.join(hosts) or 'no host'}; try `python3 -m lab ssh {node}`, `python3 -m lab status`; "
            "`python3 -m lab down` removes it")


def _print_status(code: int, rows: list[dict], as_json: bool) -> None:
    from lab import cluster, state

    if as_json:
        print(json.dumps({"exit": code, "hosts": rows}, indent=2))
        return
    st = state.load()
    if st is not None:
        print(cluster.describe(st))
    print(f"{'HOST':8} {'ADDRESS':15} {'PROCESS':8} {'SSH':9} {'SCENARIO':18} FAULTS")
    for r in rows:
        print(f"{r['name']:8} {r['address']:15} {'running' if r['running'] else 'GONE':8} "
              f"{'answers' if r['ssh'] else 'no':9} {r['scenario']:18} {', '.join(r['faults']) or '-'}")


def dispatch(args: argparse.Namespace) -> int:
    from lab import cluster, ssh, state

    if config.INSTANCE_ERROR:  # never guess which lab a command means
        raise LabError(config.INSTANCE_ERROR)
    if args.command == "up":
        scenarios = None
        if args.scenarios:
            scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        hosts = args.hosts if args.hosts is not None else len(scenarios) if scenarios else 3
        if args.scenario:
            scenarios = [args.scenario] * hosts
        cluster.up(cluster.UpOptions(hosts=hosts, scenarios=scenarios, subnet=args.subnet,
                                     allow=tuple(args.allow), golden=not args.no_golden,
                                     playbook=args.playbook.resolve(), admin=args.admin,
                                     kubernetes=args.kubernetes, share=tuple(args.share),
                                     ib_ports=args.ib_ports))
        say(stays_up())
        return EXIT_OK
    if args.command == "slurm":
        from lab import slurm

        print(f"export SLURM_CONF={slurm.client_env()['SLURM_CONF']}")
        return EXIT_OK
    if args.command == "kubectl":
        from lab.kubernetes import lab_plane

        plane = lab_plane.load()
        argv = [str(plane.bin_dir / "kubectl"), f"--kubeconfig={plane.kubeconfig}", *args.args]
        return subprocess.run(argv, stdin=sys.stdin).returncode
    if args.command == "down":
        print(cluster.down())
        return EXIT_OK
    if args.command == "status":
        code, rows = cluster.status()
        _print_status(code, rows, args.json)
        return code
    if args.command == "fault":
        print(cluster.fault(args.host, args.kind, args.arg, args.venv))
        return EXIT_OK
    if args.command == "ssh":
        cluster.require_root()
        h = state.load_up().host(args.host)
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        argv = ssh.ssh_argv(h.address, batch=bool(cmd))
        if not cmd and sys.stdin.isatty():
            argv.insert(1, "-t")
        sys.stdout.flush()
        os.execvp(argv[0], argv + cmd)
    if args.command == "build":
        from lab import golden

        print(golden.build(args.playbook.resolve(), fresh=args.fresh))
        return EXIT_OK
    if args.command == "demo":
        from lab import demo

        try:
            return demo.run(args.playbook.resolve(), keep=args.keep, fault_scenario=args.fault, fresh=args.fresh,
                            stages=args.stages)
        finally:
            if args.keep and state.load() is not None:  # not after an `up` that failed and removed its hosts
                say(stays_up("--keep: the lab stays up"))
    raise LabError("no command given: try `python3 -m lab --help`")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM, or a SIGINT even when started in the background (where shells ignore it), stops a
    # command the same way Ctrl-C does: `up` then removes what it had created.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    try:
        # kubectl's own options (-n NAMESPACE, -o wide) are kubectl's, not this parser's
        args = argparse.Namespace(command="kubectl", args=argv[1:]) if argv[:1] == ["kubectl"] and "-h" not in \
            argv[1:2] and "--help" not in argv[1:2] else parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage and a one-line error (exit 2)
        return EXIT_OK if exc.code == 0 else EXIT_UNKNOWN
    if args.command is None:
        parser.print_help()
        return EXIT_UNKNOWN
    try:
        return reported(lambda: dispatch(args))
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
