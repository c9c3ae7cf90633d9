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

Standard library + TensorFlow + Horovod + rank_io.py (copied beside it: the result line, the watchdog, the
common options) only, no gpucheck import; Python 3.9+.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "smoke_horovod_keras"
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework


def parse_args(argv=None):
    return rank_io.parse(rank_io.data_parallel_parser(__doc__), argv)


def run(args, record):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    record["horovod_version"] = horovod.__version__
    rank, size, _gpu = rank_io.horovod_rank(hvd, tf, record)
    tf.keras.utils.set_random_seed(args.seed)  # same initial weights everywhere; the broadcast enforces it
    tf.config.experimental.enable_op_determinism()

    per_rank = args.steps * args.batch_size
    # the held-out batch is the same on every rank
    x_eval, y_eval, x_all, y_all = rank_io.synthetic_data(np, args.seed, per_rank * size, args.features)
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
    weights = [w.numpy() for w in model.trainable_weights]
    record["weights_sha256"], record["n_params"] = rank_io.weights_digest(weights, np)
    record["timed_steps"] = clock.timed
    record["samples_per_s"] = rank_io.samples_per_s(clock.timed, args.batch_size, clock.t0, clock.t1)
    log(f"rank {rank}: loss after {record['loss_last']:.5f}, {record['samples_per_s']} samples/s, "
        f"weights {record['weights_sha256'][:12]}")


def main(argv=None):
    return rank_io.data_parallel_main(WORKLOAD, parse_args(argv), run,
                                      rank=("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"),
                                      size=("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"))


if __name__ == "__main__":
    sys.exit(main())
