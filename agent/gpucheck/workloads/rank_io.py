"""What every rank of a workload does around its framework work: shared by the workload scripts.

smoke_horovod_keras.py, smoke_torch_ddp.py, smoke_tf_ps.py, allreduce_bench.py, resnet_horovod_keras.py and
resnet_torch_ddp.py import this file as a sibling (the cluster stages copy it beside them on the nodes:
``launch.SUPPORT_FILES``):

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import rank_io
    log = rank_io.init_script(__file__, WORKLOAD)

and ``init_script`` takes that folder off ``sys.path`` again, so that nothing there (on the nodes or in
the source tree) shadows what the frameworks import.

- the result line: ``claim_stdout`` keeps the real stdout for it, ``emit`` writes ``GPUCHECK_RESULT {json}``
  (sorted keys, no spaces) once per process in a single ``write``, so the lines of several ranks never
  interleave inside a line; ``logger`` logs to stderr;
- ``new_record`` starts a rank's record; ``guarded`` runs the rank's work and emits its line whatever
  happens (``"ok"``, ``"error"``, ``"wall_s"``), with a ``watchdog`` that makes a hung rank report a timeout
  and exit 124; ``data_parallel_main`` is the whole main() of the two synchronous smoke jobs;
- the common options (``parser``, ``parse``, ``add_model_options``, ``data_parallel_parser``) and
  the rank numbers a launcher puts in the environment (``ranks_from_env``);
- the synthetic regression data, the weights digest, and where a rank runs (torch device and process group,
  TensorFlow GPU under Horovod, Horovod's controller);
- the training benchmark (docs/training.md): its options (``benchmark_parser``), its main()
  (``benchmark_main``), the precision a rank trains in (``resolve_precision``) and its timed loop
  (``timed_training``: warm-up, then iterations timed on their own, images/s their median).

Standard library only (a framework module is passed in as an argument where one is needed); Python 3.9+;
no gpucheck import (it runs on the nodes, by a framework virtualenv's python).
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import socket
import statistics
import struct
import sys
import threading
import time
import traceback

MARK = "GPUCHECK_RESULT "
HUNG = "hung collective or peer?"  # what a timeout most likely means in a collective job
WARMUP_HELP = "steps left out of the throughput figure"

_OUT = {"fd": None, "done": False}
_LOCK = threading.Lock()


def init_script(script, workload):
    """What a workload script does right after importing this module: take its folder off sys.path again
    (it was there only for this import: nothing in it may shadow what the frameworks import), and get its
    log function."""
    leave_sys_path(script)
    return logger(workload)


def leave_sys_path(script):
    """Take the folder of `script` off sys.path (Python puts a script's folder first)."""
    here = os.path.dirname(os.path.abspath(script))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]


def logger(workload):
    """A log function for `workload`: ``[name HH:MM:SS] message`` lines on stderr."""
    def log(msg):
        sys.stderr.write(f"[{workload} {time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stderr.flush()

    return log


def claim_stdout():
    """Keep the real stdout for the result line; whatever else is written to fd 1 goes to stderr."""
    sys.stdout.flush()
    _OUT["fd"] = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def emit(record):
    """Write the one result line (once per process), in a single write so ranks never interleave."""
    with _LOCK:
        if _OUT["done"]:
            return
        _OUT["done"] = True
        line = (MARK + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        os.write(_OUT["fd"] if _OUT["fd"] is not None else 1, line)


def watchdog(seconds, record, why=HUNG):
    """After `seconds`, report a timeout for this rank (``"error": "timeout after N s (why)"``) and end the
    process with status 124 (a hung collective, a peer that never came)."""
    def fire():
        record.update(ok=False, error=f"timeout after {seconds:g} s" + (f" ({why})" if why else ""))
        emit(record)
        os._exit(124)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def error_line(exc):
    """The last line of an exception as Python prints it: ``ModuleNotFoundError: No module named 'torch'``."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def guarded(record, work, log, start, timeout_s=0.0):
    """Run this rank's `work()` and emit its result line whatever happens; returns the exit status.

    `work` returns None when the rank did its job, or a string saying why it did not (the line's
    ``"error"``); an exception becomes the ``"error"`` (its last line; the traceback goes to `log`).
    ``"wall_s"`` counts from `start` (``time.monotonic()``). With `timeout_s` > 0 a watchdog ends a hung
    rank (exit 124). KeyboardInterrupt still emits the line, then goes on up.
    """
    record.setdefault("ok", False)
    timer = watchdog(timeout_s, record) if timeout_s > 0 else None
    try:
        failure = work()
        record["ok"] = not failure
        if failure:
            record["error"] = failure
    except BaseException as exc:  # the line must come out whatever happened
        if isinstance(exc, KeyboardInterrupt):
            raise
        record["error"] = error_line(exc)
        log(traceback.format_exc())
    finally:
        record["wall_s"] = round(time.monotonic() - start, 3)
        if timer is not None:
            timer.cancel()
        emit(record)
    return 0 if record["ok"] else 1


def exit_now(status):
    """End the process with `status` once the result line is out, skipping interpreter finalization: gloo's
    C++ threads can abort it ("terminate called without an active exception", pytorch/pytorch#179291)
    after a rank did its job, and a run that passed must not exit 134."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing left to save
            stream.flush()
    os._exit(status)


def new_record(workload, **fields):
    """The result record of this process, failed until its work is done: ok, workload, hostname, pid, fields."""
    return {"ok": False, "workload": workload, "hostname": socket.gethostname(), "pid": os.getpid(), **fields}


def data_parallel_main(workload, args, run, **rank_env):
    """main() of the synchronous smoke jobs (Horovod, DDP) once their options are parsed: the record of the
    run's settings, the rank numbers from the launcher's environment (`rank_env`, as in ranks_from_env),
    then ``run(args, record)``, guarded. Returns the exit status."""
    claim_stdout()
    start = time.monotonic()
    record = new_record(workload, seed=args.seed, epochs=args.epochs, steps_per_epoch=args.steps,
                        batch_size=args.batch_size, warmup_steps=args.warmup_steps)
    ranks_from_env(record, **rank_env)
    return guarded(record, lambda: run(args, record), logger(workload), start, args.timeout_s)


def parser(doc):
    """An argument parser described by the first line of the script's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n")[0])


def parse(p, argv=None):
    """Add the option every workload has (``--timeout-s``, last) and parse."""
    p.add_argument("--timeout-s", type=float, default=0, help="report a timeout and exit 124 after this")
    return p.parse_args(argv)


def add_model_options(p, lr_help=None):
    """--seed, --features, --hidden, --lr: the synthetic regression task and the small MLP that learns it."""
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02, help=lr_help)


def data_parallel_parser(doc):
    """The parser of the synchronous smoke jobs (Horovod, DDP): epochs of steps on every rank."""
    p = parser(doc)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps per epoch on every rank")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--warmup-steps", type=int, default=5, help=WARMUP_HELP)
    add_model_options(p, lr_help="before scaling by the number of ranks")
    p.add_argument("--no-lr-scaling", action="store_true", help="do not multiply the learning rate by size")
    return p


def ranks_from_env(record, **names):
    """Until the framework is up, the launcher's environment is the best guess of who we are: for each
    record key, the first of its variables that holds a number (``rank=("RANK",), size=("WORLD_SIZE",)``)."""
    for key, candidates in names.items():
        for name in candidates:
            if os.environ.get(name, "").isdigit():
                record[key] = int(os.environ[name])
                break


def synthetic_data(np, seed, n, features, n_eval=256):
    """A learnable regression target y = tanh(x @ w1) @ w2 + small noise, from a fixed numpy generator.

    Returns (x_eval, y_eval, x, y): the held-out batch is drawn first, so it does not depend on n.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, 1.0 / np.sqrt(features), size=(features, 16)).astype(np.float32)
    w2 = rng.normal(0.0, 0.25, size=(16, 1)).astype(np.float32)

    def draw(count):
        x = rng.normal(0.0, 1.0, size=(count, features)).astype(np.float32)
        return x, (np.tanh(x @ w1) @ w2 + 0.01 * rng.normal(size=(count, 1))).astype(np.float32)

    return (*draw(n_eval), *draw(n))


def weights_digest(arrays, np=None):
    """(sha256 hex, element count) of `arrays` in order, each as little-endian float32 bytes.

    With `np` (numpy) the arrays are anything numpy converts; without it, flat sequences of Python floats
    (packed with struct: float32 -> double -> float32 is exact, so both ways give the same bytes).
    """
    digest, count = hashlib.sha256(), 0
    for arr in arrays:
        if np is not None:
            data = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
            digest.update(data.tobytes())
            count += int(data.size)
        else:
            values = list(arr)
            digest.update(struct.pack(f"<{len(values)}f", *values))
            count += len(values)
    return digest.hexdigest(), count


def samples_per_s(timed, batch_size, t0, t1):
    """Throughput of the `timed` steps after warm-up, between perf_counter readings t0 and t1 (or None)."""
    if timed and t0 is not None and t1 is not None and t1 > t0:
        return round(timed * batch_size / (t1 - t0), 3)
    return None


def torch_device(torch, backend, record):
    """Where this torch rank runs: cuda:LOCAL_RANK (modulo the GPU count) when CUDA is available, else the
    CPU; the process-group backend for `backend` "auto" is NCCL with CUDA, Gloo without. Fills
    record["devices"]; returns (device, backend, local_rank)."""
    cuda = torch.cuda.is_available()
    backend = backend if backend != "auto" else ("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        record["devices"] = [f"GPU:{device.index}:{torch.cuda.get_device_name(device)}"]
    else:
        device = torch.device("cpu")
        record["devices"] = ["CPU"]
    return device, backend, local_rank


def torch_process_group(torch, dist, backend, record, work, on_device=None):
    """A torch rank's life around its `work(device, backend)`: its device (torch_device), `on_device(device)`
    before the group forms (a setting the device decides), the env:// process group, always destroyed."""
    record["torch_version"] = torch.__version__
    device, backend, _local_rank = torch_device(torch, backend, record)
    if on_device is not None:
        on_device(device)
    dist.init_process_group(backend=backend, init_method="env://")
    try:
        work(device, backend)
    finally:
        dist.destroy_process_group()


def pin_tf_gpu(tf, local_rank):
    """One GPU per local rank, as Horovod's examples do (memory growth on, the other GPUs hidden).
    Returns its name ("GPU:0"), or None where TensorFlow sees no GPU."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    mine = gpus[local_rank % len(gpus)]
    tf.config.experimental.set_memory_growth(mine, True)
    tf.config.set_visible_devices(mine, "GPU")
    return mine.name.replace("/physical_device:", "")


def horovod_rank(hvd, tf, record):
    """Start Horovod, record who this rank is (rank, size, local rank and size, controller) and pin its GPU (one
    per local rank); record["devices"] says where it runs. Returns (rank, size, the GPU's name or None)."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    record.update(rank=rank, size=size, local_rank=hvd.local_rank(), local_size=hvd.local_size(),
                  controller=horovod_controller(hvd))
    gpu = pin_tf_gpu(tf, hvd.local_rank())
    record["devices"] = [gpu] if gpu else ["CPU"]
    return rank, size, gpu


def horovod_controller(hvd):
    """How Horovod's ranks found each other: "mpi", "gloo" (or "unknown")."""
    return "mpi" if hvd.mpi_enabled() else ("gloo" if hvd.gloo_enabled() else "unknown")


# The training benchmark (docs/training.md, "The workloads"): ResNet-50 v1.5 on one synthetic batch.
PRECISIONS = ("auto", "amp", "fp32")


def at_least(low):
    """An argparse type: an integer >= `low` (anything else is a usage error, exit 2)."""
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    convert.__name__ = f"integer >= {low}"  # what argparse names in its error
    return convert


def benchmark_parser(doc):
    """The options of both ResNet-50 benchmark scripts (the contract's, with its defaults)."""
    p = parser(doc)
    p.add_argument("--width", type=at_least(1), default=64, help="base width: 64 is ResNet-50 itself, 8 for CPUs")
    p.add_argument("--image-size", type=at_least(32), default=224, help="pixels, square (the net downsamples 32x)")
    p.add_argument("--batch-size", type=at_least(1), default=256, help="per rank")
    p.add_argument("--classes", type=at_least(1), default=1000)
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto: mixed precision (fp16, loss scaling) on a GPU, fp32 on a CPU")
    p.add_argument("--warmup-steps", type=at_least(0), default=10, help="left out of every figure")
    p.add_argument("--iterations", type=at_least(1), default=5, help="each timed on its own")
    p.add_argument("--steps-per-iteration", type=at_least(1), default=10)
    p.add_argument("--seed", type=int, default=1234, help="initial weights; each rank's batch from seed + rank")
    return p


def benchmark_main(workload, args, run, **rank_env):
    """main() of the benchmark scripts once their options are parsed: the record of the run's settings, the
    rank numbers from the launcher's environment (as in ranks_from_env), then ``run(args, record)``, guarded.
    ``precision`` is the one asked for until the rank knows its device (resolve_precision)."""
    claim_stdout()
    start = time.monotonic()
    record = new_record(workload, model="resnet50", width=args.width, image_size=args.image_size,
                        batch_size=args.batch_size, classes=args.classes, precision=args.precision,
                        warmup_steps=args.warmup_steps, iterations=args.iterations,
                        steps_per_iteration=args.steps_per_iteration, seed=args.seed)
    ranks_from_env(record, **rank_env)
    return guarded(record, lambda: run(args, record), logger(workload), start, args.timeout_s)


def resolve_precision(asked, has_gpu):
    """"amp" or "fp32" for a rank that asked for `asked` (auto: amp exactly when it has a GPU). Mixed
    precision without a GPU is refused: it would measure a path nobody trains on."""
    if asked == "amp" and not has_gpu:
        raise ValueError("--precision amp needs a GPU, and this rank has none")
    return "amp" if asked == "amp" or (asked == "auto" and has_gpu) else "fp32"


def timed_training(step, settle, args, record, log):
    """The benchmark loop: ``args.warmup_steps`` steps left out of every figure, then ``args.iterations``
    iterations of ``args.steps_per_iteration`` steps, each timed on its own (perf_counter, ended by `settle`).

    ``step()`` queues one training step and returns its loss without waiting for the device; ``settle(losses)``
    waits until the device has finished everything queued so far and returns those losses as floats.
    Fills iteration_images_per_s (this rank's images / that iteration's seconds), images_per_s (their
    median), loss_first, loss_last and loss_finite (every loss seen).
    """
    losses = settle([step() for _ in range(args.warmup_steps)]) if args.warmup_steps else []
    rates = []
    for i in range(args.iterations):
        t0 = time.perf_counter()
        pending = [step() for _ in range(args.steps_per_iteration)]
        values = settle(pending)
        seconds = time.perf_counter() - t0
        losses.extend(values)
        rates.append(round(args.steps_per_iteration * args.batch_size / seconds, 3))
        log(f"iteration {i + 1}/{args.iterations}: {rates[-1]} images/s, loss {values[-1]:.4f}")
    record.update(iteration_images_per_s=rates, images_per_s=statistics.median(rates), loss_first=losses[0],
                  loss_last=losses[-1], loss_finite=all(math.isfinite(v) for v in losses))
