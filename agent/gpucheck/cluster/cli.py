"""`gpucheck cluster`: the subcommand's options and its run. Kept free of heavy imports (ansible,
fabric, rich load only when the command runs), so `gpucheck --help` stays fast."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..cli_types import fraction, seconds, size, whole_number
from ..model import EXIT_FAIL, EXIT_UNKNOWN
from . import launchers
from .context import Options
from .frameworks import FRAMEWORKS
from .stages.order import STAGE_NAMES

EPILOG = """\
exit codes: 0 every node and cluster check passes, 1 warnings only, 2 at least one failure (a failed
check, an unreachable or hung node, version drift), 3 could not check everything (bad input, a node
that refused our key or host key, an agent that is missing or crashed, a machine the inventory lists twice)
and no failure.

examples:
  gpucheck cluster -i inventory/prod                   every host of gpu_nodes (else all)
  gpucheck cluster -i inventory/prod --limit 'node0*' --profile dgx-h100
  gpucheck cluster --full --report /srv/handoff/rack3  benchmarks too; stragglers vs the fleet median
  gpucheck cluster --stages consistency,network        only compare the nodes and test the pairs
  gpucheck cluster --skip-stages smoke --pair-seconds 10
  gpucheck cluster -i inventory/prod --drain           drain the failed nodes in Slurm, resume repaired ones
  gpucheck cluster -i inventory/prod --launcher slurm  node checks through one srun, the jobs as Slurm jobs
  gpucheck cluster -i inventory/prod --launcher kubernetes --pod-template check.yaml --drain
                                                       each node's checks as a pod; the failed Nodes tainted
  gpucheck cluster -i inventory/lab --stages smoke,training   the ResNet-50 benchmark on CPU ranks (small model)
  gpucheck cluster -i inventory/prod --burn-minutes 120   acceptance: the whole cluster at full load for 2 hours

stages (in this order): consistency (versions agree), network (pair bandwidth, the slow node named),
mpi (one rank per node), allreduce (bus bandwidth across nodes), smoke (distributed training and
scaling efficiency), training (ResNet-50 images/s per GPU at 1 GPU, on every node and across all, against
the fleet median, the GPU's published figure and the profile's scaling minimums: docs/training.md; on CPU
ranks only when named in --stages), burn (opt-in: every GPU burning at once while an all-reduce loads the
fabric, for --burn-minutes; docs/burn.md), stragglers (nodes below the fleet median), shape (failures and slow pairs
that gather behind one rack, leaf switch or PDU: the inventory's rack, leaf_switch, pdu), history (each GPU
against its own baseline and recent runs in the history store: docs/history.md).

inventory: host names are one word (no whitespace or control character: drain.txt is one `node reason`
line per node, for `while read n r; do scontrol update nodename=$n ...`); a --pattern or --limit part
that matches no host is an error (Ansible would skip it). A key file that cannot be read is that
host's error. The report holds no ProxyCommand, password or URL password: they are written [redacted].
SIGTERM ends the run as Ctrl-C does: the report is written (interrupted) and the exit code is 3.
"""
DEFAULTS = Options()  # the command line's defaults are Options' own


def _stage_list(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {', '.join(unknown) or repr(text)} "
                                         f"(stages: {','.join(STAGE_NAMES)})")
    return names


def _with_default(group: Any, flag: str, kind: Callable[[str], Any], metavar: str, text: str) -> None:
    """An option whose default is the Options field of its name (--host-timeout: host_timeout)."""
    default = getattr(DEFAULTS, flag.removeprefix("--").replace("-", "_"))
    group.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)


def minutes(text: str) -> float:
    """--burn-minutes: a positive number of minutes, at most a week; as seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not 0.05 <= value <= 7 * 24 * 60:
        raise argparse.ArgumentTypeError(f"{text} minutes: give 0.05 (3 s) to 10080 (one week)")
    return value * 60


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cluster", help="check every node of an Ansible inventory, compare them, write a handoff report",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run `gpucheck node` on every host of the Ansible inventory over SSH, compare the nodes "
                    "(versions, GPU models, stragglers), and write report.json, junit.xml, report.md, "
                    "report.html and drain.txt.")
    inv = p.add_argument_group("hosts (read with Ansible's own inventory code)")
    inv.add_argument("-i", "--inventory", action="append", metavar="INVENTORY",
                     help="inventory file, directory or host list; repeatable (default: as Ansible finds it "
                          "from ansible.cfg)")
    inv.add_argument("--pattern", metavar="PATTERN", help="Ansible host pattern (default: the gpu_nodes group if "
                     "the inventory has one, else all); compare one kind of node at a time")
    inv.add_argument("-l", "--limit", metavar="SUBSET", help="further limit the hosts, as ansible --limit (a part "
                     "that matches no host is an error)")
    node = p.add_argument_group("what each node runs")
    node.add_argument("--profile", metavar="NAME", help="force this profile on every node (default: each node's own)")
    node.add_argument("--full", action="store_true", help="also run the node benchmarks (bw.*): needed to find "
                      "stragglers")
    node.add_argument("--timeout", type=seconds, metavar="SECONDS",
                      help="the node agent's limit per probe (its --timeout)")
    _with_default(node, "--remote-command", str, "CMD", "the agent's command on the nodes (default: %(default)s)")
    ssh = p.add_argument_group("fan-out")
    ssh.add_argument("--launcher", choices=launchers.NAMES, default=DEFAULTS.launcher,
                     help="ssh (default): the node checks over SSH, jobs with mpirun/torchrun from the first node; "
                          "slurm: the node checks with one srun on every node Slurm can run a job on now (the "
                          "others over SSH, said why), the MPI, all-reduce, smoke and training jobs with srun "
                          "--mpi=pmix from this machine, a Slurm client (docs/slurm.md); kubernetes: the node checks "
                          "as a pod on each host's Node, made from --pod-template, through the API (--kubeconfig); "
                          "the MPI, all-reduce, smoke and training jobs (mpirun's) as pods made from --job-template; "
                          "the network and burn stages are left out (docs/kubernetes.md)")
    ssh.add_argument("--pod-template", metavar="FILE", help="--launcher kubernetes: the Pod a node's checks run in, "
                     "with your gpucheck image and NVIDIA runtime (deploy/kubernetes/jobs/check.yaml)")
    ssh.add_argument("--job-template", metavar="FILE", help="--launcher kubernetes: the Pod the jobs' launcher and "
                     "workers run in, with your training image: OpenMPI, sshd, TensorFlow + Horovod (its python: "
                     "python3, or the annotation gpucheck/python) (deploy/kubernetes/jobs/mpi.yaml; without it those "
                     "stages are left out)")
    ssh.add_argument("--kubeconfig", metavar="FILE", help="--launcher kubernetes: the API's credentials (default: "
                     "in a pod its service account, else $KUBECONFIG, else ~/.kube/config)")
    _with_default(ssh, "--forks", whole_number, "N", "hosts checked at once (default: %(default)s)")
    _with_default(ssh, "--host-timeout", seconds, "SECONDS",
                  "a host with no report after this is timed out (default: %(default)g)")
    _with_default(ssh, "--connect-timeout", seconds, "SECONDS",
                  "SSH connect limit per host (default: %(default)g; ConnectTimeout in ansible_ssh_common_args wins)")
    cmp = p.add_argument_group("comparison and report")
    _with_default(cmp, "--straggler-fraction", fraction, "F",
                  "a node below F x the fleet median of a measured figure is a straggler (default: %(default)g)")
    cmp.add_argument("--network-sample", type=whole_number, metavar="K",
                     help="network stage: test K rounds of the pair schedule, spread over it (default: all)")
    lab = p.add_argument_group("cluster stages (network, MPI, all-reduce, smoke training, training benchmark)")
    lab.add_argument("--stages", type=_stage_list, metavar="A,B,...",
                     help=f"run only these stages (default: all: {','.join(STAGE_NAMES)}; training runs on CPU "
                          "ranks only when named here)")
    lab.add_argument("--skip-stages", type=_stage_list, default=(), metavar="A,B,...",
                     help="leave these stages out")
    lab.add_argument("--framework", choices=list(FRAMEWORKS), default=DEFAULTS.framework,
                     help="smoke training job: Horovod + TensorFlow/Keras (default), PyTorch DDP, or TensorFlow "
                          "parameter-server mode; the training benchmark runs in the same framework (Horovod for "
                          "tf-ps)")
    _with_default(lab, "--pair-seconds", seconds, "S",
                  "network stage: seconds each pair streams (default: %(default)g)")
    _with_default(lab, "--pair-fraction", fraction, "F",
                  "network stage: a pair below F x the reference (the median of each node's best pair) is slow and "
                  "re-tested (default: %(default)g)")
    _with_default(lab, "--stage-timeout", seconds, "SECONDS",
                  "limit of each mpirun / training job (default: %(default)g)")
    _with_default(lab, "--smoke-steps", whole_number, "N",
                  "smoke job: steps per epoch on every rank, 2 epochs (default: %(default)s)")
    _with_default(lab, "--allreduce-size", size, "SIZE",
                  "built-in all-reduce benchmark: bytes per rank (default: %(default)s; all_reduce_perf uses the "
                  "profile's nccl_allreduce_size_B)")
    lab.add_argument("--train-width", type=whole_number, metavar="W",
                     help="training benchmark: ResNet-50's base width (default: 64, ResNet-50 as published, on GPUs; "
                          "8 on CPU ranks); only width 64 at 224 px is set beside a published figure")
    lab.add_argument("--train-image-size", type=whole_number, metavar="PX",
                     help="training benchmark: square synthetic images (default: 224 on GPUs, 32 on CPU ranks)")
    lab.add_argument("--train-batch-size", type=whole_number, metavar="N",
                     help="training benchmark: images per GPU a step (default: 256 on GPUs, 16 on CPU ranks)")
    _with_default(lab, "--train-iterations", whole_number, "N",
                  "training benchmark: timed iterations of 10 steps, after 10 warm-up steps (default: %(default)s)")
    lab.add_argument("--burn-minutes", type=minutes, metavar="M",
                     help="run the burn stage (opt-in) for M minutes: every GPU of every node under the sustained "
                          f"GEMM at once, the all-reduce looping across the nodes (default with --stages burn: "
                          f"{DEFAULTS.burn_seconds / 60:g}); rounds of at most 5 minutes, each reported as it ends")
    _with_default(lab, "--burn-fabric-fraction", fraction, "F",
                  "burn stage: an all-reduce under the burn below F x the same all-reduce cold warns (default: "
                  "%(default)g)")
    lab.add_argument("--scaling-efficiency-min", type=fraction, metavar="F",
                     help="warn when the smoke job's scaling efficiency is below F (default: report it beside the "
                          "published figures, not judged)")
    cmp.add_argument("--drain", action="store_true",
                     help="tell the scheduler: drain every node of the drain list with its `gpucheck:` reason, "
                          "resume the nodes that passed if gpucheck drained them, leave a drain someone else made "
                          "and the nodes that could not be checked as they are. Slurm through scontrol on this "
                          "machine; with --launcher kubernetes, the Nodes' gpucheck/unhealthy taint, condition and "
                          "label, as the DaemonSet writes them")
    cmp.add_argument("--report", type=Path, metavar="DIR",
                     help="report directory (default: $XDG_STATE_HOME/gpucheck/reports/gpucheck-report-<UTC time>/, "
                          "~/.local/state/gpucheck/reports/... without XDG_STATE_HOME; never the current directory, "
                          "where a report is easily committed with a checkout)")
    cmp.add_argument("--history", type=Path, metavar="FILE",
                     help="record the run in this history store (default: $GPUCHECK_HISTORY, else the "
                          "cluster's own, $XDG_STATE_HOME/gpucheck/history/<cluster_name>.sqlite, named after the "
                          "inventory's cluster_name; `gpucheck history` reads it)")
    cmp.add_argument("--no-history", action="store_true", help="do not record the run in the history store")


def fail(message: str) -> int:
    from ..redact import redact

    print(f"gpucheck: error: {redact(message)}", file=sys.stderr)
    return EXIT_UNKNOWN


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or systemd's stop, `kill`): ends the run as Ctrl-C does, with the final
    report written (interrupted, exit 3). A KeyboardInterrupt, so every place that closes connections
    and stops pools on Ctrl-C does the same for it."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the run goes on, SIGTERM raises Terminated in the main thread; a second SIGTERM during the
    final write is ignored (the report is written in a moment: SIGKILL still ends us)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    from ..redact import for_terminal
    from ..report import cluster as report
    from . import duplicates, fanout, handoff, progress
    from .context import ClusterContext
    from .inventory import InventoryError, load
    from .stages import order as stages

    asked = tuple(args.stages or ())
    chosen = set(args.stages or STAGE_NAMES)
    if args.burn_minutes is not None:  # --burn-minutes asks for the burn stage
        asked, chosen = (*dict.fromkeys((*asked, "burn")),), chosen | {"burn"}
    selected = tuple(n for n in STAGE_NAMES if n in chosen and n not in args.skip_stages)
    options = Options(profile=args.profile, full=args.full, node_timeout=args.timeout, forks=args.forks,
                      host_timeout=args.host_timeout, connect_timeout=args.connect_timeout,
                      remote_command=args.remote_command, straggler_fraction=args.straggler_fraction,
                      network_sample=args.network_sample, stages=selected, framework=args.framework,
                      pair_seconds=args.pair_seconds, pair_fraction=args.pair_fraction,
                      stage_timeout=args.stage_timeout, smoke_steps=args.smoke_steps,
                      allreduce_size=args.allreduce_size, scaling_efficiency_min=args.scaling_efficiency_min,
                      stages_asked=asked, train_width=args.train_width,
                      train_image_size=args.train_image_size, train_batch_size=args.train_batch_size,
                      train_iterations=args.train_iterations, drain=args.drain, launcher=args.launcher,
                      kubeconfig=args.kubeconfig, pod_template=args.pod_template,
                      job_template=args.job_template,
                      history=args.history, no_history=args.no_history,
                      burn_seconds=args.burn_minutes if args.burn_minutes is not None else DEFAULTS.burn_seconds,
                      burn_fabric_fraction=args.burn_fabric_fraction)
    try:
        fanout.build_command(options)
    except ValueError as exc:
        return fail(str(exc))
    launcher = launchers.named(options.launcher)
    if (args.kubeconfig or args.pod_template or args.job_template) and options.launcher != "kubernetes":
        return fail("--kubeconfig, --pod-template and --job-template are --launcher kubernetes's")
    if left_out := {name: why for name in selected if name in stages.ACROSS_NODES
                    and (why := launcher.cannot_run(name, options))}:
        if refused := [name for name in left_out if name in asked]:
            return fail(f"--launcher {options.launcher} does not run stage {', '.join(refused)} "
                        f"({'; '.join(sorted({left_out[n] for n in refused}))}): run it with --launcher ssh or slurm, "
                        "or leave it out")
        options.stages = tuple(name for name in selected if name not in left_out)
        selected = options.stages
        for why in dict.fromkeys(left_out.values()):
            print(f"gpucheck cluster: --launcher {options.launcher} leaves out stage "
                  f"{', '.join(n for n, w in left_out.items() if w == why)} ({why})")
    try:
        scheduler_nodes = launcher.read_nodes(options)
    except launchers.LauncherError as exc:
        return fail(str(exc))
    try:
        inventory = load(args.inventory, args.pattern, args.limit)
    except InventoryError as exc:
        return fail(str(exc))
    started_at = dt.datetime.now(dt.timezone.utc)
    try:
        directory = args.report or report.default_dir(started_at)
    except RuntimeError as exc:
        return fail(f"{exc}: give one with --report DIR")
    try:
        writer = report.ReportWriter(directory)
    except OSError as exc:
        return fail(f"cannot create report directory {directory}: {exc.strerror}")

    ctx = ClusterContext(options, inventory, scheduler_nodes=scheduler_nodes, drained_in=launcher.drains_in)
    began = time.monotonic()
    started = started_at.isoformat(timespec="seconds")
    argv = ["gpucheck", *sys.argv[1:]]

    def save(complete: bool = False, interrupted: bool = False) -> dict[str, Any]:
        """Writes the report files; returns the document as written (secrets redacted)."""
        return writer.write(handoff.document(ctx, started, time.monotonic() - began, argv, complete, interrupted))

    ctx.checkpoint = save

    with sigterm_as_interrupt():
        try:
            save()
            print(f"gpucheck cluster: cluster {inventory.cluster}, {len(inventory.hosts)} host(s) from "
                  f"{', '.join(inventory.sources)} (pattern {inventory.pattern}"
                  f"{', limit ' + args.limit if args.limit else ''}); report in {directory}/")
            with progress.make(len(inventory.hosts)) as bar:
                def done(outcome: Any) -> None:
                    ctx.nodes[outcome.host] = outcome
                    writer.node(outcome.host, outcome.to_dict())
                    bar.update(outcome)

                fan_began = time.monotonic()
                launcher.check_nodes(ctx, done)
                ctx.timings["fanout"] = round(time.monotonic() - fan_began, 3)
            if said := launcher.summary(ctx):
                print(for_terminal(said))
            handoff.fail_safe(ctx.nodes)
            for name in duplicates.mark(ctx.nodes, [h.name for h in inventory.hosts]):
                writer.node(name, ctx.nodes[name].to_dict())  # its file still held its agent's report
            save()
            for name, stage in stages.STAGES:
                if name not in selected:
                    continue
                stages.run_stage(name, stage, ctx)
                save()
            doc = save(complete=True)
        except KeyboardInterrupt as exc:
            try:
                doc = save(interrupted=True)
            except OSError as error:
                return fail(f"cannot write the report in {directory}: {error.strerror or error}")
            sys.stdout.write(for_terminal(report.render_summary(doc, directory), newlines=True))
            remember(doc, directory, options)
            print("gpucheck: terminated (SIGTERM)" if isinstance(exc, Terminated) else "gpucheck: interrupted",
                  file=sys.stderr)
            return EXIT_UNKNOWN
        except OSError as exc:  # the report directory went away or filled up
            return fail(f"cannot write the report in {directory}: {exc.strerror or exc}")
    sys.stdout.write(for_terminal(report.render_summary(doc, directory), newlines=True))
    code = int(doc["exit_code"])
    if options.drain:
        ctx.drained, error = launcher.drain(ctx, doc)
        for item in ctx.drained:
            print(for_terminal(f"{launcher.drains_in}: {item['text']}" if item["action"] != "error"
                               else f"{launcher.drains_in}: {item['node']}: {item['text']}"))
        try:
            doc = save(complete=True)
        except OSError as exc:
            return fail(f"cannot write the report in {directory}: {exc.strerror or exc}")
        if error:
            print(f"gpucheck: {launcher.drains_in}: {error}", file=sys.stderr)
            code = code if code == EXIT_FAIL else EXIT_UNKNOWN  # a failure still outranks it
    remember(doc, directory, options)
    return code


def remember(doc: dict[str, Any], directory: Path, options: Options) -> None:
    """The run as report.json has it, into the history store (never changes the exit code)."""
    if options.no_history:
        return
    from ..history.recording import record_run

    recorded, said = record_run(doc, directory / "report.json", options.history)
    print(said, file=sys.stdout if recorded else sys.stderr)
