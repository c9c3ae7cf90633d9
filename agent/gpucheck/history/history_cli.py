"""`gpucheck history`: the history store's command line (import, runs, show, baseline, offenders, export). Bad
input is one line and exit 3; a report that cannot be imported costs that report only."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..cli_types import Bounded, Parser, fail
from ..files import write_output
from ..model import EXIT_OK, EXIT_UNKNOWN
from ..redact import for_terminal as shown
from . import mttr, queries
from .diff import number
from .importer import import_paths
from .offenders import DEFAULT_DAYS, DEFAULT_FAILURES, gpu_offenders, offenders
from .records import CLUSTER, NODE_GPU, NotAReport, utc
from .store import ENV, HistoryError, Store, default_path

EXPORT_COLUMNS = ("run", "node_run", "kind", "started", "node", "node_status", "gpu", "uuid", "pci_bus_id", "check",
                  "figure", "unit", "value")
AGO = re.compile(r"([0-9]{1,5})([dh])")  # --since 7d, 12h
count = Bounded(int, "a whole number", 1, 10_000, low_included=True, limits="1 to 10000")
EPILOG = f"""\
The store: one per cluster, so that a lab's node01 never shares a baseline or an offender count with a
production node01. --store, else ${ENV}, else $XDG_STATE_HOME/gpucheck/history/<cluster>.sqlite
(~/.local/state/... without XDG_STATE_HOME) for --cluster, the inventory's cluster_name; without --cluster, the
only store there. `gpucheck cluster` records each of its runs in its cluster's; `import` adds reports already on
disk, and refuses a report of another cluster than the store's.

exit codes: 0 done; 3 bad input, a store that cannot be used, or (import) a named file that is not a readable
gpucheck report (the others are still imported).

examples:
  gpucheck history import ~/.local/state/gpucheck/reports     every report under it, each once
  gpucheck history runs --node node07                          the runs that checked node07, newest first
  gpucheck history runs --cluster lab                          the lab's runs, where another cluster has a store
  gpucheck history show node07 --check gpu.gemm                its GEMM figures per GPU over its last runs
  gpucheck history show GPU-5d3c... --runs 20                  one GPU's figures, wherever it was
  gpucheck history baseline node07 --set                       after a repair: its latest run is the new baseline
  gpucheck history offenders --failures 2 --days 14            the nodes and GPUs that failed twice in two weeks
  gpucheck history mttr --since 30d                            per node: detection to drain, drain to return
  gpucheck history mttr --by gpu                               the same per GPU (by UUID)
  gpucheck history export --format csv --since 30d -o figures.csv
"""


def since(text: str) -> str:
    """--since: 7d, 12h, or an ISO 8601 date or time (UTC unless it says)."""
    ago = AGO.fullmatch(text)
    if ago:
        delta = dt.timedelta(days=int(ago[1])) if ago[2] == "d" else dt.timedelta(hours=int(ago[1]))
        return (dt.datetime.now(dt.timezone.utc) - delta).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        return utc(text)
    except NotAReport:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is neither Nd, Nh nor an ISO 8601 date or time") from None


def add_parser(sub: Any) -> tuple[Any, Parser]:
    """(the verbs' subparsers, the options every verb shares): main.py adds `collect` there (cluster/collect_cli.py)."""
    common = Parser(add_help=False)
    common.add_argument("--cluster", metavar="NAME", help="the cluster whose store to use: each cluster (its "
                        "inventory's cluster_name) has its own, $XDG_STATE_HOME/gpucheck/history/NAME.sqlite "
                        "(default: the only one there)")
    common.add_argument("--store", type=Path, metavar="FILE", help=f"the history store (default: ${ENV}, else "
                        "the --cluster's)")
    history = sub.add_parser("history", help="what gpucheck remembers of past runs: import, collect, runs, show, "
                             "export",
                             epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                             description="Every node report and cluster run of a cluster in its SQLite store on "
                                         "the admin node: each node's and each GPU's figures over time, for "
                                         "comparison, trends and evidence.")
    verbs = history.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser, required=True)
    imp = verbs.add_parser("import", parents=[common], help="record reports already on disk",
                           description="Record node reports (gpucheck node --format json) and cluster report "
                                       "directories, or every one under a folder. A report recorded before is "
                                       "not recorded again.")
    imp.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a report, a report directory or a folder")
    runs = verbs.add_parser("runs", parents=[common], help="the runs, newest first")
    runs.add_argument("--node", help="only the runs that checked this node")
    runs.add_argument("--since", type=since, metavar="WHEN", help="only runs since: 7d, 12h or an ISO date")
    runs.add_argument("--limit", type=count, default=50, help="at most this many (default: %(default)s)")
    show = verbs.add_parser("show", parents=[common], help="a node's or a GPU's figures over its last runs")
    show.add_argument("target", metavar="NODE|GPU-UUID", help="a node name, or a GPU's UUID (GPU-...)")
    show.add_argument("--check", metavar="ID", help="only this check's figures (gpu.gemm, gpu.burn, ...)")
    show.add_argument("--figure", metavar="TEXT", help="only figures whose name holds TEXT (bf16, GBps, ...)")
    show.add_argument("--runs", type=count, default=8, metavar="N", help="its last N runs (default: %(default)s)")
    base = verbs.add_parser("baseline", parents=[common], help="show or set a node's baseline",
                            description="A node's baseline is the run its GPUs are compared with (gpucheck cluster's "
                                        "history stage): its first passing run with GPU figures (a --full run) "
                                        "until one is set. Set it after a repair or an upgrade that is meant to "
                                        "change the figures.")
    base.add_argument("node", metavar="NODE")
    base.add_argument("--set", action="store_true", help="make its latest run (or --run's) the baseline")
    base.add_argument("--run", type=count, metavar="N", help="with --set: the run (as `runs` lists it) to take")
    off = verbs.add_parser("offenders", parents=[common], help="the nodes and GPUs that failed again and again",
                           description="Every node, and every GPU (by UUID, wherever it was), with at least "
                                       "--failures separate failures within --days (a failure counts again only "
                                       "after the node passed in between; a GPU failed when a failing check names "
                                       "it).")
    off.add_argument("--failures", type=count, default=DEFAULT_FAILURES, metavar="N", help="(default: %(default)s)")
    off.add_argument("--days", type=count, default=DEFAULT_DAYS, metavar="M", help="(default: %(default)s)")
    mttr = verbs.add_parser("mttr", parents=[common], help="per node: detection to drain, drain to return",
                            description="Per node, how long from a fault detected (by gpucheck watch) to the node "
                                        "drained, and from drained to back in service, over a period: the "
                                        "transitions the kept reports of the watcher, the health check and the "
                                        "scheduled checks carry (gpucheck history collect brings them here).")
    mttr.add_argument("--since", type=since, default=since("30d"), metavar="WHEN",
                      help="since: 30d (the default), 12h or an ISO date")
    mttr.add_argument("--node", help="only this node")
    mttr.add_argument("--by", choices=("node", "gpu"), default="node",
                      help="per node, or per GPU (by UUID, wherever it was: the drains its failures named it in)")
    mttr.add_argument("--format", choices=("text", "json"), default="text", help="(default: %(default)s)")
    export = verbs.add_parser("export", parents=[common], help="every figure as rows: CSV or JSON")
    export.add_argument("--format", choices=("csv", "json"), default="csv", help="(default: %(default)s)")
    export.add_argument("--node", help="only this node's figures")
    export.add_argument("--since", type=since, metavar="WHEN", help="only runs since: 7d, 12h or an ISO date")
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    return verbs, common


def open_store(args: argparse.Namespace, create: bool, reading: bool) -> Store:
    try:
        return Store(args.store or default_path(cluster=args.cluster), create=create, reading=reading)
    except HistoryError as exc:
        fail(str(exc))
    except RuntimeError as exc:  # no home directory for the default
        fail(f"{exc}: give one with --store FILE")


def run(args: argparse.Namespace) -> int:
    writes = args.verb == "import" or (args.verb == "baseline" and args.set)
    with open_store(args, create=args.verb == "import", reading=not writes) as store:
        return {"import": do_import, "runs": do_runs, "show": do_show, "baseline": do_baseline,
                "offenders": do_offenders, "mttr": do_mttr, "export": do_export}[args.verb](store, args)


def do_mttr(store: Store, args: argparse.Namespace) -> int:
    rows = mttr.summary(mttr.episodes(store, args.since, args.node), args.by)
    if args.format == "json":
        print(json.dumps(rows, indent=1))
    else:
        period = f"since {args.since}" + (f" on {args.node}" if args.node else "")
        sys.stdout.write(shown(mttr.render(rows, period, args.by)))
    return EXIT_OK


def do_import(store: Store, args: argparse.Namespace) -> int:
    def progress(path: Path, said: str) -> None:
        print(f"  {shown(str(path))}: {shown(said)}", flush=True)

    outcome = import_paths(store, args.paths, progress)
    for line in outcome.errors:
        print(f"gpucheck: error: {shown(line)}", file=sys.stderr)
    skipped = f"; {len(outcome.not_reports)} other JSON file(s) skipped" if outcome.not_reports else ""
    print(f"history: {outcome.recorded} run(s) recorded, {outcome.known} recorded before{skipped} "
          f"({store.path}{of_cluster(store)})")
    return EXIT_UNKNOWN if outcome.errors else EXIT_OK


def of_cluster(store: Store) -> str:
    return f", cluster {shown(store.cluster)}" if store.cluster else ""


def do_runs(store: Store, args: argparse.Namespace) -> int:
    rows = queries.runs(store, args.node, args.since, args.limit)
    if not rows:
        print(f"no runs in {store.path}{of_cluster(store)}" + (f" for node {args.node}" if args.node else ""))
        return EXIT_OK
    print(f"runs in {store.path}{of_cluster(store)}, newest first")
    print(f"{'run':>6}  {'started (UTC)':<20}  {'kind':<7}  {'nodes':>5}  {'pass':>4} {'warn':>4} {'fail':>4} "
          f"{'other':>5}  exit  source")
    for r in rows:
        state = "" if r["complete"] else " (incomplete)"
        print(f"{r['run']:>6}  {shown(str(r['started'])):<20}  {shown(str(r['kind'])):<7}  {r['nodes']:>5}  "
              f"{r['pass']:>4} {r['warn']:>4} {r['fail']:>4} {r['other']:>5}  "
              f"{'-' if r['exit_code'] is None else r['exit_code']:>4}  {shown(str(r['source']))}{state}")
    return EXIT_OK


def do_show(store: Store, args: argparse.Namespace) -> int:
    gpu = args.target.startswith("GPU-")
    selection = queries.Selection(node=None if gpu else args.target, uuid=args.target if gpu else None,
                                  check=args.check, figure=args.figure)
    node_runs = queries.recent_node_runs(store, selection, args.runs)
    if not node_runs:
        known = queries.known_nodes(store)
        fail(f"nothing recorded for {'GPU' if gpu else 'node'} {args.target} in {store.path}{of_cluster(store)}"
             + (f" (nodes recorded: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''})" if known else ""))
    found = queries.series(store, selection, node_runs)
    sys.stdout.write(render_series(args.target + (f" of cluster {store.cluster}" if store.cluster else ""),
                                   node_runs, found))
    return EXIT_OK


def render_series(target: str, node_runs: list[dict], found: dict[tuple, dict[int, float]]) -> str:
    labels = {key: shown(f"{key[0]} {key[1]}".strip() + (f" [{key[2]}]" if key[2] and key[2] not in key[1] else "")
                         + ("" if key[3] == NODE_GPU else f"  GPU{key[3]}")) for key in found}
    width = max([len("started (UTC)"), *map(len, labels.values())]) + 2
    header = [("run", [f"#{r['run']}" for r in node_runs]),
              ("started (UTC)", [shown(str(r["started"])[:16]) for r in node_runs]),
              ("node", [shown(str(r["node"])) for r in node_runs]),
              ("verdict", [shown(str(r["status"])) for r in node_runs])]
    rows = header + [(labels[key], [number(values[r["id"]]) if r["id"] in values else "-" for r in node_runs])
                     for key, values in found.items()]
    column = max(16, *(len(c) for _, cells in rows for c in cells)) + 1
    lines = [f"{shown(target)}: its last {len(node_runs)} run(s), oldest first"
             + ("" if found else " (no figure matches)")]
    lines += [f"  {name:<{width}}" + "".join(f"{c:>{column}}" for c in cells) for name, cells in rows]
    return "\n".join(lines) + "\n"


def do_baseline(store: Store, args: argparse.Namespace) -> int:
    if args.run and not args.set:
        fail("--run needs --set (without it, the baseline is shown)")
    if args.set:
        where, params = ("AND run_id = ?", (args.node, args.run)) if args.run else ("", (args.node,))
        rows = store.query(f"SELECT id FROM node_runs WHERE node = ? {where} ORDER BY started DESC, id DESC LIMIT 1",
                           params)
        if not rows:
            fail(f"no run of node {args.node}" + (f" in run {args.run}" if args.run else "") + f" in {store.path}")
        store.set_baseline(args.node, rows[0]["id"], "set by `gpucheck history baseline --set`")
    rows = store.query("""SELECT nr.run_id AS run, nr.started, nr.status, b.since, b.how FROM baselines b
                          JOIN node_runs nr ON nr.id = b.node_run_id WHERE b.node = ?""", (args.node,))
    if not rows:
        print(f"{args.node}: no baseline yet (its first passing `gpucheck node --full` run will be)")
        return EXIT_OK
    b = rows[0]
    print(shown(f"{args.node}: baseline run #{b['run']} of {b['started']} ({b['status']}), {b['how']}, since "
                f"{b['since']}"))
    return EXIT_OK


def do_offenders(store: Store, args: argparse.Namespace) -> int:
    found = {**offenders(store, args.failures, args.days), **gpu_offenders(store, args.failures, args.days)}
    if not found:
        print(f"no node or GPU failed {args.failures} times in {args.days} days ({store.path}{of_cluster(store)})")
    for node, failures in found.items():
        print(shown(f"{node}: failed {len(failures)} times in {args.days} days: "
                    + ", ".join(f"{f.started} ({f.what})" for f in failures)))
    return EXIT_OK


# A cell a spreadsheet would read as a formula (=, +, -, @ first, or a tab or CR before one): OWASP's CSV injection.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A node's text as a spreadsheet may show it: never a formula (a leading ' keeps it text), no control
    character; numbers as they are."""
    if not isinstance(value, str):
        return value
    text = shown(value)
    return "'" + text if value.startswith(FORMULA_START) else text


def do_export(store: Store, args: argparse.Namespace) -> int:
    rows = queries.figure_rows(store, queries.Selection(node=args.node, since=args.since))
    for row in rows:
        row["node"] = row["node"] if row["node"] != CLUSTER else "(cluster)"
        row["gpu"] = None if row["gpu"] == NODE_GPU else row["gpu"]
    if args.format == "json":
        text = json.dumps([{k: row[k] for k in EXPORT_COLUMNS} for row in rows], indent=1) + "\n"
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, EXPORT_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)
        text = out.getvalue()
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        write_output(args.output, text)
    except OSError as exc:
        fail(f"cannot write {args.output}: {exc.strerror or exc}")
    print(f"history: {len(rows)} figure(s) written to {args.output}", file=sys.stderr)
    return EXIT_OK
