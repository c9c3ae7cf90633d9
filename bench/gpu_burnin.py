"""The burn-in's own figures against the same operation through a plain library call, on one GPU, in one run;
then the wall time of the default burn-in for the whole node.

    python3 bench/gpu_burnin.py [--n 8192] [--iterations 20] [--no-node-run]

For each dtype, gpucheck's GEMM (gpucheck.gpuwork.gemm: CuPy matmul, cuBLAS gemmEx for bf16/tf32) against
torch.matmul on the same GPU (PyTorch where installed, else CuPy's plain `a @ b` for the dtypes it has), and
gpucheck's device copy (gpuwork.memory) against torch's `dst.copy_(src)`: each printed with the ratio
gpucheck / plain (goal >= 0.95). First, `gpucheck node --full --only <the burn-in checks>` is timed as a
user runs it (goal: <= 120 s per node with all GPUs in parallel): before this process touches the GPU, since
gpucheck rightly calls a GPU that another process holds busy and runs nothing on it. Needs a CUDA GPU; prints
one line per figure and a final `BENCH {json}` line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "agent"))

from gpucheck.gpuwork import gemm, memory  # noqa: E402
from gpucheck.gpuwork.device import import_cupy, seconds_per_call  # noqa: E402

BURNIN_CHECKS = ["gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.p2p_bandwidth", "gpu.memtest",
                 "gpu.burn", "gpu.sdc"]
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64", "tf32": "float32"}


def plain_gemm_tflops(dtype: str, n: int, iterations: int) -> tuple[float, str]:
    """The same GEMM through PyTorch (cuBLAS underneath), timed the same way; CuPy's own matmul without torch."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        a = torch.randn(n, n, device="cuda", dtype=getattr(torch, TORCH_DTYPES[dtype]))
        b = torch.randn(n, n, device="cuda", dtype=a.dtype)
        c = torch.empty_like(a)
        seconds = timed_torch(torch, lambda: torch.matmul(a, b, out=c), iterations)
        return gemm.flops(n) / seconds / 1e12, f"torch {torch.__version__}"
    cp = import_cupy()
    if dtype in ("bf16", "tf32"):
        raise RuntimeError("no plain CuPy call for bf16/tf32 without PyTorch")
    a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype.replace("fp", "float"))
    b = a.copy()
    return gemm.flops(n) / seconds_per_call(cp, lambda: a @ b, iterations) / 1e12, f"cupy {cp.__version__}"


def timed_torch(torch, call, iterations: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(iterations):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / iterations


def plain_copy_GBps(nbytes: int, iterations: int) -> float:
    import torch

    src = torch.ones(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed_torch(torch, lambda: dst.copy_(src), iterations) / 1e9


def node_run_seconds() -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpucheck", "node", "--full", "--only", *BURNIN_CHECKS,
                           "--format", "json"], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
    return seconds, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=gemm.DEFAULT_N)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--no-node-run", action="store_true", help="skip timing `gpucheck node --full`")
    args = parser.parse_args()
    figures: dict[str, dict] = {}
    if not args.no_node_run:
        seconds, code = node_run_seconds()
        print(f"gpucheck node --full --only <burn-in checks>: {seconds:.1f} s wall, exit {code}")
        figures["node_burnin"] = {"seconds": seconds, "exit": code}
    cp = import_cupy()
    for dtype in gemm.DTYPES:
        ours = gemm.measure(cp, dtype, args.n, args.iterations)
        try:
            plain, library = plain_gemm_tflops(dtype, args.n, args.iterations)
        except Exception as exc:
            print(f"GEMM {dtype:5} n={args.n}: gpucheck {ours:8.1f} TFLOP/s  plain: not measured ({exc})")
            figures[f"gemm_{dtype}"] = {"gpucheck": ours}
            continue
        print(f"GEMM {dtype:5} n={args.n}: gpucheck {ours:8.1f} TFLOP/s  {library} {plain:8.1f}  "
              f"ratio {ours / plain:.3f}")
        figures[f"gemm_{dtype}"] = {"gpucheck": ours, "plain": plain, "ratio": ours / plain, "library": library}
    ours_copy = memory.run(cp, iterations=args.iterations)
    try:
        plain_copy = plain_copy_GBps(ours_copy["bytes"], args.iterations)
        print(f"copy {ours_copy['bytes']} B: gpucheck {ours_copy['copy_GBps']:8.1f} GB/s  torch {plain_copy:8.1f}  "
              f"ratio {ours_copy['copy_GBps'] / plain_copy:.3f}")
        figures["copy"] = {"gpucheck": ours_copy["copy_GBps"], "plain": plain_copy,
                           "ratio": ours_copy["copy_GBps"] / plain_copy}
    except ImportError:
        print(f"copy: gpucheck {ours_copy['copy_GBps']:.1f} GB/s (no PyTorch to compare with)")
        figures["copy"] = {"gpucheck": ours_copy["copy_GBps"]}
    print("BENCH " + json.dumps(figures))


if __name__ == "__main__":
    main()
