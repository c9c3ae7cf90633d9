"""How big the history store grows, and how fast it takes runs, against the same reports kept as gzip'd JSON
files (what a folder of reports costs). The reports are 8-GPU full runs (`gpucheck node --full`) made from the
H200's measured report (tests/fixtures/measured), each GPU's figures jittered by 1 %, 2 % of them failing (a
failing node run keeps its whole report); one node report a node a day. Prints the bytes a node run takes and
the store's size for 1,000 nodes x 365 days, extrapolated from what was measured (a B-tree grows linearly):
    python bench/history_size.py [--nodes 100] [--days 30]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import gzip
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "agent"))

from gpucheck.history import queries  # noqa: E402
from gpucheck.history.records import from_document  # noqa: E402
from gpucheck.history.regression import compare  # noqa: E402
from gpucheck.history.store import Store  # noqa: E402

MEASURED = ROOT / "tests" / "fixtures" / "measured" / "h200-141gb-driver580" / "gpucheck-node-full-burn20-generic.json"
GPUS = 8
FLEET_NODE_RUNS = 1000 * 365  # 1,000 nodes, one run each a day, for a year


def jitter(value: object, rng: random.Random) -> object:
    if isinstance(value, dict):
        return {k: jitter(v, rng) for k, v in value.items()}
    if isinstance(value, float):
        return round(value * rng.uniform(0.99, 1.01), 2)
    return value


def eight_gpu_report(base: dict, node: int, day: int, rng: random.Random, failing: bool) -> dict:
    doc = copy.deepcopy(base)
    doc["host"] = f"gpu{node:04d}"
    when = dt.datetime(2026, 1, 1, 3, tzinfo=dt.timezone.utc) + dt.timedelta(days=day, seconds=node)
    doc["started"] = when.isoformat()
    doc["facts"]["gpus"] = [{"index": i, "uuid": f"GPU-{node:08x}-0000-4000-8000-{i:012x}",
                             "pci_bus_id": f"00000000:{0x18 + i * 0x10:02X}:00.0", "name": "NVIDIA H200"}
                            for i in range(GPUS)]
    for result in doc["results"]:
        measured = result.get("measured")
        if isinstance(measured, dict) and "GPU0" in measured:
            result["measured"] = {f"GPU{i}": jitter(measured["GPU0"], rng) for i in range(GPUS)}
    if failing:
        gemm = next(r for r in doc["results"] if r["check"] == "gpu.gemm")
        gemm.update(status="fail", reason="GPU5 bf16 612 TFLOP/s, below the floor")
        doc["exit_code"] = 2
    return doc


def reading(store: Store, base: dict, rng: random.Random, nodes: int, days: int) -> dict[str, float]:
    """Milliseconds of what users and `gpucheck cluster` read: the run list, one node's last 8 runs, and the
    history stage's comparison of one node's new run (the mean over every node)."""
    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1000

    node = queries.Selection(node="gpu0000")
    new_runs = [from_document(eight_gpu_report(base, n, days, rng, failing=False)).nodes[0] for n in range(nodes)]
    return {"runs (50)": timed(lambda: queries.runs(store)),
            "show (8 runs)": timed(lambda: queries.series(store, node, queries.recent_node_runs(store, node, 8))),
            "a node's regression check": timed(lambda: [compare(store, part) for part in new_runs]) / nodes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    base, rng = json.loads(MEASURED.read_text()), random.Random(20261127)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.sqlite"
        gz_bytes = figures = 0
        began = time.perf_counter()
        record_s = 0.0
        with Store(path) as store:
            for day in range(args.days):
                for node in range(args.nodes):
                    doc = eight_gpu_report(base, node, day, rng, failing=rng.random() < 0.02)
                    gz_bytes += len(gzip.compress(json.dumps(doc).encode()))
                    run = from_document(doc)
                    figures += len(run.nodes[0].figures)
                    t0 = time.perf_counter()
                    store.record(run, f"day{day}/gpu{node:04d}.json")
                    record_s += time.perf_counter() - t0
            store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            total_s = time.perf_counter() - began
            size = path.stat().st_size
            reads = reading(store, base, rng, args.nodes, args.days)
    node_runs = args.nodes * args.days
    per_run = size / node_runs
    print(f"history store: {node_runs} node runs ({args.nodes} nodes x {args.days} days, {GPUS} GPUs each, "
          f"{figures / node_runs:.0f} figures a run) in {size / 2**20:.1f} MiB: {per_run / 1024:.2f} KiB a node run")
    print(f"  same reports as gzip'd JSON files: {gz_bytes / 2**20:.1f} MiB ({gz_bytes / node_runs / 1024:.2f} KiB a "
          f"run); store / files = {size / gz_bytes:.2f}")
    print(f"  recording: {record_s / node_runs * 1000:.2f} ms a node run ({total_s:.0f} s in all, with making them)")
    print("  reading it: " + ", ".join(f"{what} {ms:.1f} ms" for what, ms in reads.items()))
    print(f"  1,000 nodes x 365 days = {FLEET_NODE_RUNS:,} node runs: {per_run * FLEET_NODE_RUNS / 2**30:.2f} GiB "
          f"(files: {gz_bytes / node_runs * FLEET_NODE_RUNS / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
