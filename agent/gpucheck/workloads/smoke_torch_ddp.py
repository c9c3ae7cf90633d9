"""Smoke distributed training: PyTorch DistributedDataParallel on synthetic data.

Run as a file by the torch virtualenv's python under torchrun (env:// rendezvous), on every node:

    /opt/stacks/torch/bin/torchrun --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 \\
        --master-port 29500 smoke_torch_ddp.py --epochs 2 --steps 20

(torchrun runs the script with its own interpreter; ``<venv>/bin/python -m torch.distributed.run`` is the
same.) Across nodes: ``--nnodes N --node-rank I --master-addr FIRST_NODE`` on every node. The backend is
NCCL when CUDA is available, Gloo otherwise (``--backend`` forces one). Same idea and same result fields
as smoke_horovod_keras.py: a small MLP learning a fixed random target, each rank on its own shard of a
dataset generated from ``--seed``; DDP broadcasts rank 0's parameters at construction and averages the
gradients every step. The loss is measured on a fixed held-out batch before and after training; after
training every rank hashes its parameters (float32 bytes, in ``named_parameters`` order).

Output: exactly one line on stdout per rank, ``GPUCHECK_RESULT {json}`` (one ``write``), logs on stderr.
Fields: ok, workload, rank, size, local_rank, local_size, hostname, pid, backend, devices, torch_version,
seed, epochs, steps_per_epoch, batch_size, warmup_steps, loss_first, loss_last, loss_fell, epoch_loss
(rank-averaged), weights_sha256, n_params, samples_per_s (this rank, after warm-up), timed_steps,
wall_s, error. Standard library + PyTorch only (no gpucheck import); Python 3.9+.
"""

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import traceback

MARK = "GPUCHECK_RESULT "
WORKLOAD = "smoke_torch_ddp"

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


def watchdog(seconds, record):
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
    p.add_argument("--no-lr-scaling", action="store_true")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--timeout-s", type=float, default=0, help="report a timeout and exit 124 after this")
    return p.parse_args(argv)


def make_data(torch, seed, n, features, n_eval=256):
    """A learnable regression target y = tanh(x @ w1) @ w2 + small noise, from a fixed generator.

    Returns (x_eval, y_eval, x, y): the held-out batch is drawn first, so it does not depend on n.
    """
    gen = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, 16, generator=gen) / features ** 0.5
    w2 = torch.randn(16, 1, generator=gen) / 4.0

    def draw(count):
        x = torch.randn(count, features, generator=gen)
        return x, torch.tanh(x @ w1) @ w2 + 0.01 * torch.randn(count, 1, generator=gen)

    return (*draw(n_eval), *draw(n))


def main(argv=None):
    args = parse_args(argv)
    claim_stdout()
    start = time.monotonic()
    record = {"ok": False, "workload": WORKLOAD, "hostname": socket.gethostname(), "pid": os.getpid(),
              "seed": args.seed, "epochs": args.epochs, "steps_per_epoch": args.steps,
              "batch_size": args.batch_size, "warmup_steps": args.warmup_steps}
    for key, name in (("rank", "RANK"), ("size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK"),
                      ("local_size", "LOCAL_WORLD_SIZE")):
        if os.environ.get(name, "").isdigit():
            record[key] = int(os.environ[name])
    timer = watchdog(args.timeout_s, record) if args.timeout_s > 0 else None
    try:
        run(args, record)
        record["ok"] = True
    except BaseException as exc:
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
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    record["torch_version"] = torch.__version__
    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        record["devices"] = [f"GPU:{device.index}:{torch.cuda.get_device_name(device)}"]
    else:
        device = torch.device("cpu")
        record["devices"] = ["CPU"]
    dist.init_process_group(backend=backend, init_method="env://")
    try:
        train(args, record, torch, dist, DistributedDataParallel, device, backend)
    finally:
        dist.destroy_process_group()


def train(args, record, torch, dist, ddp_cls, device, backend):
    rank, size = dist.get_rank(), dist.get_world_size()
    record.update(rank=rank, size=size, backend=backend)
    torch.manual_seed(args.seed)  # same initial weights everywhere; DDP broadcasts rank 0's anyway
    torch.use_deterministic_algorithms(True, warn_only=True)

    per_rank = args.steps * args.batch_size
    x_eval, y_eval, x_all, y_all = make_data(torch, args.seed, per_rank * size, args.features)
    x_eval, y_eval = x_eval.to(device), y_eval.to(device)  # the same held-out batch on every rank
    x_mine = x_all[rank * per_rank:(rank + 1) * per_rank].to(device)
    y_mine = y_all[rank * per_rank:(rank + 1) * per_rank].to(device)

    model = torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 1)).to(device)
    ddp = ddp_cls(model, device_ids=[device.index] if device.type == "cuda" else None)
    lr = args.lr if args.no_lr_scaling else args.lr * size
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.MSELoss()

    def eval_loss():
        with torch.no_grad():
            return float(loss_fn(model(x_eval), y_eval).item())

    record["loss_first"] = eval_loss()
    log(f"rank {rank}/{size} {backend} {record['devices']}: loss before {record['loss_first']:.5f}")
    shuffler = torch.Generator().manual_seed(args.seed + rank)
    step, timed, t0, t1 = 0, 0, None, None
    if args.warmup_steps <= 0:
        t0 = time.perf_counter()
    epoch_loss = []
    for _epoch in range(args.epochs):
        order = torch.randperm(per_rank, generator=shuffler).to(device)
        total = torch.zeros((), device=device)
        for i in range(args.steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x_mine[idx]), y_mine[idx])
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            total += loss.detach()
            step += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if step == args.warmup_steps:
                t0 = time.perf_counter()
            elif step > args.warmup_steps:
                timed += 1
                t1 = time.perf_counter()
        mean = total / args.steps
        dist.all_reduce(mean)  # SUM, then divide: the rank-averaged epoch loss (as Horovod's callback)
        epoch_loss.append(round(float(mean.item()) / size, 6))
    record["loss_last"] = eval_loss()
    record["loss_fell"] = bool(record["loss_last"] < record["loss_first"])
    record["epoch_loss"] = epoch_loss
    digest, count = hashlib.sha256(), 0
    for _name, param in model.named_parameters():
        values = param.detach().to("cpu", torch.float32).reshape(-1).tolist()  # no numpy needed
        digest.update(struct.pack(f"<{len(values)}f", *values))  # exact: float32 -> double -> float32
        count += len(values)
    record["weights_sha256"], record["n_params"] = digest.hexdigest(), count
    record["timed_steps"] = timed
    record["samples_per_s"] = (round(timed * args.batch_size / (t1 - t0), 3)
                               if timed and t0 is not None and t1 is not None and t1 > t0 else None)
    log(f"rank {rank}: loss after {record['loss_last']:.5f}, {record['samples_per_s']} samples/s, "
        f"weights {record['weights_sha256'][:12]}")


if __name__ == "__main__":
    sys.exit(main())
