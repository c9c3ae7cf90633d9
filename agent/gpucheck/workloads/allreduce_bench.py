"""Built-in all-reduce bus-bandwidth benchmark, for nodes where nccl-tests is not installed.

Run as a file by a framework virtualenv's python on every rank:

    mpirun -np 2 --allow-run-as-root --bind-to none --map-by slot \\
        /opt/stacks/tf-horovod/bin/python allreduce_bench.py --framework horovod --size 64M
    horovodrun --gloo -np 2 -H localhost:2 /opt/stacks/tf-horovod/bin/python allreduce_bench.py
    /opt/stacks/torch/bin/torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 \\
        allreduce_bench.py --framework torch

``--framework horovod`` uses ``hvd.allreduce(op=Sum)`` (horovod.tensorflow, or horovod.torch when that is
the binding installed): NCCL on GPUs when Horovod was built with it, MPI or Gloo on CPU.
``--framework torch`` uses ``torch.distributed.all_reduce`` (NCCL when CUDA is available, else Gloo).
``auto`` picks torch under torchrun (``TORCHELASTIC_RUN_ID`` set), Horovod otherwise.

The figures are computed as nccl-tests computes them for all-reduce (src/common.cu ``BenchTime`` and
src/all_reduce.cu ``AllReduceGetBw``): after ``--warmup`` iterations and a barrier, ``--iters`` operations
are timed; time = elapsed / iters on each rank, then averaged over the ranks (nccl-tests' default
``-a 1``); ``algbw = bytes / 1e9 / time`` (GB/s, 10^9) and ``busbw = algbw * 2 (n - 1) / n``. Use one
large size for a pass/fail figure. Then, like nccl-tests' ``-c 1``, one more all-reduce on data whose
sum is known exactly (small integers in float32) is compared element by element: ``wrong`` counts the
elements that differ (must be 0). ``--inject-corruption RANK`` makes that rank send one wrong element,
to prove the check fails when it should. The timed loop reduces a buffer of zeros (out of place with
Horovod, in place with torch), so values cannot overflow over many iterations.

Output: one ``GPUCHECK_RESULT {json}`` line per rank on stdout (one ``write``), logs on stderr. Fields:
ok, workload, framework, backend (nccl|mpi|gloo), controller and binding (Horovod), rank, size,
local_rank, hostname, pid, devices, versions, bytes, count, dtype, warmup, iters, time_us
(rank-averaged), time_us_rank, algbw_GBps, busbw_GBps, wrong, max_abs_err, wall_s, error.
Standard library + the framework + rank_io.py (copied beside it) only, no gpucheck import; Python 3.9+.
"""

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "allreduce_bench"
UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework


def parse_size(text):
    """'64M' -> 67108864 (binary units, as nccl-tests' -b/-e), '1G', '4096'."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64M, 1G, 4096)")
    return int(match.group(1)) * UNITS[match.group(2)]


def parse_args(argv=None):
    p = rank_io.parser(__doc__)
    p.add_argument("--framework", choices=("auto", "horovod", "torch"), default="auto")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto", help="torch only")
    p.add_argument("--size", type=parse_size, default=64 * 1024 ** 2, help="bytes per rank (default 64M)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-check", action="store_true", help="skip the correctness check")
    p.add_argument("--inject-corruption", type=int, metavar="RANK", default=None,
                   help="testing: that rank adds 1 to one element of its check data (the check must fail)")
    return rank_io.parse(p, argv)


def bus_factor(nranks):
    """nccl-tests' all-reduce factor (AllReduceGetBw, ring/tree algorithms): 2 (n - 1) / n."""
    return 2.0 * (nranks - 1) / nranks


def pattern(rank, arange):
    """Rank `rank`'s check data: small integers (0..96), exact in float32, and so are their sums."""
    return (arange * 7 + rank * 13) % 97


def expected_table(nranks):
    """sum over ranks of pattern(r, i) depends only on (7 i) mod 97: 97 exact sums, gathered per element.

    O(97 n) instead of O(n * count); exact while 96 n < 2**24 (n < 174,000 ranks).
    """
    return [float(sum((a + 13 * r) % 97 for r in range(nranks))) for a in range(97)]


def main(argv=None):
    args = parse_args(argv)
    rank_io.claim_stdout()
    start = time.monotonic()
    framework = args.framework
    if framework == "auto":
        framework = "torch" if os.environ.get("TORCHELASTIC_RUN_ID") else "horovod"
    record = rank_io.new_record(WORKLOAD, framework=framework, bytes=args.size, dtype="float32",
                                warmup=args.warmup, iters=args.iters)
    return rank_io.guarded(record, lambda: bench(framework, args, record), log, start, args.timeout_s)


def bench(framework, args, record):
    """The benchmark on this rank: None when the all-reduce check found no wrong element, else why not."""
    if args.size < 4 or args.iters < 1:
        raise ValueError("--size must be at least 4 bytes and --iters at least 1")
    (bench_torch if framework == "torch" else bench_horovod)(args, record)
    return f"{record['wrong']} wrong elements after all-reduce" if record.get("wrong", 0) else None


def finish(record, nranks, sec_rank, sec_avg):
    """Fill in the nccl-tests figures from the per-operation time."""
    nbytes = record["count"] * 4
    record["time_us_rank"] = round(sec_rank * 1e6, 3)
    record["time_us"] = round(sec_avg * 1e6, 3)
    algbw = nbytes / 1.0e9 / sec_avg
    record["algbw_GBps"] = round(algbw, 6)
    record["busbw_GBps"] = round(algbw * bus_factor(nranks), 6)
    log(f"rank {record['rank']}/{nranks} {record['backend']}: {nbytes} B in {record['time_us']:.1f} us, "
        f"algbw {record['algbw_GBps']:.3f} GB/s, busbw {record['busbw_GBps']:.3f} GB/s, "
        f"wrong {record.get('wrong')}")


def bench_torch(args, record):
    import torch
    import torch.distributed as dist

    record["versions"] = {"torch": torch.__version__}
    device, backend, local_rank = rank_io.torch_device(torch, args.backend, record)
    dist.init_process_group(backend=backend, init_method="env://")
    try:
        rank, nranks = dist.get_rank(), dist.get_world_size()
        count = args.size // 4
        record.update(rank=rank, size=nranks, local_rank=local_rank, backend=backend, count=count)

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        buf = torch.zeros(count, dtype=torch.float32, device=device)  # 0 + 0: no overflow over iterations
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        sync()
        sec = (time.perf_counter() - t0) / args.iters
        avg = torch.tensor([sec], dtype=torch.float64, device=device)
        dist.all_reduce(avg)
        sec_avg = float(avg.item()) / nranks
        if not args.no_check:
            arange = torch.arange(count, dtype=torch.int64, device=device)
            data = pattern(rank, arange).to(torch.float32)
            if args.inject_corruption == rank:
                data[count // 2] += 1
            table = torch.tensor(expected_table(nranks), dtype=torch.float32, device=device)
            expected = table[(arange * 7) % 97]
            dist.all_reduce(data)
            sync()
            diff = (data - expected).abs()
            record["wrong"] = int((diff != 0).sum().item())
            record["max_abs_err"] = float(diff.max().item())
        finish(record, nranks, sec, sec_avg)
    finally:
        dist.destroy_process_group()


def bench_horovod(args, record):
    try:
        import horovod.tensorflow as hvd
        import tensorflow as tf
        binding = "tensorflow"
    except ImportError:
        tf = None
        import horovod.torch as hvd
        binding = "torch"
    import horovod

    record["versions"] = {"horovod": horovod.__version__}
    hvd.init()
    rank, nranks = hvd.rank(), hvd.size()
    count = args.size // 4
    controller = rank_io.horovod_controller(hvd)
    record.update(rank=rank, size=nranks, local_rank=hvd.local_rank(), count=count, binding=binding,
                  controller=controller)
    if binding == "tensorflow":
        record["versions"]["tensorflow"] = tf.__version__
        gpu = rank_io.pin_tf_gpu(tf, hvd.local_rank())
        on_gpu = gpu is not None
        device = "/GPU:0" if on_gpu else "/CPU:0"
        record["devices"] = [gpu] if on_gpu else ["CPU"]

        def allreduce(t, name):
            with tf.device(device):
                return hvd.allreduce(t, op=hvd.Sum, name=name)

        def zeros():
            with tf.device(device):
                return tf.zeros([count], dtype=tf.float32)

        def done(t):
            return float(t[0].numpy())  # eager ops run synchronously; this waits for the last one

        def check_data(r):
            with tf.device(device):
                return tf.cast(pattern(r, tf.range(count, dtype=tf.int64)), tf.float32)

        def expected():
            with tf.device(device):
                table = tf.constant(expected_table(nranks), dtype=tf.float32)
                return tf.gather(table, (tf.range(count, dtype=tf.int64) * 7) % 97)

        def corrupt(t):
            with tf.device(device):
                return tf.tensor_scatter_nd_add(t, [[count // 2]], [1.0])

        def compare(got, want):
            diff = tf.abs(got - want)
            return int(tf.math.count_nonzero(diff).numpy()), float(tf.reduce_max(diff).numpy())
    else:
        import torch
        on_gpu = torch.cuda.is_available()
        dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count()) if on_gpu else torch.device("cpu")
        record["versions"]["torch"] = torch.__version__
        record["devices"] = [f"GPU:{dev.index}"] if on_gpu else ["CPU"]

        def allreduce(t, name):
            return hvd.allreduce(t, op=hvd.Sum, name=name)

        def zeros():
            return torch.zeros(count, dtype=torch.float32, device=dev)

        def done(t):
            return float(t[0].item())

        def check_data(r):
            return pattern(r, torch.arange(count, dtype=torch.int64, device=dev)).to(torch.float32)

        def expected():
            table = torch.tensor(expected_table(nranks), dtype=torch.float32, device=dev)
            return table[(torch.arange(count, dtype=torch.int64, device=dev) * 7) % 97]

        def corrupt(t):
            t[count // 2] += 1
            return t

        def compare(got, want):
            diff = (got - want).abs()
            return int((diff != 0).sum().item()), float(diff.max().item())

    record["backend"] = ("nccl" if on_gpu and hvd.nccl_built() else controller)
    src = zeros()
    out = src
    for _ in range(args.warmup):
        out = allreduce(src, "gpucheck.allreduce_bench")
    done(out)
    done(allreduce(zeros()[:1], "gpucheck.barrier"))  # a barrier: every rank has finished the warm-up
    t0 = time.perf_counter()
    for _ in range(args.iters):
        out = allreduce(src, "gpucheck.allreduce_bench")
    done(out)
    sec = (time.perf_counter() - t0) / args.iters
    if binding == "tensorflow":
        sec_avg = float(hvd.allreduce(tf.constant([sec], dtype=tf.float64), op=hvd.Sum,
                                      name="gpucheck.time").numpy()[0]) / nranks
    else:
        import torch
        sec_avg = float(hvd.allreduce(torch.tensor([sec], dtype=torch.float64), op=hvd.Sum,
                                      name="gpucheck.time")[0]) / nranks
    if not args.no_check:
        mine = check_data(rank)
        if args.inject_corruption == rank:
            mine = corrupt(mine)
        got = allreduce(mine, "gpucheck.allreduce_check")
        record["wrong"], record["max_abs_err"] = compare(got, expected())
    finish(record, nranks, sec, sec_avg)


if __name__ == "__main__":
    status = main()
    if "horovod" in sys.modules:  # MPI must see Horovod finalize at exit: only torch ranks skip finalization
        sys.exit(status)
    rank_io.exit_now(status)
