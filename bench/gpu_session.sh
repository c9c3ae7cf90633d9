#!/usr/bin/env bash
# Everything a lent GPU machine should run for the burn-in, in one device call (see DEVELOPERS.md's device
# tool): the CuPy probe, the tests marked `gpu`, `gpucheck node --full` on the node as found, the planted
# faults only a real GPU shows, and the benchmark against plain library calls. Writes its logs under $OUT.
#   run: bash bench/gpu_session.sh        (from the repository root, on the GPU machine)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/agent PYTHONUNBUFFERED=1
step() { echo "=== $* ($(date +%T))"; }

step "nvidia-smi"; nvidia-smi -q -x >"$OUT/nvidia-smi-q-x.xml" 2>&1; nvidia-smi | head -20
[ -f ../shared/tools/cupy_probe.py ] && { step "cupy probe"; timeout 300 python3 ../shared/tools/cupy_probe.py \
  >"$OUT/cupy_probe.txt" 2>&1; tail -c 3000 "$OUT/cupy_probe.txt"; }
step "gpu tests"; timeout 600 python3 -m pytest -q -m gpu tests/gpuwork tests/node 2>&1 | tee "$OUT/gpu-tests.txt" | tail -30
step "gpucheck node --full"
timeout 900 python3 -m gpucheck node --full --format json --output "$OUT/node-full.json"; echo "exit $?"
python3 -m gpucheck node --full --only gpu.gemm gpu.memory_bandwidth gpu.host_bandwidth gpu.memtest gpu.sdc \
  gpu.burn --burn-seconds 10 2>&1 | tee "$OUT/node-burnin.txt" | tail -40
step "planted fault: a low burn temperature limit must fail gpu.burn naming the GPU"
mkdir -p /tmp/gpucheck-profiles
printf 'name: cold\ninherits: h100-1gpu\nburnin: {burn_temperature_C_max: 20}\n' >/tmp/gpucheck-profiles/cold.yaml
python3 -m gpucheck node --profile /tmp/gpucheck-profiles/cold.yaml --only gpu.burn --burn-seconds 5 \
  2>&1 | tee "$OUT/fault-cold-burn.txt" | tail -8
step "ResNet-50 training at 1 GPU (PyTorch DDP, AMP, batch 256): images/s beside checks/gpus.yaml's figures"
timeout 600 torchrun --nnodes 1 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29510 \
  agent/gpucheck/workloads/resnet_torch_ddp.py --iterations 5 --timeout-s 550 2>"$OUT/resnet50-torch-1gpu.log" \
  | tee "$OUT/resnet50-torch-1gpu.txt" | cut -c1-600
step "benchmark"; timeout 600 python3 bench/gpu_burnin.py 2>&1 | tee "$OUT/bench.txt" | tail -20
