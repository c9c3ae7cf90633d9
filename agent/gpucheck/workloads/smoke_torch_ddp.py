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
wall_s, error. Standard library + PyTorch + rank_io.py (copied beside it) only, no gpucheck import;
Python 3.9+.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "smoke_torch_ddp"
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework


def parse_args(argv=None):
    p = rank_io.data_parallel_parser(__doc__)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    return rank_io.parse(p, argv)


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


def run(args, record):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank_io.torch_process_group(torch, dist, args.backend, record, lambda device, backend: train(
        args, record, torch, dist, DistributedDataParallel, device, backend))


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
    record["weights_sha256"], record["n_params"] = rank_io.weights_digest(  # no numpy needed
        param.detach().to("cpu", torch.float32).reshape(-1).tolist() for _name, param in model.named_parameters())
    record["timed_steps"] = timed
    record["samples_per_s"] = rank_io.samples_per_s(timed, args.batch_size, t0, t1)
    log(f"rank {rank}: loss after {record['loss_last']:.5f}, {record['samples_per_s']} samples/s, "
        f"weights {record['weights_sha256'][:12]}")


def main(argv=None):
    return rank_io.data_parallel_main(WORKLOAD, parse_args(argv), run, rank=("RANK",), size=("WORLD_SIZE",),
                                      local_rank=("LOCAL_RANK",), local_size=("LOCAL_WORLD_SIZE",))


if __name__ == "__main__":
    rank_io.exit_now(main())
