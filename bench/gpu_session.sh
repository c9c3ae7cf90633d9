#!/usr/bin/env bash
# What a lent GPU machine (one NVIDIA H100 or H200, lent for one call of the device tool) should run
# to prove what the fakes cannot, within a time budget, leaving at most 8 files under $OUT.
#
#   bash bench/gpu_session.sh [BUDGET_S]   (default: $GPU_SESSION_BUDGET_S, else 480; from any directory)
#   GPU_SESSION_STEPS=busy-gpu,node-full bash bench/gpu_session.sh 200   (only those steps, in the table's order)
#
# Budget. Each step has a bound (the most seconds it may take) and a floor (the fewest seconds worth starting it
# with: about two to three times what it took on the H200 of tests/fixtures/measured/). A step starts only when
# the budget left, less KEEP seconds (the `timeout -k` grace for a step that ignores SIGTERM, and the summary),
# is at least its floor; it runs under `timeout -k 10 min(bound, that)`. So the script ends within its budget
# (plus a second), and a step that does not fit is reported "not started (budget)". A step whose tool, Python
# module or file is missing is "skipped" with the reason. A failing step never stops the next (no set -e).
#
# Order: the most valuable first, so that a short budget (or a machine taken back) loses the least:
#   1 nvidia-smi     (10 s)  which GPU, driver and CUDA the rest ran on; the XML is a parser test input
#   2 node-passive   (60 s)  the agent's everyday mode (Slurm health check) against the real NVML, in seconds; a
#                            lone H200 or H100 PCIe is judged against the profile derived from its SKU entry
#   3 node-full     (240 s)  the product's headline: `gpucheck node --full`, every burn-in worker on the real
#                            GPU and judged (a 10 s burn); if only this ran, the session still answers "does it
#                            work on a real GPU"
#   4 spread        (120 s)  the same GPU's GEMM, HBM and host-copy figures three times in a row, then recorded into
#                            a history store (`gpucheck history import`/`show`): the run-to-run spread behind
#                            the regression threshold (history.regression_drop_pct, 5 %), on real reports
#   5 rma            (90 s)  `gpucheck rma 0` with the reports the steps before kept and that store: NVML's
#                            identity fields (serial, VBIOS, board part number, InfoROM), nvidia-smi -q, the bug
#                            report where installed; the archive comes back when it fits the device tool's limits
#   6 planted-fault  (60 s)  the judge on real NVML samples: a profile whose burn temperature limit is 20 C must
#                            fail gpu.burn naming the GPU; cheap, and a false pass is the worst bug a checker has
#   7 watch-cost     (75 s)  gpucheck watch idle on the real NVML (bench/watch_cost.py --real-nvml): its CPU and RSS
#                            against an idle sleep, what the fake's figures in docs/watch.md cannot say of a driver
#   8 busy-gpu       (90 s)  another program on the GPU (bench/gpu_neighbour.py: 60 % of the memory, a GEMM loop):
#                            the burn-in must say "busy: pid N" as `error` for it, never fail or pass, and with
#                            --allow-busy the memtest must not pass having tested only what was left free
#   9 cluster-burn  (150 s)  `gpucheck cluster`'s burn stage on this machine as a one-node cluster (bench/
#                            burn_stage_local.py: the stage's node command through a local shell, no sshd): its
#                            verdict and each GPU's burn median and hottest sample over a 60 s burn
#  10 gpu-tests     (180 s)  the tests marked `gpu`: the real kernels, cuBLAS gemmEx, memory faults planted on
#                            the GPU found at their offsets, the p2p and all-reduce programs
#  11 bench         (180 s)  gpucheck's GEMM/copy figures against torch (ratios, goal >= 0.95) and the default
#                            burn-in's wall time; figures already measured once, so this guards against a
#                            regression rather than proving function (the wall time is left out under 150 s)
#  12 resnet50      (150 s)  the training workload (cluster stage `training`) at 1 GPU under torchrun: images/s
#  13 cupy-probe    (120 s)  bench/cupy_probe.py, the exploration the burn-in was written from; gpuwork, its
#                            tests and the bench cover it now, so it runs last, when time is left
#
# Outputs under $OUT, these names only (8 at most whatever happens; scratch files go to a private temporary
# directory removed at exit); summary.txt and steps.log are rewritten after every step, so a run cut short
# still leaves its digest:
#   summary.txt        every step's name, result, exit code, seconds, then its key lines (GPU and driver, node
#                      verdict counts and non-passing checks, burn-in figures, the planted fault's verdict,
#                      the pytest summary, benchmark ratios, ResNet-50 images/s, the CuPy probe's figures)
#   steps.log          every step's stdout and stderr, each under a heading, the last 256 KiB of each
#   nvidia-smi-q-x.xml node-passive.json node-full.json node-fault.json rma.tar.gz bench.txt
# (the gpu tests' output is in steps.log; GPUCHECK_STATE_DIR is a private folder, so the reports gpucheck keeps
# and its Xid state are this session's alone)
# Progress lines and the summary also go to stdout (the device tool returns its last 12,000 characters).
#
# It never changes the GPU's settings: nvidia-smi is only queried (no -pl, -lgc, -pm, -mig, -r, -e, -c).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT" || exit 3
BUDGET=${1:-${GPU_SESSION_BUDGET_S:-480}}
if ! [[ $BUDGET =~ ^[0-9]+$ ]] || ((10#$BUDGET < 1)); then
    echo "usage: bash bench/gpu_session.sh [BUDGET_S]   (a whole number of seconds, not '$BUDGET')" >&2
    exit 2
fi
BUDGET=$((10#$BUDGET))
OUT=${OUT:-/tmp/gpu-session}
KILL_AFTER=10                  # timeout -k: SIGKILL this long after SIGTERM
KEEP=$((KILL_AFTER + 2))       # seconds of the budget no step may use: the kill grace, the last summary
LOG_CAP=262144                 # bytes of each step's output kept in steps.log (the last ones)
MAX_FILES=8                    # what the device tool brings back from $OUT
OUTPUTS=(summary.txt steps.log nvidia-smi-q-x.xml node-passive.json node-full.json node-fault.json rma.tar.gz
         bench.txt)
RMA_MAX_BYTES=$((15 * 1024 * 1024))  # the device tool brings back files of 16 MiB at most

# name           bound floor function            needs: cmd:PROGRAM py:MODULE file:PATH, comma-separated
STEPS=(
  "nvidia-smi       10    5  step_nvidia_smi     cmd:nvidia-smi"
  "node-passive     60   20  step_node_passive   py:yaml,py:psutil,py:rich"
  "node-full       240   90  step_node_full      py:yaml,py:psutil,py:rich,py:cupy"
  "spread          120   60  step_spread         py:yaml,py:psutil,py:rich,py:cupy"
  "rma              90   30  step_rma            py:yaml,py:psutil,py:rich"
  "planted-fault    60   40  step_planted_fault  py:yaml,py:psutil,py:rich,py:cupy"
  "watch-cost       75   45  step_watch_cost     py:yaml,py:psutil,py:pynvml,file:bench/watch_cost.py"
  "busy-gpu         90   60  step_busy_gpu       py:yaml,py:psutil,py:rich,py:cupy,file:bench/gpu_neighbour.py"
  "cluster-burn    150   90  step_cluster_burn   py:yaml,py:psutil,py:rich,py:cupy,file:bench/burn_stage_local.py"
  "gpu-tests       180  120  step_gpu_tests      py:pytest,py:cupy"
  "bench           180   60  step_bench          py:cupy,file:bench/gpu_burnin.py"
  "resnet50        150   60  step_resnet         cmd:torchrun,py:torch,file:agent/gpucheck/workloads/resnet_torch_ddp.py"
  "cupy-probe      120   45  step_cupy_probe     py:cupy,py:numpy,file:bench/cupy_probe.py"
)
BENCH_NODE_RUN_S=150           # the bench times the default burn-in (~80 s on an H200) only when granted this much

now_ms() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then local t=${EPOCHREALTIME/[.,]/}; echo $((10#$t / 1000)); else date +%s%3N; fi
}
T0=$(now_ms)
END=$((T0 + BUDGET * 1000))
left_s() { echo $(((END - $(now_ms)) / 1000)); }
secs() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }

if ! command -v timeout >/dev/null; then echo "gpu_session: no timeout (coreutils): cannot bound the steps" >&2; exit 3; fi
mkdir -p "$OUT" || exit 3
for name in "${OUTPUTS[@]}"; do rm -f "$OUT/$name"; done  # no stale result of an earlier run beside this one's
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX") || exit 3
trap 'rm -rf "$WORK"' EXIT
: >"$WORK/table"; : >"$WORK/digest"
mkdir -p "$WORK/state" && chmod 700 "$WORK/state"
export OUT WORK ROOT BENCH_NODE_RUN_S RMA_MAX_BYTES GPUCHECK_STATE_DIR="$WORK/state" PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT/agent${PYTHONPATH:+:$PYTHONPATH}"

# ---------------------------------------------------------------- the steps (each runs as `bash -c step_x`
# under timeout, with STEP_T = its seconds and KEYS = a file for its key lines; its stdout and stderr go to
# steps.log, and when it writes no key lines the summary shows the last lines of its output)

node_digest() {  # $1: a `gpucheck node --format json` report: counts, non-passing checks, burn-in figures
    python3 - "$1" <<'EOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no report: {exc}")
counts = ", ".join(f"{n} {status}" for status, n in (report.get("counts") or {}).items() if n)
print(f"profile {report.get('profile')}, {counts or 'no checks'} in {report.get('duration_s')} s, "
      f"exit {report.get('exit_code')}")
SKU_JUDGED = ("gpu.memory", "gpu.compute_capability", "gpu.power", "gpu.ecc_mode", "gpu.persistence", "gpu.pcie")
if (report.get("thresholds") or {}).get("sources"):  # a derived profile: what it judged, against what
    judged = {r.get("check"): r for r in report.get("results", []) if r.get("check") in SKU_JUDGED}
    print("  derived: " + "; ".join(f"{c} {judged[c].get('status')} ({judged[c].get('expected')})"
                                   for c in SKU_JUDGED if c in judged)[:400])
ACTIVE = ("gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.memtest", "gpu.burn", "gpu.sdc",
          "host.read_throughput")
lines = {}  # one line per (status, reason): checks that fail for one cause share it
for r in report.get("results", []):
    status, check = r.get("status", "?"), r.get("check", "?")
    if status in ("pass", "skip") and check not in ACTIVE:
        continue
    text = r.get("reason", "") if status != "pass" else json.dumps(r.get("measured"), separators=(",", ":"))
    lines.setdefault((status, text), []).append(check)
for n, ((status, text), checks) in enumerate(lines.items()):
    if n == 20:
        print(f"  ... {len(lines) - n} more lines in the JSON report")
        break
    if len(checks) == 1:
        print(f"  {status.upper():5} {checks[0]}: {text}"[:300])
    else:  # the reason first: a long list of checks must not push it out of the line
        print(f"  {status.upper():5} {len(checks)} checks: {text}: {', '.join(checks)}"[:300])
EOF
}

step_nvidia_smi() {
    local rc=0
    nvidia-smi -q -x >"$OUT/nvidia-smi-q-x.xml" || rc=$?
    nvidia-smi | tee "$WORK/nvidia-smi.txt" || rc=$?
    { grep -m1 -o 'Driver Version: *[^ ]*.*CUDA Version: *[^ ]*' "$WORK/nvidia-smi.txt"
      nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,power.limit,temperature.gpu --format=csv,noheader
    } >"$KEYS"
    return "$rc"
}

step_node_passive() {
    python3 -m gpucheck node --format json --output "$OUT/node-passive.json" --deadline $((STEP_T - 10))
    local rc=$?
    echo "gpucheck node: exit $rc"
    node_digest "$OUT/node-passive.json" >"$KEYS" 2>&1
    return "$rc"
}

step_node_full() {  # the report must be written before the step's timeout: --deadline 15 s inside it
    local deadline=$((STEP_T - 15)) bench=120
    ((bench > deadline - 15)) && bench=$((deadline - 15))
    python3 -m gpucheck node --full --burn-seconds 10 --bench-timeout "$bench" --deadline "$deadline" \
        --format json --output "$OUT/node-full.json"
    local rc=$?
    echo "gpucheck node --full: exit $rc"
    node_digest "$OUT/node-full.json" >"$KEYS" 2>&1
    return "$rc"
}

step_spread() {  # three quick active runs of the same GPU, their spread, then the history store reads them
    local n rc=0 deadline=$(((STEP_T - 20) / 3))
    for n in 1 2 3; do
        python3 -m gpucheck node --only gpu.gemm gpu.memory_bandwidth gpu.host_bandwidth \
            --bench-timeout $((deadline - 5)) --deadline "$deadline" --format json --output "$WORK/spread-$n.json"
        echo "spread run $n: exit $?"
    done
    python3 -m gpucheck history import "$GPUCHECK_STATE_DIR/reports" --store "$WORK/history.sqlite" || rc=$?
    python3 -m gpucheck history runs --store "$WORK/history.sqlite" || rc=$?
    python3 -m gpucheck history show "$(hostname)" --check gpu.gemm --store "$WORK/history.sqlite" || rc=$?
    python3 - "$WORK"/spread-[123].json >"$KEYS" 2>&1 <<'EOF' || rc=1
import json, sys
figures = {}  # (check, GPU, figure) -> its values over the runs
for path in sys.argv[1:]:
    try:
        results = json.load(open(path))["results"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"no report {path}: {exc}")
        continue
    for r in results:
        for gpu, values in (r.get("measured") or {}).items():
            if isinstance(values, dict):
                for name, value in values.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        figures.setdefault((r["check"], gpu, name), []).append(value)
if not figures:
    sys.exit("no figures measured")
widest = 0.0
for (check, gpu, name), values in sorted(figures.items()):
    spread = 100 * (max(values) - min(values)) / max(values) if max(values) else 0.0
    widest = max(widest, spread)
    print(f"{gpu} {check} {name}: {', '.join(f'{v:g}' for v in values)}: spread {spread:.1f} %")
print(f"widest spread over {len(sys.argv) - 1} runs: {widest:.1f} % (the regression threshold is 5 %)")
EOF
    return "$rc"
}

step_rma() {  # the archive of GPU 0 from this session's kept reports; it comes back when small enough
    python3 -m gpucheck rma 0 --reports "$GPUCHECK_STATE_DIR/reports" --store "$WORK/history.sqlite" \
        --timeout $((STEP_T / 2)) -o "$WORK/rma.tar.gz"
    local rc=$? size
    echo "gpucheck rma 0: exit $rc"
    [[ -f $WORK/rma.tar.gz ]] || { echo "no archive written (exit $rc)" >"$KEYS"; return 1; }
    tar -tzvf "$WORK/rma.tar.gz"
    mkdir -p "$WORK/rma" && tar -xzf "$WORK/rma.tar.gz" -C "$WORK/rma"
    size=$(wc -c <"$WORK/rma.tar.gz")
    ((size <= RMA_MAX_BYTES)) && cp "$WORK/rma.tar.gz" "$OUT/rma.tar.gz"
    { echo "archive: $size bytes$( ((size > RMA_MAX_BYTES)) && echo ", too big to bring back")"
      tar -tzf "$WORK/rma.tar.gz" | tr '\n' ' '; echo
      find "$WORK/rma" -name SUMMARY.txt -exec head -n 40 {} \; ; } >"$KEYS" 2>&1
    return "$rc"
}

step_planted_fault() {  # succeeds only when gpu.burn fails, naming the GPU, for the planted temperature limit
    # `generic` is what any GPU can inherit (a lone H200 gets a profile derived from its SKU entry, which is no
    # file); only gpu.burn runs, so the rest of the profile does not matter.
    printf 'name: cold\ndescription: planted fault, a burn temperature limit no GPU under load meets\n%s\n%s\n' \
        'inherits: generic' 'burnin: {burn_temperature_C_max: 20}' >"$WORK/cold.yaml"
    local deadline=$((STEP_T - 10)) bench=60
    ((bench > deadline - 5)) && bench=$((deadline - 5))
    python3 -m gpucheck node --profile "$WORK/cold.yaml" --only gpu.burn --burn-seconds 5 --bench-timeout "$bench" \
        --deadline "$deadline" --format json --output "$OUT/node-fault.json"
    local rc=$?
    echo "gpucheck node --profile cold.yaml --only gpu.burn: exit $rc (2 expected)"
    python3 - "$OUT/node-fault.json" "$rc" >"$KEYS" 2>&1 <<'EOF'
import json, re, sys
try:
    results = json.load(open(sys.argv[1])).get("results", [])
except (OSError, ValueError) as exc:
    sys.exit(f"planted fault NOT shown: no report ({exc}), gpucheck exit {sys.argv[2]}")
burn = next((r for r in results if r.get("check") == "gpu.burn"), {})
reason = burn.get("reason", "")
found = (burn.get("status") == "fail" and re.search(r"\bGPU\d+\b", reason)
         and "burn_temperature_C_max" in reason)
print(f"planted fault {'found' if found else 'NOT found'}: gpu.burn {burn.get('status', 'missing')}, "
      f"gpucheck exit {sys.argv[2]} (2 expected): {reason}"[:400])
sys.exit(0 if found else 1)
EOF
}

step_watch_cost() {  # an idle watcher polling the real NVML every 5 s, beside an idle sleep
    python3 bench/watch_cost.py --real-nvml --seconds $((STEP_T - 25)) | tee "$WORK/watch-cost.txt" || return
    tail -n 3 "$WORK/watch-cost.txt" >"$KEYS"
}

step_busy_gpu() {  # succeeds only when the burn-in names the other program as `error` busy, never fail or pass
    python3 bench/gpu_neighbour.py --memory-fraction 0.6 --seconds $((STEP_T - 5)) >"$WORK/neighbour.txt" 2>&1 &
    local neighbour=$! rc=0 n
    for ((n = 0; n < 60; n++)); do
        grep -q "GPU_NEIGHBOUR ready" "$WORK/neighbour.txt" && break
        kill -0 "$neighbour" 2>/dev/null || break
        sleep 0.5
    done
    cat "$WORK/neighbour.txt"
    python3 -m gpucheck node --only gpu.gemm gpu.memtest --bench-timeout 40 --format json \
        --output "$WORK/busy.json"
    python3 -m gpucheck node --only gpu.memtest --allow-busy --bench-timeout 40 --format json \
        --output "$WORK/allow-busy.json"
    kill "$neighbour" 2>/dev/null
    wait "$neighbour" 2>/dev/null
    python3 - "$WORK/neighbour.txt" "$WORK/busy.json" "$WORK/allow-busy.json" >"$KEYS" 2>&1 <<'EOF' || rc=1
import json, re, sys
said = re.search(r"GPU_NEIGHBOUR ready pid=(\d+) held_GiB=([\d.]+)", open(sys.argv[1], errors="replace").read())
if not said:
    sys.exit("the other program never got going (see steps.log)")
pid = said[1]
print(f"another program on the GPU: pid {pid}, {said[2]} GiB held, a GEMM loop")
ok = True
for path, allowed in ((sys.argv[2], False), (sys.argv[3], True)):
    try:
        results = {r["check"]: r for r in json.load(open(path))["results"]}
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"no report {path}: {exc}")
    for check, r in results.items():
        print(f"{'--allow-busy ' if allowed else ''}{check}: {r['status']}: {r['reason']}"[:300])
        if allowed:  # measured beside it: said so, and the memory it held is never a silent pass
            ok &= r["status"] != "pass" and f"pid {pid}" in r["reason"] and "beside another program" in r["reason"]
        else:
            ok &= r["status"] == "error" and f"busy: pid {pid}" in r["reason"]
print("busy GPU " + ("found: error busy, never fail or a silent pass" if ok else "NOT handled as it should be"))
sys.exit(0 if ok else 1)
EOF
    return "$rc"
}

step_cluster_burn() {  # succeeds when the stage burned this machine and every result passed
    local seconds=$((STEP_T - 60))
    ((seconds > 60)) && seconds=60
    python3 bench/burn_stage_local.py --seconds "$seconds" | tee "$WORK/cluster-burn.txt"
    local rc=${PIPESTATUS[0]}
    python3 - "$WORK/cluster-burn.txt" >"$KEYS" 2>&1 <<'EOF'
import json, sys
lines = [x for x in open(sys.argv[1], errors="replace").read().splitlines() if x.startswith("{")]
if not lines:
    sys.exit("no result line from bench/burn_stage_local.py (see steps.log)")
said = json.loads(lines[-1])
for r in said["results"]:
    print(f"{r['check']}: {r['status']}: {r['reason']}"[:300])
for gpu, g in said["gpus"].items():
    print(f"{gpu}: burn median {g['TFLOPS_median']} TFLOP/s, hottest {g['temperature_C_max']} C, {g['points']} points")
EOF
    return "$rc"
}

step_gpu_tests() {
    python3 -m pytest -q -rfEs -m gpu tests/gpuwork tests/node -p no:cacheprovider 2>&1 | tee "$WORK/gpu-tests.txt"
    local rc=$?
    { grep -E '^(FAILED|ERROR|SKIPPED) ' "$WORK/gpu-tests.txt" | head -n 8 | cut -c1-300
      tail -n 1 "$WORK/gpu-tests.txt"; } >"$KEYS"
    if ((rc == 0)) && ! tail -n 1 "$WORK/gpu-tests.txt" | grep -q ' passed'; then
        echo "no test marked gpu passed: on a GPU machine that is a failure (CuPy saw no CUDA device?)" | tee -a "$KEYS"
        rc=1
    fi
    return "$rc"
}

step_bench() {
    local args=()
    if ((STEP_T < BENCH_NODE_RUN_S)); then
        args=(--no-node-run)
        echo "bench: ${STEP_T} s granted, under ${BENCH_NODE_RUN_S} s: --no-node-run" | tee "$KEYS"
    fi
    python3 bench/gpu_burnin.py "${args[@]}" 2>&1 | tee "$OUT/bench.txt"
    local rc=$?
    grep -E '^(GEMM|copy|gpucheck node)' "$OUT/bench.txt" >>"$KEYS"
    ((rc == 0)) || tail -n 2 "$OUT/bench.txt" >>"$KEYS"
    return "$rc"
}

step_resnet() {
    torchrun --nnodes 1 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29510 \
        agent/gpucheck/workloads/resnet_torch_ddp.py --iterations 5 --timeout-s $((STEP_T - 20)) 2>&1 |
        tee "$WORK/resnet.txt"
    local rc=$?
    { grep -E '\] (rank 0/|iteration|rank 0:)' "$WORK/resnet.txt" | cut -c1-200
      python3 - "$WORK/resnet.txt" <<'EOF'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("GPUCHECK_RESULT "):
        r = json.loads(line.split(" ", 1)[1])
        print(f"ResNet-50 1 GPU: {r.get('images_per_s')} images/s, ok {r.get('ok')}, {r.get('precision')}, "
              f"batch {r.get('batch_size')}, {r.get('devices')}, wall {r.get('wall_s')} s, "
              f"error {r.get('error')}"[:300])
EOF
    } >"$KEYS" 2>&1
    return "$rc"
}

step_cupy_probe() {  # the probe catches every error into its JSON: it fails here on an unexpected ERROR
    python3 bench/cupy_probe.py 2>&1 | tee "$WORK/probe.txt" || return
    python3 - "$WORK/probe.txt" >"$KEYS" 2>&1 <<'EOF'
import json, sys
EXPECTED = {"bf16_dtype", "ml_dtypes_bf16"}  # CuPy has no bfloat16 dtype (gemmEx is the way round); ml_dtypes is optional
figures = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("CUPYPROBE "):
        figures = json.loads(line.split(" ", 1)[1])
if figures is None:
    sys.exit("no CUPYPROBE line")
for key, value in figures.items():
    print(f"{key}: {json.dumps(value, separators=(',', ':'))}"[:240])
errors = [k for k, v in figures.items() if isinstance(v, str) and v.startswith("ERROR") and k not in EXPECTED]
print(f"{len(errors)} unexpected ERROR entries{': ' + ', '.join(errors) if errors else ''}")
sys.exit(1 if errors else 0)
EOF
}

export -f node_digest step_nvidia_smi step_node_passive step_node_full step_spread step_rma step_planted_fault step_watch_cost step_busy_gpu \
    step_cluster_burn step_gpu_tests \
    step_bench step_resnet step_cupy_probe

# ---------------------------------------------------------------- prerequisites, asked once

declare -A NO_MODULE=()
HAVE_PYTHON=1
command -v python3 >/dev/null || HAVE_PYTHON=0
if ((HAVE_PYTHON)); then
    modules=$(for entry in "${STEPS[@]}"; do read -r _ _ _ _ needs <<<"$entry"; tr ',' '\n' <<<"$needs"; done |
              sed -n 's/^py://p' | sort -u)
    # shellcheck disable=SC2086  # one module name a word
    for module in $(timeout 60 python3 -c 'import importlib.util, sys
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        print(name)' $modules); do NO_MODULE[$module]=1; done
fi

missing() {  # $1: a step's needs; prints why it cannot run, nothing if it can
    local need needs reasons=() text=""
    IFS=, read -ra needs <<<"$1"
    for need in "${needs[@]}"; do
        case $need in
            cmd:*) command -v "${need#cmd:}" >/dev/null || reasons+=("no ${need#cmd:}") ;;
            py:*) if ((!HAVE_PYTHON)); then [[ " ${reasons[*]-} " == *" python3 "* ]] || reasons+=("no python3")
                  elif [[ -n ${NO_MODULE[${need#py:}]:-} ]]; then reasons+=("no Python module ${need#py:}"); fi ;;
            file:*) [[ -e ${need#file:} ]] || reasons+=("no ${need#file:}") ;;
        esac
    done
    for need in "${reasons[@]}"; do text+="${text:+, }$need"; done
    echo "$text"
}

# ---------------------------------------------------------------- the summary, rewritten after every step

STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
write_summary() {  # $1: a line for the step now running, if any
    {
        echo "gpu_session.sh on ${HOSTNAME:-?}, started $STARTED, budget ${BUDGET} s, commit $COMMIT"
        printf '%-5s %-14s %5s %6s %5s  %s\n' step name bound secs exit result
        cat "$WORK/table"
        [[ -n ${1:-} ]] && echo "$1"
        echo "elapsed $(secs $(($(now_ms) - T0))) s of the ${BUDGET} s budget"
        echo
        cat "$WORK/digest"
    } >"$WORK/summary"
    cat "$WORK/summary" >"$OUT/summary.txt"
}
record() {  # step number, name, bound, seconds, exit, result
    printf '%-5s %-14s %5s %6s %5s  %s\n' "$@" >>"$WORK/table"
}

# ---------------------------------------------------------------- run

n=${#STEPS[@]}
i=0
failed=0
: >"$OUT/steps.log"
for entry in "${STEPS[@]}"; do
    i=$((i + 1))
    read -r name bound floor fn needs <<<"$entry"
    left=$(left_s)
    if [[ -n ${GPU_SESSION_STEPS:-} && ",$GPU_SESSION_STEPS," != *",$name,"* ]]; then
        record "$i/$n" "$name" "$bound" - - "not asked (GPU_SESSION_STEPS)"
        continue
    fi
    why=$(missing "$needs")
    if [[ -n $why ]]; then
        echo "=== step $i/$n $name: skipped ($why)"
        record "$i/$n" "$name" "$bound" - - "skipped ($why)"
        continue
    fi
    usable=$((left - KEEP))
    if ((usable < floor)); then
        echo "=== step $i/$n $name: not started (budget: ${left} s left, it needs ${floor} s + ${KEEP} s)"
        record "$i/$n" "$name" "$bound" - - "not started (budget: ${left} s left, needs ${floor} + ${KEEP} s)"
        continue
    fi
    t=$((bound < usable ? bound : usable))
    echo "=== step $i/$n $name (bound ${t}s$( ((t < bound)) && echo " of ${bound}s"), ${left}s left) $(date +%T)"
    write_summary "$i/$n   $name: running since $(date +%T), bound ${t} s"
    : >"$WORK/keys"
    began=$(now_ms)
    # timeout makes itself a process group leader: what the step leaves running (a child that ignored SIGTERM
    # while its shell died) is in that group, and killed before the next step finds the GPU busy
    STEP_T=$t KEYS=$WORK/keys timeout -k "$KILL_AFTER" "$t" bash -c "set -o pipefail; $fn" >"$WORK/log" 2>&1 </dev/null &
    group=$!
    wait "$group"
    rc=$?
    left_over=""
    if kill -0 -- "-$group" 2>/dev/null; then
        kill -KILL -- "-$group" 2>/dev/null
        left_over=", processes it left running killed"
    fi
    took=$(secs $(($(now_ms) - began)))
    case $rc in
        0) result=ok ;;
        124) result="timed out at ${t} s" ;;
        137) result="killed ${KILL_AFTER} s after timing out at ${t} s" ;;
        *) result=failed ;;
    esac
    result+=$left_over
    ((rc == 0)) || failed=$((failed + 1))
    {
        echo "=================== step $i/$n $name: $result, exit $rc, ${took} s (bound ${t} s)"
        size=$(wc -c <"$WORK/log")
        if ((size > LOG_CAP)); then
            echo "[... the first $((size - LOG_CAP)) of $size bytes left out ...]"
            tail -c "$LOG_CAP" "$WORK/log"
        else
            cat "$WORK/log"
        fi
        echo
    } >>"$OUT/steps.log"
    {
        echo "--- $i/$n $name: $result, exit $rc, ${took} s"
        if [[ -s $WORK/keys ]]; then head -n 25 "$WORK/keys"; else tail -n 6 "$WORK/log"; fi | cut -c1-300 |
            sed 's/^/    /'
    } >>"$WORK/digest"
    record "$i/$n" "$name" "$t" "$took" "$rc" "$result"
    echo "    $name: $result, exit $rc, ${took} s"
    write_summary
done

files=$(find "$OUT" -type f | wc -l)
if ((files > MAX_FILES)); then
    echo "WARNING: $files files under $OUT: the device tool brings back $MAX_FILES at most" | tee -a "$WORK/digest"
fi
echo "$files files under $OUT: $(cd "$OUT" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')" >>"$WORK/digest"
write_summary
echo
cat "$OUT/summary.txt"
((failed == 0 && files <= MAX_FILES))  # exit 1: a step failed, or too many files for the device tool
