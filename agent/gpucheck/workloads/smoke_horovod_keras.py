"""Smoke distributed training: Horovod + TensorFlow/Keras on synthetic data (gpucheck's default smoke job).

Run as a file by a framework virtualenv's python on every rank, launched by mpirun or horovodrun:

    mpirun -np 2 --allow-run-as-root --bind-to none --map-by slot \\
        /opt/stacks/tf-horovod/bin/python smoke_horovod_keras.py --epochs 2 --steps 20
    horovodrun --gloo -np 2 -H localhost:2 /opt/stacks/tf-horovod/bin/python smoke_horovod_keras.py

The model is a small MLP learning a fixed random linear map plus a non-linearity (a learnable target, so
the loss really falls); each rank trains on its own shard of a dataset generated from ``--seed``. Keras
``fit`` runs with ``hvd.DistributedOptimizer``, ``BroadcastGlobalVariablesCallback(0)`` and
``MetricAverageCallback``. The loss is measured on a fixed held-out batch (the same on every rank) before
and after training. After training every rank hashes its trainable weights (float32 bytes, in the
model's own order): with synchronous all-reduce every rank must end with the same hash.

Output: exactly one line on stdout per rank, ``GPUCHECK_RESULT {json}``, written in one ``write`` so the
lines of several ranks never interleave inside a line. Everything else (framework logs, our own) goes to
stderr. A failure still prints the line, with ``"ok": false`` and ``"error"``; ``--timeout-s`` makes a
hung rank print ``"error": "timeout ..."`` and exit 124 instead of waiting forever.

Fields: ok, workload, rank, size, local_rank, local_size, hostname, pid, controller (mpi|gloo), devices,
tf_version, horovod_version, seed, epochs, steps_per_epoch, batch_size, warmup_steps, loss_first,
loss_last, loss_fell, epoch_loss (rank-averaged Keras history), weights_sha256, n_params,
samples_per_s (this rank, after warm-up), timed_steps, wall_s, error.

Standard library + TensorFlow + Horovod only (no gpucheck import); Python 3.9+.
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import traceback

MARK = "GPUCHECK_RESULT "
WORKLOAD = "smoke_horovod_keras"

_HERE = os.path.dirname(os.path.abspath(__file__))
# Our own folder must not shadow anything the frameworks import.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

_OUT = {"fd": None, "done": False}
_LOCK = threading.Lock()


def log(msg):
    sys.stderr.write(f"[{WORKLOAD} {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


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


def watchdog(seconds, record):
    """After `seconds`, report a timeout for this rank and end the process (a hung collective)."""
    def fire():
        record.update(ok=False, error=f"timeout after {seconds:g} s (hung collective or peer?)")
        emit(record)
        os._exit(124)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps per epoch on every rank")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the throughput figure")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02, help="before scaling by the number of ranks")
    p.add_argument("--no-lr-scaling", action="store_true", help="do not multiply the learning rate by size")
    p.add_argument("--timeout-s", type=float, default=0, help="report a timeout and exit 124 after this")
    return p.parse_args(argv)


def make_data(np, seed, n, features, n_eval=256):
    """A learnable regression target y = tanh(x @ w1) @ w2 + small noise, from a fixed generator.

    Returns (x_eval, y_eval, x, y): the held-out batch is drawn first, so it does not depend on n.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, 1.0 / np.sqrt(features), size=(features, 16)).astype(np.float32)
    w2 = rng.normal(0.0, 0.25, size=(16, 1)).astype(np.float32)

    def draw(count):
        x = rng.normal(0.0, 1.0, size=(count, features)).astype(np.float32)
        return x, (np.tanh(x @ w1) @ w2 + 0.01 * rng.normal(size=(count, 1))).astype(np.float32)

    return (*draw(n_eval), *draw(n))


def weights_digest(np, variables):
    digest = hashlib.sha256()
    count = 0
    for var in variables:
        arr = np.ascontiguousarray(np.asarray(var.numpy(), dtype="<f4"))
        digest.update(arr.tobytes())
        count += int(arr.size)
    return digest.hexdigest(), count


def main(argv=None):
    args = parse_args(argv)
    claim_stdout()
    start = time.monotonic()
    record = {"ok": False, "workload": WORKLOAD, "hostname": socket.gethostname(), "pid": os.getpid(),
              "seed": args.seed, "epochs": args.epochs, "steps_per_epoch": args.steps,
              "batch_size": args.batch_size, "warmup_steps": args.warmup_steps}
    # Until Horovod is up, the launcher's environment is the best guess of who we are.
    for key, names in (("rank", ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK")),
                       ("size", ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"))):
        for name in names:
            if os.environ.get(name, "").isdigit():
                record[key] = int(os.environ[name])
                break
    timer = watchdog(args.timeout_s, record) if args.timeout_s > 0 else None
    try:
        run(args, record)
        record["ok"] = True
    except BaseException as exc:  # the line must come out whatever happened
        if isinstance(exc, KeyboardInterrupt):
            raise
        record["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        log(traceback.format_exc())
    finally:
        record["wall_s"] = round(time.monotonic() - start, 3)
        if timer is not None:
            timer.cancel()
        emit(record)
    return 0 if record["ok"] else 1


def run(args, record):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    record["horovod_version"] = horovod.__version__
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    record.update(rank=rank, size=size, local_rank=hvd.local_rank(), local_size=hvd.local_size(),
                  controller="mpi" if hvd.mpi_enabled() else ("gloo" if hvd.gloo_enabled() else "unknown"))

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:  # one GPU per local rank, as Horovod's examples do
        mine = gpus[hvd.local_rank() % len(gpus)]
        tf.config.experimental.set_memory_growth(mine, True)
        tf.config.set_visible_devices(mine, "GPU")
        record["devices"] = [mine.name.replace("/physical_device:", "")]
    else:
        record["devices"] = ["CPU"]
    tf.keras.utils.set_random_seed(args.seed)  # same initial weights everywhere; the broadcast enforces it
    tf.config.experimental.enable_op_determinism()

    per_rank = args.steps * args.batch_size
    x_eval, y_eval, x_all, y_all = make_data(np, args.seed, per_rank * size, args.features)  # eval: same everywhere
    x_mine, y_mine = x_all[rank * per_rank:(rank + 1) * per_rank], y_all[rank * per_rank:(rank + 1) * per_rank]
    data = (tf.data.Dataset.from_tensor_slices((x_mine, y_mine))
            .shuffle(per_rank, seed=args.seed + rank, reshuffle_each_iteration=True)
            .batch(args.batch_size, drop_remainder=True).repeat())

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(args.features,)),
        tf.keras.layers.Dense(args.hidden, activation="relu"),
        tf.keras.layers.Dense(1),
    ])
    lr = args.lr if args.no_lr_scaling else args.lr * size
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=0.9))
    model.compile(loss="mse", optimizer=opt)
    loss_fn = tf.keras.losses.MeanSquaredError()

    def eval_loss():
        return float(loss_fn(y_eval, model(x_eval, training=False)).numpy())

    class Clock(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step = 0
            self.t0 = None
            self.t1 = None
            self.timed = 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step == args.warmup_steps:
                self.t0 = time.perf_counter()
            elif self.step > args.warmup_steps:
                self.timed += 1
                self.t1 = time.perf_counter()

        def on_train_begin(self, logs=None):
            if args.warmup_steps <= 0:
                self.t0 = time.perf_counter()

    clock = Clock()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(), clock]
    model(x_eval[:1])  # build, so the held-out loss can be measured before training
    record["loss_first"] = eval_loss()
    log(f"rank {rank}/{size} {record['controller']} {record['devices']}: loss before {record['loss_first']:.5f}")
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps, callbacks=callbacks, verbose=0)
    record["loss_last"] = eval_loss()
    record["loss_fell"] = bool(record["loss_last"] < record["loss_first"])
    record["epoch_loss"] = [round(float(v), 6) for v in history.history.get("loss", [])]
    record["weights_sha256"], record["n_params"] = weights_digest(np, model.trainable_weights)
    record["timed_steps"] = clock.timed
    if clock.timed and clock.t0 is not None and clock.t1 is not None and clock.t1 > clock.t0:
        record["samples_per_s"] = round(clock.timed * args.batch_size / (clock.t1 - clock.t0), 3)
    else:
        record["samples_per_s"] = None
    log(f"rank {rank}: loss after {record['loss_last']:.5f}, {record['samples_per_s']} samples/s, "
        f"weights {record['weights_sha256'][:12]}")


if __name__ == "__main__":
    sys.exit(main())
