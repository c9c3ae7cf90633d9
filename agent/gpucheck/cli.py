"""The node-side commands: `gpucheck node | parse | profiles | checks | net`. Bad input is one line and
exit 3. `gpucheck.main` puts them beside `gpucheck cluster` under one parser."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from . import config, netbench, profiles, stopped_run, tell
from .cli_types import EXIT_CODES_HELP, Bounded, Parser, fail, gpu_index, port, seconds
from .files import read_file, write_atomically, write_output
from .model import EXIT_OK, EXIT_UNKNOWN
from .node.kernel_log import XID_LOOKBACK_S

MAX_PARSE_INPUT_B = 64 * 1024 * 1024  # `gpucheck parse` reads at most this: no tool log is larger
DEFAULT_BURN_S = 60.0
SLURM_DEADLINE_S = 60.0  # LBNL NHC's default timeout for a health check run by slurmd
# a burn shorter than a second has no ~1 s window to judge; a day is longer than any acceptance burn-in
burn_seconds = Bounded(float, "a number of seconds", 1, 24 * 3600, low_included=True, high_note=" (one day)",
                       limits="seconds, 1 to 86400 = one day")

SCHEDULED_KIND = re.compile(r"[a-z][a-z0-9-]{0,31}")
SCHEDULED_HELP = ("run as the scheduled KIND check (daily, weekly) in the Slurm job `gpucheck schedule` submitted: "
                  "tell Slurm as --slurm does, with the drain reason \"gpucheck: scheduled KIND: ...\", which the "
                  "passive health check leaves alone; or with --kubernetes, in the pod of a Job "
                  "(deploy/kubernetes/jobs/). A run its scheduler stops (a user's job or pod preempting it) is kept "
                  "as preempted, never as a failure")


def scheduled_kind(text: str) -> str:
    if not SCHEDULED_KIND.fullmatch(text):
        raise argparse.ArgumentTypeError("a name of lower-case letters, digits and '-', such as daily or weekly")
    return text


ALLOW_BUSY_HELP = ("run the active checks also on a GPU another program is using (by default such a GPU's burn-in, "
                   "peer, DCGM and NCCL checks are `error` \"busy: pid N (name) holds X GiB\" and do not run there); "
                   "every figure then says it was taken beside that program")

# `gpucheck node --help`: its exit codes, examples and --slurm. The overview of every command is gpucheck.main's.
EPILOG = EXIT_CODES_HELP + """

examples:
  gpucheck node                          check this machine with the auto-selected profile
  gpucheck node --full                   also run the GPU burn-in and the benchmarks (NCCL, ib_write_bw)
  gpucheck node --only gpu.memtest gpu.sdc   two burn-in checks by their ids (no --full needed)
  gpucheck node --full --burn-seconds 600 --bench-timeout 1200
                                         a ten-minute burn (--bench-timeout must leave room for it)
  gpucheck node --only gpu --format json --output /var/lib/gpucheck/node.json
  gpucheck node --profile dgx-h100 --skip gpu.xid
  gpucheck node --slurm                  as Slurm's HealthCheckProgram, prolog or epilog: drain on a failure
                                         with a `gpucheck:` reason, resume only gpucheck's own drains
  gpucheck node --kubernetes --kubeconfig /etc/kubernetes/admin.conf
                                         taint this node's Node on a failure (the same rules, docs/kubernetes.md)

--slurm: the passive checks within --deadline (default 60 s, as NHC), then `scontrol update`: a failure
drains this node (reason "gpucheck: <check> <why>") unless someone else drained it; a pass or a warning
resumes it only if its drain reason starts with "gpucheck:"; a run that could not judge the node (a harness
error) changes nothing. Exit 2 on a failure (the node is drained; a prolog's failure requeues the job), 3
when scontrol could not act, else 0, also after a harness error: a prolog that exits non-zero makes Slurm
drain the node itself, and a blip must not.

--kubernetes: the same for this node's Node (--kubernetes-node, else $NODE_NAME, else the host's name): the
condition GPUCheckHealthy and the label gpucheck/health say the verdict, a failure adds the taint
gpucheck/unhealthy:NoSchedule, which only a pass that may (the rules above) removes; an admin's cordon and
taints are never touched. With --full (a Job's run), an active check's rules. Exit codes as --slurm's.
"""


def output_path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("needs a file name")
    return text


def add_parsers(sub: Any) -> None:
    """Register node, parse, profiles, checks and net under the top-level parser's subcommands."""
    from .parsers import PARSERS
    from .report.node import FORMATS

    node = sub.add_parser("node", help="check this machine", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          description="Collect facts on this machine (NVML, kernel log, libraries, frameworks, "
                                      "InfiniBand, host) and judge them against a profile from checks/.")
    node.add_argument("--profile", metavar="NAME|PATH", help="force a profile (default: node.yaml, else "
                      "chosen from the GPUs NVML reports)")
    node.add_argument("--full", action="store_true", help=f"also run the active checks: {active_checks()}. "
                      f"Minutes (the burn alone --burn-seconds, default {DEFAULT_BURN_S:g} s, after the other "
                      "burn-in tests), and they load the GPUs and HCAs; also keeps `horovodrun --check-build`'s "
                      "listing as evidence")
    node.add_argument("--only", nargs="+", default=[], metavar="ID", help="run only these checks: ids, "
                      "prefixes (gpu, ib) or globs (gpu.ecc*)")
    node.add_argument("--skip", nargs="+", default=[], metavar="ID", help="leave these checks out")
    node.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    node.add_argument("--output", type=output_path, metavar="FILE",
                      help="write the report to FILE: a file (or a link's target) is replaced whole, keeping its "
                           "mode; a device or FIFO (/dev/stdout, a named pipe) is written to; a directory is refused")
    node.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                      help="limit for each probe: NVML, tools, framework imports (default: 60)")
    node.add_argument("--bench-timeout", type=seconds, default=600.0, metavar="SECONDS",
                      help="limit for each benchmark under --full: the burn-in's workers (one per GPU, all at "
                           "once, each killed at this limit), the p2p and all-reduce programs, dcgmi, each tool "
                           "(default: 600)")
    node.add_argument("--burn-seconds", type=burn_seconds, default=DEFAULT_BURN_S, metavar="SECONDS",
                      help="how long gpu.burn loads every GPU with GEMMs, NVML sampled twice a second; shorter than "
                           f"--bench-timeout (default: {DEFAULT_BURN_S:g})")
    node.add_argument("--allow-busy", action="store_true", help=ALLOW_BUSY_HELP)
    node.add_argument("--gpus", type=gpu_index, nargs="+", metavar="N",
                      help="the burn-in's workers (gpu.gemm, gpu.memory_bandwidth, gpu.host_bandwidth, gpu.memtest, "
                           "gpu.burn, gpu.sdc) on these GPUs only, by NVML index: a repaired GPU proven without "
                           "loading the others (default: every GPU)")
    node.add_argument("--deadline", type=seconds, metavar="SECONDS",
                      help="limit for the whole run: what is not collected by then is `error` (\"not run: the "
                           "run's deadline passed\"), the report is made of the rest and written, exit 3 (2 if "
                           "something failed) (default: 4 x --timeout, at least 60, plus 4 x --bench-timeout "
                           "with --full)")
    xid_window = node.add_mutually_exclusive_group()
    xid_window.add_argument("--xid-lookback", type=seconds, metavar="SECONDS",
                            help="judge the Xids logged in the last SECONDS, or since the last clean run of this "
                                 f"boot if that is later; older ones are shown, not judged (default: "
                                 f"{XID_LOOKBACK_S:g} = 24 h)")
    xid_window.add_argument("--xid-since", choices=["boot"],
                            help="boot: judge every Xid since boot (no look-back, no last clean run)")
    node.add_argument("--config", metavar="FILE", help=f"site configuration (default: {config.DEFAULT_PATH})")
    node.add_argument("--slurm", action="store_true", help="tell Slurm: drain this node on a failure, resume "
                      "gpucheck's own drain on a pass (see below); passive checks only, --deadline 60 by default")
    node.add_argument("--scheduled", metavar="KIND", type=scheduled_kind, help=SCHEDULED_HELP)
    node.add_argument("--kubernetes", action="store_true", help="tell Kubernetes: this node's Node gets the "
                      "verdict as a condition and a label, and a taint on a failure (see below)")
    tell.add_kubernetes_options(node)
    node.add_argument("--slurm-node", metavar="NAME", help="this node's NodeName in Slurm (default: "
                      "$SLURMD_NODENAME, else the node whose NodeName or NodeHostName is this host's name)")

    parse = sub.add_parser("parse", help="parse a tool's output into JSON",
                           description="Read the output of a GPU-cluster tool and print what gpucheck reads "
                                       "from it as JSON. Exit 3 if FILE is not that kind of output.")
    parse.add_argument("kind", choices=sorted(PARSERS), metavar="KIND", help="one of: " + ", ".join(sorted(PARSERS)))
    parse.add_argument("file", metavar="FILE", help=f"the file to read, - for standard input (at most "
                       f"{MAX_PARSE_INPUT_B // 2**20} MiB)")

    prof = sub.add_parser("profiles", help="list profiles and which one this node would get",
                          description="List the profiles (what healthy looks like for one kind of node), each with "
                                      "its description and file, and mark the one `gpucheck node` would judge this "
                                      "node against. When no profile matches the node's GPUs, that is a profile "
                                      "derived from their entries in the GPU SKU table (gpus.yaml beside the "
                                      "profiles): it is shown with each threshold and where it came from.")
    prof.add_argument("--profiles-dir", metavar="DIR", help="look here first")
    prof.add_argument("--no-detect", action="store_true", help="only list them: do not work out which one this "
                      "node gets (node.yaml's, else the one matching the GPUs NVML reports)")

    sub.add_parser("checks", help="list every check id and what it verifies",
                   description="List every check of `gpucheck node`: its id and what it verifies; [--full] marks "
                               "those that run only under --full or when named in --only.")

    net = sub.add_parser("net", help="TCP bandwidth between two nodes (used by gpucheck cluster)",
                         description="Run `serve` on one node, then `send` on another; the receiver prints "
                                     "the bandwidth as JSON.")
    net_sub = net.add_subparsers(dest="net_command", metavar="ACTION", required=True, parser_class=Parser)
    serve = net_sub.add_parser("serve", help="receive one stream and print its bandwidth",
                               description="Wait for one `gpucheck net send`, receive its stream and print the "
                                           "bandwidth as JSON.")
    serve.add_argument("--port", type=port, default=netbench.DEFAULT_PORT, help="TCP port (default: %(default)s)")
    serve.add_argument("--timeout", type=seconds, default=30.0, metavar="SECONDS",
                       help="give up when no sender connects within this time")
    send = net_sub.add_parser("send", help="stream to a node running `gpucheck net serve`",
                              description="Stream to HOST, which runs `gpucheck net serve`, for --seconds.")
    send.add_argument("host", metavar="HOST", help="the node running `gpucheck net serve`")
    send.add_argument("--port", type=port, default=netbench.DEFAULT_PORT, help="TCP port (default: %(default)s)")
    send.add_argument("--seconds", type=seconds, default=3.0, help="how long to stream (default: %(default)g)")


def active_checks() -> str:
    """The ids of the checks that run only under --full (or named in --only), for --help."""
    from .node.pipeline import all_checks

    return ", ".join(check.id for check in all_checks() if check.active)


def cmd_node(args: argparse.Namespace) -> int:
    """SIGTERM (coreutils `timeout`, a scheduler), SIGHUP or SIGINT end the run at once, with every probe it
    started, and exit 3: the run could not finish (exit codes are 0-3 whatever happens; `timeout` itself
    exits 124 for a run it stopped)."""
    from .process import Stopped, children_end_with_command

    try:
        with children_end_with_command():
            return node_report(args)
    except Stopped as exc:
        print(f"gpucheck: {exc}: the run and the probes it started were ended", file=sys.stderr)
        scheduler = tell.scheduler_of(args)
        if args.scheduled and scheduler is not None:
            stopped_run.keep_scheduled(args, str(exc), scheduler)
        if args.output is not None:
            stopped_run.replace_stale_output(args, str(exc))
        return EXIT_UNKNOWN


def node_report(args: argparse.Namespace) -> int:
    from .node import ib_counters, kept_reports
    from .node.kernel_log import remember_clean_run
    from .node.pipeline import Options, UsageError, all_checks, run_node
    from .report.node import render

    if args.slurm and args.full:
        fail("--slurm runs the passive checks within Slurm's health-check time; the burn-in (--full) takes "
             "minutes: run it in a job or from gpucheck cluster --full")
    named_active = sorted({c.id for c in all_checks() if c.active} & set(args.only or [])) if args.slurm else []
    if named_active:  # a health check must never load a GPU a job may be using
        fail(f"--slurm runs the passive checks only, never an active one ({', '.join(named_active)}): run it in "
             "a job on an idle node, or from gpucheck cluster --launcher slurm --full")
    if args.scheduled and args.slurm:
        fail("--scheduled tells Slurm itself (a failure drains with a `gpucheck: scheduled` reason): leave out --slurm")
    scheduler = tell.scheduler_of(args)
    if args.scheduled and scheduler is not None and not scheduler.job():
        fail("--scheduled runs inside the Slurm job `gpucheck schedule` submits (there is no SLURM_JOB_ID here), or "
             "with --kubernetes in a Job's pod (deploy/kubernetes/jobs/): by hand, run gpucheck node --full")
    if args.slurm_node and not (args.slurm or args.scheduled):
        fail("--slurm-node needs --slurm or --scheduled")
    if wrong := tell.misused(args):
        fail(wrong)
    deadline = args.deadline if args.deadline is not None or not args.slurm else SLURM_DEADLINE_S
    try:
        site = config.load(args.config)
        report = run_node(Options(profile=args.profile, only=args.only, skip=args.skip, full=args.full,
                                  timeout=args.timeout, bench_timeout=args.bench_timeout, deadline=deadline,
                                  xid_lookback_s=args.xid_lookback, xid_since_boot=args.xid_since == "boot",
                                  burn_seconds=args.burn_seconds, allow_busy=args.allow_busy, gpus=args.gpus),
                          site)
    except (UsageError, config.ConfigError, profiles.ProfileError) as exc:
        fail(str(exc))
    if args.scheduled and scheduler is not None:
        report.facts["scheduled"] = {"kind": args.scheduled, "job": scheduler.job()}
    for note in (remember_clean_run(report.results), ib_counters.remember(report.results)):  # the next run's start
        if note:
            print(f"gpucheck: note: {note}", file=sys.stderr)
    active = any(c.active for c in all_checks() if c.id in {r.check for r in report.results})  # --full, --only
    report.facts["last_active_pass"] = kept_reports.last_active_pass(report, active)
    if not active and (args.format == "prometheus" or site.prometheus_textfile):  # only that text carries them:
        report.last_active = kept_reports.last_active_results()  # the last active run's figures, between two
    # The scheduler is told first: a node that failed is drained even when its report cannot be written (a full
    # disk), and the kept report says what was done (facts.slurm: the history's transitions)
    told = tell.chosen(args, site, active)
    code = told(report) if told else report.exit_code
    if note := kept_reports.keep(report, render(report, "json"), active):  # the history's copy on the node
        print(f"gpucheck: note: {note}", file=sys.stderr)
    if note := write_textfile(site.prometheus_textfile, report):
        print(f"gpucheck: note: {note}", file=sys.stderr)
    text = render(report, args.format)
    if args.output is None:
        sys.stdout.write(text)
        return code
    try:
        write_output(args.output, text)
    except OSError as exc:
        if not (args.slurm or args.scheduled or args.kubernetes):
            fail(f"cannot write {args.output}: {exc.strerror or exc}")
        told_first = "Kubernetes" if args.kubernetes else "Slurm"
        print(f"gpucheck: error: cannot write {args.output}: {exc.strerror or exc} ({told_first} was told first)",
              file=sys.stderr)
        return code
    counts = ", ".join(f"{n} {s}" for s, n in report.counts().items() if n)
    print(f"gpucheck node: {counts} — exit {report.exit_code}; report in {args.output}", file=sys.stderr)
    return code


def write_textfile(path: str | None, report: Any) -> str | None:
    """node.yaml's prometheus_textfile: every run's metrics for node_exporter, replaced whole (the collector may
    read it at any moment). A note when it cannot be written; never a changed verdict."""
    from .report.node import render

    if not path:
        return None
    try:
        write_atomically(Path(path), render(report, "prometheus"))
    except OSError as exc:
        return f"the Prometheus textfile {path} is not written: {exc.strerror or exc}"
    return None


def cmd_parse(args: argparse.Namespace) -> int:
    from .parsers import ParseError, parse

    try:
        if args.file == "-":
            data = sys.stdin.buffer.read(MAX_PARSE_INPUT_B + 1)
        else:
            data = read_file(args.file, MAX_PARSE_INPUT_B, streams=True)  # <(cmd) works, a FIFO no one feeds is empty
    except OSError as exc:
        fail(f"cannot read {args.file}: {exc.strerror or exc}")
    if len(data) > MAX_PARSE_INPUT_B:
        fail(f"{args.file}: more than {MAX_PARSE_INPUT_B // 2**20} MiB; gpucheck parse reads a tool's output, "
             f"not this")
    text = data.decode(errors="replace")
    try:
        result = parse(args.kind, text)
    except ParseError as exc:
        fail(f"{args.file}: {exc}")
    print(json.dumps(result, indent=2, sort_keys=True))
    return EXIT_OK


def cmd_profiles(args: argparse.Namespace) -> int:
    chosen: profiles.Profile | None = None
    how = ""
    if not args.no_detect:
        chosen, how = profile_of_this_node(args.profiles_dir)
    for name, path in profiles.available(args.profiles_dir).items():
        try:
            description = profiles.load(name, args.profiles_dir).description
        except profiles.ProfileError as exc:
            description = f"BROKEN: {exc}"
        mark = "*" if chosen and name == chosen.name else " "
        print(f"{mark} {name:<22} {description}  [{path}]")
    if chosen and chosen.data.get(profiles.SOURCES):
        print(f"* {chosen.name:<22} {chosen.description}")
    if chosen:
        print(f"\n* = the profile this node gets: {chosen.name}, {how}")
    if chosen and chosen.data.get(profiles.SOURCES):
        from .node.derived_profile import threshold_rows

        rows = threshold_rows(chosen)
        width, value_width = max(len(row[0]) for row in rows), min(max(len(row[1]) for row in rows), 24)
        print("\nIts thresholds, and where each came from (a site's own profile, if one matched, would win):")
        for key, value, source in rows:
            print(f"  {key:<{width}}  {value:<{value_width}}  {source}")
    from .node.ib_counters import limit_rows

    rows = limit_rows(chosen)
    width = max(len(row[0]) for row in rows)
    print(f"\nInfiniBand error counters (ib.counters), the most each may rise between two runs"
          f"{' for ' + chosen.name if chosen else ''}:")
    for key, value, source in rows:
        print(f"  {key:<{width}}  {value:<10}  {source}")
    return EXIT_OK


def profile_of_this_node(profiles_dir: str | None) -> tuple[profiles.Profile, str]:
    """The profile `gpucheck node` would judge this node against, chosen as it chooses (node.yaml's, else
    from the GPUs NVML reports), and how it was chosen, in words that say so when NVML could not tell."""
    from collections import Counter
    from dataclasses import replace

    from .node import Context
    from .node.pipeline import Gatherer, choose_profile, selection_names

    try:
        site = config.load()
        if profiles_dir:
            site = replace(site, profiles_dir=profiles_dir)
        gather = Gatherer(Context(timeout=10.0, config=site))
        chosen = choose_profile(None, site, gather)
    except (config.ConfigError, profiles.ProfileError) as exc:
        fail(str(exc))
    if site.profile != "auto":
        return chosen, f"named in {site.path}"
    nvml_failure = gather.failures.get("nvml")
    if nvml_failure is not None:
        return chosen, f"the default: NVML could not be read ({nvml_failure.reason}), so no GPU was matched"
    gpu_names = selection_names(gather.get("nvml") or {}, gather.get("pci_gpus") or {})
    if not gpu_names:
        return chosen, "the default: NVML reports no GPU"
    models = ", ".join(f"{count} x {name}" for name, count in Counter(gpu_names).most_common())
    if chosen.name == profiles.DEFAULT_PROFILE:
        return chosen, f"the default: no profile matches the GPUs NVML reports, {models}, nor any SKU entry"
    if chosen.data.get(profiles.SOURCES):
        return chosen, f"derived from the GPU SKU table: no profile matches the GPUs NVML reports, {models}"
    return chosen, f"matched by the GPUs NVML reports: {models}"


def cmd_net(args: argparse.Namespace) -> int:
    try:
        if args.net_command == "serve":
            result = netbench.serve(args.port, accept_timeout=args.timeout)
        else:
            result = netbench.send(args.host, args.port, args.seconds)
    except OSError as exc:
        fail(f"net {args.net_command}: {exc.strerror or exc}")
    print(json.dumps(result), flush=True)
    return EXIT_UNKNOWN if "error" in result else EXIT_OK


def cmd_checks(args: argparse.Namespace) -> int:
    from .node.pipeline import all_checks

    for check in all_checks():
        print(f"{check.id:<24} {check.summary}{'  [--full]' if check.active else ''}")
    return EXIT_OK


HANDLERS = {"node": cmd_node, "parse": cmd_parse, "profiles": cmd_profiles, "checks": cmd_checks, "net": cmd_net}
