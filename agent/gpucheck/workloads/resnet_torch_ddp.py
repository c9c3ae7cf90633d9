"""Training benchmark: ResNet-50 v1.5 on synthetic data, PyTorch DistributedDataParallel (docs/training.md).

Run as a file by the torch virtualenv's python under torchrun (env:// rendezvous), on every node:

    /opt/stacks/torch/bin/torchrun --nnodes 1 --nproc-per-node 8 --master-addr 127.0.0.1 \\
        --master-port 29500 resnet_torch_ddp.py --batch-size 256

NCCL on GPUs (one per local rank), Gloo on CPUs (``--backend`` forces one). One batch of random images and
labels made once on the device, seeded per rank; DDP broadcasts rank 0's parameters at construction and
averages the gradients every step. On a GPU it trains in mixed precision (``--precision auto``: autocast
fp16 and a GradScaler) with the channels_last memory format; on a CPU in fp32. ``--width 64`` is ResNet-50
itself (25,557,032 parameters, torchvision's resnet50). Each timed iteration ends with
``torch.cuda.synchronize``.

Output: exactly one line on stdout per rank, ``GPUCHECK_RESULT {json}`` (one ``write``), logs on stderr; a
failure still prints it with ``"ok": false`` and ``"error"``, and ``--timeout-s`` makes a hung rank report a
timeout and exit 124. Fields: ok, workload, rank, size, local_rank, local_size, hostname, pid, backend,
devices, torch_version, model, width, image_size, batch_size, classes, precision, n_params, seed,
warmup_steps, iterations, steps_per_iteration, iteration_images_per_s, images_per_s, loss_first, loss_last,
loss_finite, weights_sha256 (float32 bytes in ``named_parameters`` order), wall_s, error.

Standard library + PyTorch + rank_io.py (copied beside it) only, no gpucheck import; Python 3.9+.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rank_io.py is copied beside this script
import rank_io  # noqa: E402

WORKLOAD = "resnet_torch_ddp"
log = rank_io.init_script(__file__, WORKLOAD)  # our folder off sys.path again: it must not shadow a framework
STAGES = (3, 4, 6, 3)  # bottleneck blocks per stage: ResNet-50
LEARNING_RATE = 0.01


def parse_args(argv=None):
    p = rank_io.benchmark_parser(__doc__)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    return rank_io.parse(p, argv)


def build_model(torch, width, classes):
    """ResNet-50 v1.5 at base `width` (NCHW): 7x7/2 stem, 3x3/2 max pool, bottleneck stages 3-4-6-3 of inner
    width w, 2w, 4w, 8w (outputs 4x that), the stride on each stage's first 3x3 conv, batch norm after
    every conv, global average pool, a linear layer to `classes` logits; torchvision's initialisation."""
    nn = torch.nn

    def conv_bn(cin, cout, kernel, stride=1, relu=True):
        conv = nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False)
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
        return [conv, nn.BatchNorm2d(cout)] + ([nn.ReLU(inplace=True)] if relu else [])

    class Bottleneck(nn.Module):
        def __init__(self, cin, inner, stride):
            super().__init__()
            out = 4 * inner
            self.body = nn.Sequential(*conv_bn(cin, inner, 1), *conv_bn(inner, inner, 3, stride),
                                      *conv_bn(inner, out, 1, relu=False))
            project = stride != 1 or cin != out
            self.shortcut = nn.Sequential(*conv_bn(cin, out, 1, stride, relu=False)) if project else nn.Identity()
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.shortcut(x))

    layers = [*conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, padding=1)]
    cin = width
    for stage, blocks in enumerate(STAGES):
        inner = width * 2 ** stage
        for block in range(blocks):
            layers.append(Bottleneck(cin, inner, 2 if stage > 0 and block == 0 else 1))
            cin = 4 * inner
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def count_params(model):
    """Weights, biases, batch norm scale and offset (its running statistics are buffers, not parameters)."""
    return sum(p.numel() for p in model.parameters())


def make_step(torch, ddp, opt, scaler, images, labels, amp):
    """One training step as a function that returns its loss (a device tensor, not waited for)."""
    loss_fn = torch.nn.CrossEntropyLoss()  # sparse categorical cross-entropy on logits

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = loss_fn(ddp(images), labels)
        scaler.scale(loss).backward()  # DDP all-reduces (averages) the gradients here
        scaler.step(opt)  # skipped, and the scale lowered, when a gradient overflowed
        scaler.update()
        return loss.detach()

    return step


def make_settle(torch, device):
    def settle(losses):
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the GPU runs behind the Python loop: wait for it
        return [float(v) for v in torch.stack(losses).float().cpu().tolist()]

    return settle


def run(args, record):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def precision(device):
        record["precision"] = rank_io.resolve_precision(args.precision, device.type == "cuda")

    rank_io.torch_process_group(torch, dist, args.backend, record, lambda device, backend: train(
        args, record, torch, dist, DistributedDataParallel, device, backend), on_device=precision)


def train(args, record, torch, dist, ddp_cls, device, backend):
    rank, size = dist.get_rank(), dist.get_world_size()
    record.update(rank=rank, size=size, backend=backend)
    amp = record["precision"] == "amp"
    # channels_last: the layout the GPU's tensor cores convolve fastest in (NVIDIA's examples use it too)
    layout = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # one input shape throughout: let cuDNN pick its fastest kernels
    torch.manual_seed(args.seed)  # the same initial weights everywhere; DDP broadcasts rank 0's anyway

    model = build_model(torch, args.width, args.classes).to(device, memory_format=layout)
    record["n_params"] = count_params(model)
    ddp = ddp_cls(model, device_ids=[device.index] if device.type == "cuda" else None)
    data = torch.Generator(device=device).manual_seed(args.seed + rank)  # each rank its own batch, on the device
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=data, device=device)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, args.classes, (args.batch_size,), generator=data, device=device)
    opt = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    log(f"rank {rank}/{size} {backend} {record['devices']} {record['precision']}: {record['n_params']} parameters")
    step = make_step(torch, ddp, opt, scaler, images, labels, amp)
    rank_io.timed_training(step, make_settle(torch, device), args, record, log)
    record["weights_sha256"], _count = rank_io.weights_digest(  # no numpy needed; one tensor at a time
        param.detach().to("cpu", torch.float32).reshape(-1).tolist() for _name, param in model.named_parameters())
    log(f"rank {rank}: {record['images_per_s']} images/s, weights {record['weights_sha256'][:12]}")


def main(argv=None):
    return rank_io.benchmark_main(WORKLOAD, parse_args(argv), run, rank=("RANK",), size=("WORLD_SIZE",),
                                  local_rank=("LOCAL_RANK",), local_size=("LOCAL_WORLD_SIZE",))


if __name__ == "__main__":
    rank_io.exit_now(main())
