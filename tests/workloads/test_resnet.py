"""The ResNet-50 training benchmark (docs/training.md, "The workloads") for real, on CPU ranks: both scripts at
2 ranks and DDP at 1 too (mpirun for Horovod, torchrun for DDP, command lines from gpucheck.workloads.launch; Horovod's
1-rank run is the lab's, each host's own job in tests/cluster_lab/test_cluster_lab.py), the
width-64 model's parameter count in both frameworks, Keras's mixed-precision step, the options, the shared
timed loop, and a peer that never comes."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import pytest

from gpucheck.workloads.launch import mpirun_command, script_path, torchrun_command
from gpucheck.workloads.results import parse_results
from workload_helpers import WAIT_S, WATCHDOG_S, Stack, free_ports, launch, load_workload

HOROVOD = script_path("resnet-horovod")
TORCH = script_path("resnet-torch")
SMALL = {"--width": 8, "--image-size": 32, "--batch-size": 8, "--warmup-steps": 2, "--iterations": 3,
         "--steps-per-iteration": 2, "--seed": 7}
SMALL_ARGS = [str(w) for pair in SMALL.items() for w in pair] + ["--timeout-s", str(WATCHDOG_S)]
TIMEOUT = WAIT_S
RESNET50_PARAMS = 25_557_032  # torchvision.models.resnet50(): sum(p.numel() for p in model.parameters())
# The contract's fields of a rank that did its job (besides the framework's own version fields).
FIELDS = {"ok", "workload", "rank", "size", "local_rank", "local_size", "hostname", "devices", "model", "width",
          "image_size", "batch_size", "precision", "n_params", "warmup_steps", "iterations", "steps_per_iteration",
          "iteration_images_per_s", "images_per_s", "loss_first", "loss_last", "loss_finite", "weights_sha256",
          "wall_s"}
FRAMEWORK_FIELDS = {"resnet_horovod_keras": {"tf_version", "horovod_version", "controller"},
                    "resnet_torch_ddp": {"torch_version", "backend"}}


def resnet50_params(width: int, classes: int) -> int:
    """Counted from the architecture by hand (convolutions without bias, batch norm scale and offset, the
    classifier's weights and bias), independently of either script."""
    total, cin = 3 * width * 7 * 7 + 2 * width, width
    for stage, blocks in enumerate((3, 4, 6, 3)):
        inner = width * 2 ** stage
        out = 4 * inner
        for block in range(blocks):
            total += cin * inner + 2 * inner + inner * inner * 9 + 2 * inner + inner * out + 2 * out
            if block == 0:  # the projection shortcut
                total += cin * out + 2 * out
            cin = out
    return total + cin * classes + classes


def test_the_hand_count_is_torchvisions_resnet50():
    assert resnet50_params(64, 1000) == RESNET50_PARAMS


def mpirun(stack: Stack, ranks: int):
    cmd = mpirun_command([str(stack.python), str(HOROVOD), *SMALL_ARGS], [("localhost", ranks)], as_root=True,
                         oversubscribe=True, tcp_if="lo")
    return launch(cmd, stack.env(), TIMEOUT)


def torchrun(stack: Stack, ranks: int):
    cmd = torchrun_command(TORCH, SMALL_ARGS, nnodes=1, node_rank=0, nproc_per_node=ranks, master_addr="127.0.0.1",
                           master_port=free_ports(1), torchrun=str(stack.bin / "torchrun"))
    return launch(cmd, stack.env(), TIMEOUT)


def results_of(done, ranks: int) -> list[dict]:
    assert done.returncode == 0, done.explain()
    results = sorted(parse_results(done.stdout), key=lambda r: r.get("rank", -1))
    assert [r.get("rank") for r in results] == list(range(ranks)), done.explain()
    return results


@pytest.fixture(scope="module")
def horovod_runs(tf_horovod: Stack) -> dict[int, list[dict]]:
    return {2: results_of(mpirun(tf_horovod, 2), 2)}


@pytest.fixture(scope="module")
def torch_runs(torch_stack: Stack) -> dict[int, list[dict]]:
    return {ranks: results_of(torchrun(torch_stack, ranks), ranks) for ranks in (1, 2)}


RUNS = [("horovod_runs", "resnet_horovod_keras", 2),
        ("torch_runs", "resnet_torch_ddp", 1), ("torch_runs", "resnet_torch_ddp", 2)]


@pytest.mark.parametrize("runs, workload, ranks", RUNS)
def test_every_rank_reports_the_contracts_fields(request, runs, workload, ranks):
    for r in request.getfixturevalue(runs)[ranks]:
        missing = (FIELDS | FRAMEWORK_FIELDS[workload]) - set(r)
        assert not missing, f"rank {r['rank']} lacks {sorted(missing)}: {r}"
        assert r["ok"] is True and "error" not in r, r
        assert (r["workload"], r["model"], r["size"], r["local_size"]) == (workload, "resnet50", ranks, ranks)
        assert (r["width"], r["image_size"], r["batch_size"]) == (8, 32, 8)
        assert (r["warmup_steps"], r["iterations"], r["steps_per_iteration"]) == (2, 3, 2)
        assert r["precision"] == "fp32" and r["devices"] == ["CPU"]  # auto on a CPU: no mixed precision
        assert r["n_params"] == resnet50_params(8, 1000)


@pytest.mark.parametrize("runs, workload, ranks", RUNS)
def test_throughput_is_the_median_of_the_timed_iterations_and_the_loss_is_finite(request, runs, workload, ranks):
    for r in request.getfixturevalue(runs)[ranks]:
        rates = r["iteration_images_per_s"]
        assert len(rates) == 3 and all(v > 0 for v in rates), r
        assert r["images_per_s"] == statistics.median(rates)
        assert r["loss_finite"] is True and math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"])
        # 8 steps on one fixed batch: the net memorises it, so the loss falls (the steps were applied)
        assert r["loss_last"] < r["loss_first"], r


@pytest.mark.parametrize("runs", ["horovod_runs", "torch_runs"])
def test_two_ranks_end_with_the_same_weights_and_know_each_other(request, runs):
    results = request.getfixturevalue(runs)[2]
    assert len({r["weights_sha256"] for r in results}) == 1, results
    assert sorted(r["local_rank"] for r in results) == [0, 1]
    # each rank trains on its own batch (seeded by rank): equal losses would mean one batch for all
    assert results[0]["loss_first"] != results[1]["loss_first"]


def test_the_launchers_and_versions(horovod_runs, torch_runs):
    for r in horovod_runs[2]:
        assert (r["controller"], r["tf_version"], r["horovod_version"]) == ("mpi", "2.15.1", "0.28.1")
    for r in torch_runs[2]:
        assert r["backend"] == "gloo" and r["torch_version"].startswith("2.13.0")


def in_venv(stack: Stack, script, code: str) -> dict:
    """Run `code` in the stack's python with the workload script loaded as `bench` (its main not run)."""
    prelude = ("import importlib.util, json, sys\n"
               f"spec = importlib.util.spec_from_file_location('bench', {str(script)!r})\n"
               "bench = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(bench)\n")
    # -I: nothing from the working directory on sys.path, so no file of the source tree shadows a framework
    done = subprocess.run([str(stack.python), "-I", "-c", prelude + code], capture_output=True, text=True,
                          timeout=TIMEOUT, env=stack.env())
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


KERAS_PROBE = """
import horovod.tensorflow as hvd
import tensorflow as tf
out = {"n_params": bench.count_params(bench.build_model(tf, 64, 224, 1000))}
hvd.init()
tf.keras.mixed_precision.set_global_policy("mixed_float16")
tf.keras.utils.set_random_seed(3)
model = bench.build_model(tf, 8, 32, 10)
opt = bench.make_optimizer(tf, True)
gen = tf.random.Generator.from_seed(3)
images = gen.normal([16, 32, 32, 3])
labels = gen.uniform([16], minval=0, maxval=10, dtype=tf.int64)
step = bench.make_step(tf, hvd, model, opt, images, labels, True)
out["losses"] = bench.make_settle(tf)([step() for _ in range(12)])
out["tracings"] = step.traced.experimental_get_tracing_count()
out.update(optimizer=type(opt).__name__, loss_scale=float(opt.loss_scale), logits=model.output.dtype.name,
           conv=model.get_layer(index=1).compute_dtype, variables={v.dtype.name for v in model.trainable_weights})
print(json.dumps(out, default=sorted))
"""


@pytest.fixture(scope="module")
def keras_probe(tf_horovod: Stack) -> dict:
    return in_venv(tf_horovod, HOROVOD, KERAS_PROBE)


def test_width_64_is_resnet50_in_keras(keras_probe):
    assert keras_probe["n_params"] == RESNET50_PARAMS


def test_width_64_is_resnet50_in_torch(torch_stack):
    got = in_venv(torch_stack, TORCH, "import torch\n"
                  "print(json.dumps(bench.count_params(bench.build_model(torch, 64, 1000))))\n")
    assert got == RESNET50_PARAMS


def test_the_keras_mixed_precision_step_scales_the_loss_and_trains(keras_probe):
    """The GPU's path, run on the CPU's fp16 kernels: fp16 compute, fp32 variables and logits, a dynamic loss
    scale that drops from 2**15 while gradients overflow (the tiny batch's batch norm makes them large) and
    then lets steps through."""
    assert keras_probe["optimizer"] == "LossScaleOptimizer"
    assert (keras_probe["conv"], keras_probe["logits"], keras_probe["variables"]) == ("float16", "float32", ["float32"])
    losses = keras_probe["losses"]
    assert all(math.isfinite(v) for v in losses)
    assert 1 <= keras_probe["loss_scale"] < 2 ** 15  # lowered on overflow, never to nothing
    assert losses[-1] < losses[0], losses  # the steps after the overflowing ones were applied
    # traced once: the optimizer's variables exist before the first call (tracing is most of a CPU run)
    assert keras_probe["tracings"] == 1


@pytest.mark.parametrize("script", [HOROVOD, TORCH], ids=lambda p: p.name)
@pytest.mark.parametrize("bad", [["--width", "0"], ["--width", "eight"], ["--image-size", "16"],
                                 ["--precision", "fp8"], ["--iterations", "0"], ["--warmup-steps", "-1"]])
def test_bad_options_are_a_usage_error(script, bad):
    done = subprocess.run([sys.executable, str(script), *bad], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert f"argument {bad[0]}" in done.stderr.strip().splitlines()[-1]


def test_the_defaults_are_the_contracts():
    args = load_workload("resnet_torch_ddp.py").parse_args([])
    got = {k: getattr(args, k) for k in ("width", "image_size", "batch_size", "precision", "warmup_steps",
                                         "iterations", "steps_per_iteration", "classes", "timeout_s")}
    assert got == {"width": 64, "image_size": 224, "batch_size": 256, "precision": "auto", "warmup_steps": 10,
                   "iterations": 5, "steps_per_iteration": 10, "classes": 1000, "timeout_s": 0}
    keras = load_workload("resnet_horovod_keras.py").parse_args([])
    assert {k: getattr(keras, k) for k in got} == got


def test_precision_follows_the_device():
    rank_io = load_workload("rank_io.py")
    assert rank_io.resolve_precision("auto", True) == "amp" and rank_io.resolve_precision("auto", False) == "fp32"
    assert rank_io.resolve_precision("fp32", True) == "fp32" and rank_io.resolve_precision("amp", True) == "amp"
    with pytest.raises(ValueError, match="needs a GPU"):
        rank_io.resolve_precision("amp", False)


def test_the_timed_loop_times_each_iteration_up_to_the_devices_end(monkeypatch):
    """Iterations of 1, 2 and 4 s (the clock moves only when settle waits for the device): 16, 8 and 4
    images/s for 2 steps of 8 images, the median 8; the warm-up's loss is the first, a NaN is not finite."""
    rank_io = load_workload("rank_io.py")
    now, waits, settled = [0.0], iter([0.0, 1.0, 2.0, 4.0]), []
    losses = iter([5.0, 4.0, 3.0, float("nan"), 2.5, 2.0, 1.5])
    monkeypatch.setattr(rank_io.time, "perf_counter", lambda: now[0])

    def settle(pending):
        settled.append(len(pending))
        now[0] += next(waits)
        return pending

    args = type("Args", (), {"warmup_steps": 1, "iterations": 3, "steps_per_iteration": 2, "batch_size": 8})
    record = {}
    rank_io.timed_training(lambda: next(losses), settle, args, record, lambda msg: None)
    assert settled == [1, 2, 2, 2]  # the warm-up once, then every iteration ends with the device
    assert record["iteration_images_per_s"] == [16.0, 8.0, 4.0] and record["images_per_s"] == 8.0
    assert (record["loss_first"], record["loss_last"], record["loss_finite"]) == (5.0, 1.5, False)


def test_mixed_precision_without_a_gpu_is_refused(torch_stack):
    done = launch([str(torch_stack.python), str(TORCH), "--precision", "amp"], torch_stack.env(), 120)
    assert done.returncode == 1, done.explain()
    (result,) = parse_results(done.stdout)
    assert result["ok"] is False and "--precision amp needs a GPU" in result["error"]


def test_a_peer_that_never_comes_makes_the_watchdog_report_a_timeout(torch_stack):
    """Rank 0 of 2 started alone: the rendezvous waits for rank 1 until --timeout-s, then one line and 124."""
    env = torch_stack.env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)))
    done = launch([str(torch_stack.python), str(TORCH), *SMALL_ARGS[:-2], "--timeout-s", "10"], env, 120)
    assert done.returncode == 124, done.explain()
    (result,) = parse_results(done.stdout)
    assert result["ok"] is False and result["error"] == "timeout after 10 s (hung collective or peer?)"
    assert (result["rank"], result["size"], result["workload"]) == (0, 2, "resnet_torch_ddp")
