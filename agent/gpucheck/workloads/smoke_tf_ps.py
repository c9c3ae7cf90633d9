"""Smoke distributed training: TensorFlow parameter-server mode (chief + workers + ps), as in older clusters.

One process per task, each started with its own ``TF_CONFIG`` (gpucheck.workloads.launch builds them):

    TF_CONFIG='{"cluster": {"chief": ["n1:2222"], "worker": ["n1:2223", "n2:2222"], "ps": ["n2:2223"]},
                "task": {"type": "worker", "index": 1}}' /opt/stacks/tf-horovod/bin/python smoke_tf_ps.py

- ``ps`` tasks hide their GPUs (variables live on the ps CPU) and serve (``tf.distribute.Server``).
- ``worker`` tasks serve too, on their GPU when one is visible (TensorFlow places the work there).
- the ``chief`` runs ``tf.distribute.experimental.ParameterServerStrategy`` with a ``ClusterCoordinator``:
  a small MLP on synthetic data (a learnable random target), ``--steps`` steps scheduled on the workers
  (asynchronous: each worker reads the variables from the ps, computes a gradient on its batch and
  applies it on the ps).

With W workers a gradient reaches the ps about W-1 updates after the variables it was computed from were
read (its staleness). With one worker's settings (``--lr``, momentum 0.9) 3 workers on a loaded machine
diverged (loss 0.77 -> 4.14), so ``async_optimizer`` (it cites the sources) divides the effective step
lr / (1 - momentum) by W, out of the momentum first, and ramps the rate up over the first W updates (all
computed from the initial weights); one worker trains with ``--lr`` and 0.9 as before. Each worker
shuffles the data in its own order (TF's advice for ``create_per_worker_dataset``): with one seed they
all ran the same batches, the same gradient W times over.

Workers and ps cannot be told to stop by TensorFlow, so they watch the chief's address: they wait (up to
``--chief-wait-s``) for it to come up, then exit as soon as it is gone (``--timeout-s`` bounds them too).

Checks (printed by the chief): the loss on a fixed held-out batch falls; and, since in PS mode there is
one copy of the variables (on the ps) rather than one per rank, "identical weights" is checked as: every
worker reads the variables back (an op placed on that worker) and gets the same bytes as the chief, and
every worker evaluating the trained model on the held-out batch gets the same loss as the chief. Training
is asynchronous and each worker draws its batches in its own random order, so the final weights are not
bit-reproducible from run to run (the data set, the held-out batch and the initial weights are, from
``--seed``).

Output: one ``GPUCHECK_RESULT {json}`` line per task on stdout (one ``write``), logs on stderr.
Every task: ok, workload, role, task_index, hostname, pid, tf_version, devices, wall_s, error.
The chief adds: num_workers, num_ps, steps, warmup_steps, batch_size, seed, lr_base, lr, momentum,
lr_ramp_updates, loss_first, loss_last, loss_fell, steps_per_s, samples_per_s (after warm-up, all workers
together), weights_sha256, n_params, variable_devices, cluster_devices, workers (per worker: index,
weights_sha256, eval_loss, match), workers_agree. Workers and ps add: served_s, chief_seen, exit_reason.
Standard library + TensorFlow + rank_io.py (copied beside it) only, no gpucheck import; Python 3.9+.
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "smoke_tf_ps"
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework


def parse_args(argv=None):
    p = rank_io.parser(__doc__)
    p.add_argument("--steps", type=int, default=60, help="training steps scheduled by the chief")
    p.add_argument("--warmup-steps", type=int, default=10, help=rank_io.WARMUP_HELP)
    p.add_argument("--batch-size", type=int, default=32, help="per step (one worker runs a step)")
    rank_io.add_model_options(p, lr_help="for one worker (momentum 0.9); see async_optimizer for W workers")
    p.add_argument("--chief-wait-s", type=float, default=300, help="workers/ps: how long to wait for the chief")
    p.add_argument("--poll-s", type=float, default=0.5, help="workers/ps: how often to look at the chief")
    return rank_io.parse(p, argv)


def tf_config():
    text = os.environ.get("TF_CONFIG", "")
    if not text:
        raise RuntimeError("TF_CONFIG is not set (see gpucheck.workloads.launch.tf_config)")
    config = json.loads(text)
    task = config.get("task") or {}
    if task.get("type") not in ("chief", "worker", "ps") or not isinstance(task.get("index"), int):
        raise RuntimeError(f"TF_CONFIG task must be chief, worker or ps with an index: {task!r}")
    if len(config.get("cluster", {}).get("chief", [])) != 1:
        raise RuntimeError("TF_CONFIG cluster must have exactly one chief")
    return config


def split_address(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def reachable(address, timeout=1.0):
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def main(argv=None):
    args = parse_args(argv)
    rank_io.claim_stdout()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # TF's advice for ParameterServerStrategy
    start = time.monotonic()
    record = rank_io.new_record(WORKLOAD)
    code = rank_io.guarded(record, lambda: task(args, record, start), log, start)
    sys.stderr.flush()
    # The coordinator's threads and gRPC channels can hold the interpreter at exit: leave now.
    os._exit(code)


def task(args, record, start):
    """This process's task, from TF_CONFIG: the chief trains and checks (None when it passed, else why
    not); a worker or ps serves until the chief is gone, then emits and exits itself."""
    config = tf_config()
    role, index = config["task"]["type"], config["task"]["index"]
    record.update(role=role, task_index=index)
    if role != "chief":
        serve(args, config, role, index, record, start)  # emits and exits itself
    timer = rank_io.watchdog(args.timeout_s, record, why=None) if args.timeout_s > 0 else None
    try:
        run_chief(args, config, record)
        # Stay up (the server with us) for a few of the others' polls: a ps that began watching after a fast
        # chief had already trained and gone never saw it up, and waited for it until its timeout.
        time.sleep(CHIEF_LINGER_POLLS * args.poll_s + 1.0)
    finally:
        if timer is not None:
            timer.cancel()
    if not record.get("loss_fell"):
        return "loss did not fall"
    return None if record.get("workers_agree") else "workers read back different variables"


def serve(args, config, role, index, record, start):
    """A ps or worker task: serve until the chief has come and gone (or a limit passes)."""
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    if role == "ps":  # variables live on the ps CPU
        tf.config.set_visible_devices([], "GPU")
    gpus = tf.config.get_visible_devices("GPU")
    record["devices"] = [g.name.replace("/physical_device:", "") for g in gpus] or ["CPU"]
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    log(f"{role} {index} serving at {server.target} on {record['devices']}")
    chief = config["cluster"]["chief"][0]

    def finish(reason, ok):
        record.update(ok=ok, exit_reason=reason, served_s=round(time.monotonic() - start, 3),
                      wall_s=round(time.monotonic() - start, 3))
        if not ok:
            record["error"] = reason
        log(f"{role} {index}: {reason}")
        rank_io.emit(record)
        sys.stderr.flush()
        os._exit(0 if ok else 1)

    deadline = start + args.timeout_s if args.timeout_s > 0 else None
    seen, misses = False, 0
    record["chief_seen"] = False
    while True:
        now = time.monotonic()
        if deadline is not None and now > deadline:
            finish(f"timeout after {args.timeout_s:g} s", ok=False)
        up = reachable(chief)
        if up and not seen:
            seen = True
            record["chief_seen"] = True
            log(f"{role} {index}: chief {chief} is up")
        if seen:
            misses = 0 if up else misses + 1
            if misses >= 3:
                finish("chief finished", ok=True)
        elif now - start > args.chief_wait_s:
            finish(f"chief {chief} never came up within {args.chief_wait_s:g} s", ok=False)
        time.sleep(args.poll_s)


CHIEF_LINGER_POLLS = 3  # polls of the workers and ps the chief outlasts its training by
MOMENTUM = 0.9  # one worker's momentum, as in the synchronous smoke jobs


def async_optimizer(lr, num_workers, momentum=MOMENTUM):
    """(learning rate, momentum, ramp) of asynchronous parameter-server SGD with `num_workers` workers, from
    one worker's `lr` and `momentum`: the effective step lr / (1 - momentum) divided by the number of
    workers W, out of the momentum first (1 - momentum W times larger, down to momentum 0), then out of
    the rate; and with W > 1 the rate ramps up linearly over the first `ramp` = W updates (lr / W, 2 lr / W,
    ... lr). One worker: (lr, momentum, 0), as before.

    - A gradient is applied after the updates of the others in flight, about W-1 of them (its staleness),
      and the step that keeps training stable shrinks with the staleness: Lian et al., "Asynchronous
      Parallel Stochastic Gradient for Nonconvex Optimization" (NeurIPS 2015, arXiv:1506.08272); Zhang
      et al., "Staleness-aware Async-SGD for Distributed Deep Learning" (IJCAI 2016, arXiv:1511.05950)
      divide the rate by the staleness, on average about the number of workers.
    - Mitliagkas et al., "Asynchrony begets Momentum, with an Application to Deep Learning" (2016,
      arXiv:1605.09774): W asynchronous workers act as an implicit momentum of about 1 - 1/W on top of the
      optimizer's, so the explicit momentum should come down as the workers go up. Hence the momentum
      first: with 7-8 workers and the lab's 30 steps, the rate alone divided by W (momentum 0.9) ended at
      0.30-1.29 times the starting loss (above it in 3 runs of 41), this at 0.21-0.24 (10 runs).
    - The first W gradients are all computed from the initial weights, when gradients are largest: the
      gradual warm-up of Goyal et al., "Accurate, Large Minibatch SGD" (arXiv:1706.02677) over those W
      updates. Without it, 8 workers in 20 steps ended above the starting loss in 2 runs of 19.
    (The synchronous jobs multiply the rate by the ranks instead: there W gradients are averaged.)
    """
    workers = max(1, num_workers)
    slack = (1.0 - momentum) * workers  # 1 - momentum, W times larger
    rate, momentum = (lr, round(1.0 - slack, 12)) if slack <= 1.0 else (lr / slack, 0.0)
    return rate, momentum, (workers if workers > 1 else 0)


def run_chief(args, config, record):
    import numpy as np
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    cluster = config["cluster"]
    num_workers, num_ps = len(cluster.get("worker", [])), len(cluster.get("ps", []))
    lr, momentum, ramp = async_optimizer(args.lr, num_workers)
    record.update(num_workers=num_workers, num_ps=num_ps, steps=args.steps, warmup_steps=args.warmup_steps,
                  batch_size=args.batch_size, seed=args.seed, lr_base=args.lr, lr=lr, momentum=momentum,
                  lr_ramp_updates=ramp)
    if num_workers < 1 or num_ps < 1:
        raise RuntimeError(f"need at least one worker and one ps, got {num_workers} and {num_ps}")
    tf.keras.utils.set_random_seed(args.seed)
    gpus = tf.config.get_visible_devices("GPU")
    record["devices"] = [g.name.replace("/physical_device:", "") for g in gpus] or ["CPU"]

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    record["cluster_devices"] = sorted(d.name for d in tf.config.list_logical_devices()
                                       if "/job:chief" not in d.name)
    log(f"chief: {num_workers} workers, {num_ps} ps, learning rate {lr:g} (after {ramp} updates), "
        f"momentum {momentum:g}; devices {record['cluster_devices']}")

    pool = max(args.batch_size * 32, 1024)
    x_eval, y_eval, x_pool, y_pool = rank_io.synthetic_data(np, args.seed, pool, args.features)

    def dataset_fn():  # no seed: each worker its own order (see create_per_worker_dataset below)
        return (tf.data.Dataset.from_tensor_slices((x_pool, y_pool))
                .shuffle(pool).repeat().batch(args.batch_size, drop_remainder=True))

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(args.features,)),
            tf.keras.layers.Dense(args.hidden, activation="relu"),
            tf.keras.layers.Dense(1),
        ])
        # lr * (update + 1) / ramp over the first `ramp` updates, then lr (a power-1 "decay" from lr / ramp up to lr)
        rate = lr if ramp < 2 else tf.keras.optimizers.schedules.PolynomialDecay(lr / ramp, ramp - 1, lr)
        optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=rate, momentum=momentum)
    variables = model.trainable_variables
    record["variable_devices"] = sorted({v.device for v in variables})

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (Python 3.9: no strict=)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    @tf.function
    def eval_loss_fn(x, y):
        return tf.reduce_mean(tf.square(model(x, training=False) - y))

    def read_all():
        return [v.numpy() for v in variables]

    record["loss_first"] = float(eval_loss_fn(x_eval, y_eval).numpy())
    log(f"chief: loss before {record['loss_first']:.5f}")
    # Every worker runs the same dataset graph: "shuffled differently if they contain a dataset.shuffle
    # operation and a random seed is not set" (ClusterCoordinator.create_per_worker_dataset). The global
    # seed (set above for the initial weights) would seed the shuffle alike on every worker: clear it.
    tf.random.set_seed(None)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    warm = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(args.warmup_steps)]
    coordinator.join()
    t0 = time.perf_counter()
    timed = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(args.steps - args.warmup_steps)]
    coordinator.join()
    elapsed = time.perf_counter() - t0
    step_losses = [float(r.fetch()) for r in warm + timed]
    record["train_loss_first_steps"] = [round(v, 6) for v in step_losses[:3]]
    record["train_loss_last_steps"] = [round(v, 6) for v in step_losses[-3:]]
    if timed and elapsed > 0:
        record["steps_per_s"] = round(len(timed) / elapsed, 3)
        record["samples_per_s"] = round(len(timed) * args.batch_size / elapsed, 3)
    record["loss_last"] = float(eval_loss_fn(x_eval, y_eval).numpy())
    record["loss_fell"] = bool(record["loss_last"] < record["loss_first"])
    values = read_all()
    record["weights_sha256"], record["n_params"] = rank_io.weights_digest(values, np)
    log(f"chief: loss after {record['loss_last']:.5f}, {record.get('steps_per_s')} steps/s, "
        f"weights {record['weights_sha256'][:12]}")

    # Every worker reads the variables back and evaluates the trained model: same bytes, same loss.
    workers = []
    for i in range(num_workers):
        entry = {"index": i}
        try:
            with tf.device(f"/job:worker/replica:0/task:{i}"):
                copies = [tf.identity(v) for v in variables]
                loss = eval_loss_fn(tf.identity(x_eval), tf.identity(y_eval))
            entry["weights_sha256"] = rank_io.weights_digest([c.numpy() for c in copies], np)[0]
            entry["eval_loss"] = float(loss.numpy())
            entry["devices"] = sorted({c.device for c in copies})
            entry["match"] = (entry["weights_sha256"] == record["weights_sha256"]
                              and abs(entry["eval_loss"] - record["loss_last"]) <= 1e-5 * max(1.0, record["loss_last"]))
        except Exception as exc:  # a worker that cannot answer is a finding, named in the result
            entry.update(match=False, error=str(exc).strip().splitlines()[0][:300])
        workers.append(entry)
    record["workers"] = workers
    record["workers_agree"] = all(w["match"] for w in workers)


if __name__ == "__main__":
    sys.exit(main())
