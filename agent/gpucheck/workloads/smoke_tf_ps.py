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

Workers and ps cannot be told to stop by TensorFlow, so they watch the chief's address: they wait (up to
``--chief-wait-s``) for it to come up, then exit as soon as it is gone (``--timeout-s`` bounds them too).

Checks (printed by the chief): the loss on a fixed held-out batch falls; and, since in PS mode there is
one copy of the variables (on the ps) rather than one per rank, "identical weights" is checked as: every
worker reads the variables back (an op placed on that worker) and gets the same bytes as the chief, and
every worker evaluating the trained model on the held-out batch gets the same loss as the chief. Training
is asynchronous, so the final weights are not bit-reproducible from run to run (the data and the initial
weights are, from ``--seed``).

Output: one ``GPUCHECK_RESULT {json}`` line per task on stdout (one ``write``), logs on stderr.
Every task: ok, workload, role, task_index, hostname, pid, tf_version, devices, wall_s, error.
The chief adds: num_workers, num_ps, steps, warmup_steps, batch_size, seed, loss_first, loss_last,
loss_fell, steps_per_s, samples_per_s (after warm-up, all workers together), weights_sha256, n_params,
variable_devices, cluster_devices, workers (per worker: index, weights_sha256, eval_loss, match),
workers_agree. Workers and ps add: served_s, chief_seen, exit_reason.
Standard library + TensorFlow only (no gpucheck import); Python 3.9+.
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
WORKLOAD = "smoke_tf_ps"

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

_OUT = {"fd": None, "done": False}
_LOCK = threading.Lock()


def log(msg):
    sys.stderr.write(f"[{WORKLOAD} {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def claim_stdout():
    sys.stdout.flush()
    _OUT["fd"] = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def emit(record):
    with _LOCK:
        if _OUT["done"]:
            return
        _OUT["done"] = True
        line = (MARK + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        os.write(_OUT["fd"] if _OUT["fd"] is not None else 1, line)


def watchdog(seconds, record, on_fire=None):
    def fire():
        if on_fire is not None:
            on_fire(record)
        else:
            record.update(ok=False, error=f"timeout after {seconds:g} s")
        emit(record)
        os._exit(124 if not record.get("ok") else 0)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60, help="training steps scheduled by the chief")
    p.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the throughput figure")
    p.add_argument("--batch-size", type=int, default=32, help="per step (one worker runs a step)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--chief-wait-s", type=float, default=300, help="workers/ps: how long to wait for the chief")
    p.add_argument("--poll-s", type=float, default=0.5, help="workers/ps: how often to look at the chief")
    p.add_argument("--timeout-s", type=float, default=0, help="report a timeout and exit 124 after this")
    return p.parse_args(argv)


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


def make_data(np, seed, n, features, n_eval=256):
    """A learnable regression target y = tanh(x @ w1) @ w2 + small noise; the held-out batch first."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, 1.0 / np.sqrt(features), size=(features, 16)).astype(np.float32)
    w2 = rng.normal(0.0, 0.25, size=(16, 1)).astype(np.float32)

    def draw(count):
        x = rng.normal(0.0, 1.0, size=(count, features)).astype(np.float32)
        return x, (np.tanh(x @ w1) @ w2 + 0.01 * rng.normal(size=(count, 1))).astype(np.float32)

    return (*draw(n_eval), *draw(n))


def main(argv=None):
    args = parse_args(argv)
    claim_stdout()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # TF's advice for ParameterServerStrategy
    start = time.monotonic()
    record = {"ok": False, "workload": WORKLOAD, "hostname": socket.gethostname(), "pid": os.getpid()}
    timer = None
    try:
        config = tf_config()
        role, index = config["task"]["type"], config["task"]["index"]
        record.update(role=role, task_index=index)
        if role == "chief":
            timer = watchdog(args.timeout_s, record) if args.timeout_s > 0 else None
            run_chief(args, config, record)
            record["ok"] = bool(record.get("loss_fell")) and bool(record.get("workers_agree"))
            if not record["ok"]:
                record["error"] = "loss did not fall" if not record.get("loss_fell") else \
                    "workers read back different variables"
        else:
            serve(args, config, role, index, record, start)  # emits and exits itself
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        log(traceback.format_exc())
    record["wall_s"] = round(time.monotonic() - start, 3)
    if timer is not None:
        timer.cancel()
    emit(record)
    sys.stderr.flush()
    # The coordinator's threads and gRPC channels can hold the interpreter at exit: leave now.
    os._exit(0 if record["ok"] else 1)


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
        emit(record)
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


def weights_digest(np, values):
    digest = hashlib.sha256()
    for arr in values:
        digest.update(np.ascontiguousarray(np.asarray(arr, dtype="<f4")).tobytes())
    return digest.hexdigest()


def run_chief(args, config, record):
    import numpy as np
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    cluster = config["cluster"]
    num_workers, num_ps = len(cluster.get("worker", [])), len(cluster.get("ps", []))
    record.update(num_workers=num_workers, num_ps=num_ps, steps=args.steps, warmup_steps=args.warmup_steps,
                  batch_size=args.batch_size, seed=args.seed)
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
    log(f"chief: {num_workers} workers, {num_ps} ps; devices {record['cluster_devices']}")

    pool = max(args.batch_size * 32, 1024)
    x_eval, y_eval, x_pool, y_pool = make_data(np, args.seed, pool, args.features)

    def dataset_fn():
        return (tf.data.Dataset.from_tensor_slices((x_pool, y_pool))
                .shuffle(pool, seed=args.seed).repeat().batch(args.batch_size, drop_remainder=True))

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(args.features,)),
            tf.keras.layers.Dense(args.hidden, activation="relu"),
            tf.keras.layers.Dense(1),
        ])
        optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=args.lr, momentum=0.9)
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
    record["weights_sha256"] = weights_digest(np, values)
    record["n_params"] = int(sum(v.size for v in values))
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
            entry["weights_sha256"] = weights_digest(np, [c.numpy() for c in copies])
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
