"""Training benchmark: ResNet-50 v1.5 on synthetic data, TensorFlow/Keras + Horovod (docs/training.md).

Run as a file by a framework virtualenv's python on every rank, launched by mpirun or horovodrun:

    mpirun -np 8 --allow-run-as-root --bind-to none --map-by slot \\
        /opt/stacks/tf-horovod/bin/python resnet_horovod_keras.py --batch-size 256
    horovodrun --gloo -np 2 -H localhost:2 /opt/stacks/tf-horovod/bin/python resnet_horovod_keras.py \\
        --width 8 --image-size 32 --batch-size 16

The loop is the one of Horovod's examples/tensorflow2/tensorflow2_synthetic_benchmark.py: a tf.function
train step with ``hvd.DistributedGradientTape``, the model's and the optimizer's variables broadcast from
rank 0 after the first step, one batch of random images (NHWC) and labels made once on the device, seeded
per rank. On a GPU (one per local rank) it trains in mixed precision: Keras ``mixed_float16`` with the
logits in float32 and a dynamic loss scale (``--precision auto``); on a CPU in fp32. ``--width 64`` is
ResNet-50 itself (25,557,032 parameters, as torchvision's resnet50 counts them).

Output: exactly one line on stdout per rank, ``GPUCHECK_RESULT {json}`` (one ``write``), logs on stderr; a
failure still prints it with ``"ok": false`` and ``"error"``, and ``--timeout-s`` makes a hung rank report a
timeout and exit 124. Fields: ok, workload, rank, size, local_rank, local_size, hostname, pid, controller,
devices, tf_version, horovod_version, model, width, image_size, batch_size, classes, precision, n_params,
seed, warmup_steps, iterations, steps_per_iteration, iteration_images_per_s, images_per_s, loss_first,
loss_last, loss_finite, weights_sha256, wall_s, error.

Standard library + TensorFlow (and the NumPy it brings) + Horovod + rank_io.py (copied beside it) only, no
gpucheck import; Python 3.9+.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "resnet_horovod_keras"
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework
STAGES = (3, 4, 6, 3)  # bottleneck blocks per stage: ResNet-50
LEARNING_RATE = 0.01


def parse_args(argv=None):
    return rank_io.parse(rank_io.benchmark_parser(__doc__), argv)


def build_model(tf, width, image_size, classes):
    """ResNet-50 v1.5 at base `width` (NHWC): 7x7/2 stem, 3x3/2 max pool, bottleneck stages 3-4-6-3 of inner
    width w, 2w, 4w, 8w (outputs 4x that), the stride on each stage's first 3x3 conv, batch norm after
    every conv, global average pool, logits in float32 (they stay so under mixed precision)."""
    layers = tf.keras.layers

    def conv_bn(x, filters, kernel, stride=1, relu=True):
        # torchvision's initialisation (kaiming normal, fan out) and batch norm constants, so both scripts start
        # alike; a new initializer per layer (Keras gives one unseeded instance's every call the same values)
        init = tf.keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False, kernel_initializer=init)(x)
        x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        return layers.ReLU()(x) if relu else x

    def bottleneck(x, inner, stride):
        shortcut = x
        if stride != 1 or x.shape[-1] != 4 * inner:
            shortcut = conv_bn(x, 4 * inner, 1, stride, relu=False)
        y = conv_bn(x, inner, 1)
        y = conv_bn(y, inner, 3, stride)
        y = conv_bn(y, 4 * inner, 1, relu=False)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    images = tf.keras.Input(shape=(image_size, image_size, 3))
    x = conv_bn(images, width, 7, 2)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for stage, blocks in enumerate(STAGES):
        for block in range(blocks):
            x = bottleneck(x, width * 2 ** stage, 2 if stage > 0 and block == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(classes, dtype="float32")(x)
    return tf.keras.Model(images, logits, name=f"resnet50_w{width}")


def count_params(model):
    """What torch counts as parameters: weights, biases, batch norm scale and offset (not its running stats)."""
    return sum(int(w.shape.num_elements()) for w in model.trainable_weights)


def make_optimizer(tf, amp):
    """SGD with momentum; Keras 2's legacy optimizer (what Horovod 0.28 knows), loss-scaled under amp."""
    opt = tf.keras.optimizers.legacy.SGD(learning_rate=LEARNING_RATE, momentum=0.9)
    return tf.keras.mixed_precision.LossScaleOptimizer(opt) if amp else opt


def make_step(tf, hvd, model, opt, images, labels, amp):
    """One training step as a function that returns its loss (a device tensor, not waited for); after the
    first, every rank takes rank 0's variables (the model's, batch norm statistics included, and the
    optimizer's)."""
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # The optimizer's variables (momentum slots, its step count) made now, not in the first call: a tf.function
    # that creates variables is traced twice, and tracing a ResNet-50 step costs more than a CPU run's steps
    # (measured: 15.0 CPU-s a rank at width 8 traced twice, 11.3 once). Keras 2's legacy optimizer has no
    # public way to build them; without this one, the first call makes them as before.
    create = getattr(opt, "_create_all_weights", None)
    if create is not None:
        create(model.trainable_variables)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
            scaled = opt.get_scaled_loss(loss) if amp else loss
        grads = hvd.DistributedGradientTape(tape).gradient(scaled, model.trainable_variables)
        if amp:
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (strict= is 3.10+; this runs on 3.9)
        return loss

    done = []

    def step():
        loss = train_step()
        if not done:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
            done.append(True)
        return loss

    step.traced = train_step  # the tf.function itself, to count its tracings
    return step


def make_settle(tf):
    def settle(losses):
        tf.test.experimental.sync_devices()  # the GPU runs behind the Python loop: wait for it
        return [float(v) for v in tf.stack(losses).numpy()]

    return settle


def run(args, record):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    record["tf_version"] = tf.__version__
    record["horovod_version"] = horovod.__version__
    rank, size, gpu = rank_io.horovod_rank(hvd, tf, record)
    record["precision"] = rank_io.resolve_precision(args.precision, gpu is not None)
    amp = record["precision"] == "amp"
    if amp:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    tf.keras.utils.set_random_seed(args.seed)  # the same initial weights everywhere; the broadcast enforces it

    model = build_model(tf, args.width, args.image_size, args.classes)
    record["n_params"] = count_params(model)
    data = tf.random.Generator.from_seed(args.seed + rank)  # each rank its own batch, made once, on the device
    images = data.normal([args.batch_size, args.image_size, args.image_size, 3])
    labels = data.uniform([args.batch_size], minval=0, maxval=args.classes, dtype=tf.int64)
    opt = make_optimizer(tf, amp)
    log(f"rank {rank}/{size} {record['controller']} {record['devices']} {record['precision']}: "
        f"{record['n_params']} parameters")
    rank_io.timed_training(make_step(tf, hvd, model, opt, images, labels, amp), make_settle(tf), args, record, log)
    record["weights_sha256"], _count = rank_io.weights_digest([w.numpy() for w in model.trainable_weights], np)
    log(f"rank {rank}: {record['images_per_s']} images/s, weights {record['weights_sha256'][:12]}")


def main(argv=None):
    return rank_io.benchmark_main(WORKLOAD, parse_args(argv), run,
                                  rank=("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"),
                                  size=("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"))


if __name__ == "__main__":
    sys.exit(main())
