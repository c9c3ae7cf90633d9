"""`gpucheck rma [GPU]`: on the node, one archive with the evidence an RMA asks for (docs/rma.md). Bad input and
an archive that cannot be written are one line and exit 3; a piece of evidence that cannot be had is named in the
archive (`missing`), never the end of it."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import socket
import sys
from pathlib import Path
from typing import Any

from .. import config
from ..cli_types import fail, seconds
from ..history.store import ENV, HistoryError, default_path
from ..model import EXIT_OK
from ..node import kept_reports
from ..node.pipeline import UsageError
from ..profiles import ProfileError
from . import archive, collect, contents
from .target import TargetError, choose, describe

EPILOG = f"""\
Run it on the node, as root (the kernel log, NVIDIA's bug report), after the fault: ideally as soon as it is
seen, before a reset or reboot clears the counters. The archive holds rma.json (every field), SUMMARY.txt (what
a vendor's RMA form asks), nvidia-smi-q.txt as taken, kernel-xid.txt, report-now.json (the passive checks run
now), the node's kept reports each finding comes from, dcgm.txt and nvidia-bug-report.log.gz where installed.
The fleet comparison needs the history store (--store, else ${ENV}, else the default): run it on the admin node's
copy, or copy the store here.

exit codes: 0 archive written (whatever it found); 3 bad input, or the archive could not be written.

examples:
  gpucheck rma 3                           GPU3 of this node: rma-HOST-GPU3-<UTC>.tar.gz here
  gpucheck rma GPU-5d3c0b6e-...            a GPU by its UUID (or its PCI bus id, or its serial number)
  gpucheck rma                             every GPU of the node (a board or baseboard fault)
  gpucheck rma 3 --store /tmp/history.sqlite -o /var/tmp/rma-gpu3.tar.gz
"""
SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class RmaError(Exception):
    """Bad input (a GPU not on this node, node.yaml unreadable) or an archive that cannot be written: one line."""


def add_parser(sub: Any) -> None:
    rma = sub.add_parser("rma", help="one archive with the evidence an RMA asks for (a GPU or the node)",
                         description="Collect what an RMA form and the vendor's engineer ask for about one GPU "
                                     "(or every GPU of this node): identity (serial, UUID, PCI bus, VBIOS, board "
                                     "part number, InfoROM), driver and firmware versions, the failing checks "
                                     "with measured and expected values over time, Xid events, ECC and row-remap "
                                     "counters, burn-in figures against the SKU and the fleet, nvidia-smi -q, "
                                     "DCGM and NVIDIA's bug report where installed.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rma.add_argument("target", nargs="?", metavar="GPU", help="an index, UUID (GPU-...), PCI bus id or serial "
                     "number (default: every GPU of the node)")
    rma.add_argument("-o", "--output", metavar="FILE", help="the archive (default: "
                     "./rma-HOST-TARGET-UTC.tar.gz)")
    rma.add_argument("--store", type=Path, metavar="FILE", help="the history store for the fleet comparison")
    rma.add_argument("--reports", type=Path, metavar="DIR", help="the node's kept reports (default: "
                     "/var/lib/gpucheck/reports, or $GPUCHECK_STATE_DIR/reports)")
    rma.add_argument("--timeout", type=seconds, default=60.0, metavar="S",
                     help="for each probe and for nvidia-smi -q (default: %(default)s)")
    rma.add_argument("--no-bug-report", action="store_true", help="do not run nvidia-bug-report.sh (it can take "
                     "minutes; NVIDIA's RMA process asks for it)")
    rma.add_argument("--config", metavar="FILE", help="node.yaml (default: /etc/gpucheck/node.yaml)")


def say(text: str) -> None:
    print(f"gpucheck rma: {text}", file=sys.stderr, flush=True)


def default_output(target: str | None, now: dt.datetime) -> Path:
    what = f"GPU{target}" if target and target.isdigit() else target or "node"
    name = SAFE.sub("_", f"rma-{socket.gethostname()}-{what}")
    return Path(f"{name}-{now.strftime('%Y%m%dT%H%M%SZ')}{archive.SUFFIX}")


def gather(args: argparse.Namespace) -> tuple[collect.Collected, list[dict[str, Any]]]:
    say("running the passive checks (NVML, the kernel log, ECC, row remapping) ...")
    try:
        report, facts = collect.node_run(args.timeout, config.load(args.config))
    except (UsageError, config.ConfigError, ProfileError) as exc:
        raise RmaError(str(exc)) from None
    try:
        gpus = choose((facts.get("nvml") or {}).get("gpus") or [], args.target)
    except TargetError as exc:
        raise RmaError(str(exc)) from None
    say(f"for {', '.join(describe(g) for g in gpus)}: nvidia-smi -q ...")
    collected = collect.Collected(report=report, facts=facts, nvidia_smi=collect.nvidia_smi(
        [g["pci_bus_id"] for g in gpus if g.get("pci_bus_id")] if args.target else None, args.timeout))
    missing = collected.missing
    missing += unread(report, facts)
    if not collected.nvidia_smi.ok:
        missing.append(f"nvidia-smi -q: {collected.nvidia_smi.describe_failure()}")
    collected.dcgmi = collect.dcgmi_version(args.timeout)
    if collected.dcgmi is None:
        missing.append("DCGM: dcgmi is not installed (no DCGM version; a gpu.dcgm result is kept only where it ran)")
    if args.no_bug_report:
        missing.append("nvidia-bug-report.sh: not run (--no-bug-report)")
    else:
        say("nvidia-bug-report.sh (up to 10 minutes) ...")
        collected.bug_report, collected.bug_report_file = collect.bug_report()
        if collected.bug_report is None:
            missing.append("nvidia-bug-report.sh: not installed (it comes with the NVIDIA driver)")
        elif collected.bug_report_file is None:
            missing.append(f"nvidia-bug-report.sh: no log written ({collected.bug_report.describe_failure()})")
    collected.kept, notes = collect.kept(args.reports or kept_reports.folder())
    missing += notes
    models = sorted({str(g["name"]) for g in gpus if g.get("name")})
    try:
        store = args.store or default_path()
    except (RuntimeError, HistoryError) as exc:  # no home directory, or no one store to take by default
        collected.fleet, note = [], f"no fleet comparison: {exc} (give --store FILE)"
    else:
        collected.fleet, note = collect.fleet(store, models, list(contents.ACTIVE_FIGURE_CHECKS))
    missing += [note] if note else []
    missing += [f"GPU{g.get('index')}: NVML did not report its {label}" for g in gpus
                for key, label in (("serial", "serial number"), ("vbios_version", "VBIOS version"),
                                   ("board_part_number", "board part number")) if not g.get(key)]
    return collected, gpus


def unread(report: Any, facts: dict[str, Any]) -> list[str]:
    """What the passive run could not read: NVML (no GPU identity), the kernel log (no Xid events), with why."""
    why = {r.check: r.reason for r in report.results}
    found = []
    if not (facts.get("nvml") or {}).get("gpus"):
        found.append(f"NVML: no GPU named ({why.get('gpu.count') or 'not read'})")
    if "kernel_log" not in facts:
        found.append(f"kernel log: not read, so no Xid events ({why.get('gpu.xid') or 'not read'})")
    return found


def run(args: argparse.Namespace) -> int:
    try:
        output, _ = write_archive(args)
    except RmaError as exc:
        fail(str(exc))
    print(output)
    return EXIT_OK


def write_archive(args: argparse.Namespace) -> tuple[Path, collect.Collected]:
    """The archive `args` asks for (rma's options; gpucheck watch's repair gives its own), and what went into it
    (its passive run's report among them). RmaError: bad input, or the archive could not be written."""
    now = dt.datetime.now(dt.timezone.utc)
    output = Path(args.output) if args.output else default_output(args.target, now)
    if output.is_dir() or (args.output or "").endswith("/"):
        raise RmaError(f"{args.output} is a directory: name the archive's file (-o {output / 'rma.tar.gz'})")
    collected, gpus = gather(args)
    try:
        archive.write(output, contents.members(collected, gpus, args.target, now))
    except OSError as exc:
        raise RmaError(f"cannot write {output}: {exc.strerror or exc}") from None
    say(f"{output} written ({len(collected.missing)} piece(s) of evidence missing: see its SUMMARY.txt)")
    return output, collected
