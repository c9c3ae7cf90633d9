"""bench/gpu_session.sh, the script a lent GPU machine runs, here without a GPU: its tools (nvidia-smi, python3,
torchrun) are stubs on PATH that log each call, answer at once (or hang, or fail, as a test asks) and write what
the real ones would; the script's own Python snippets (`python3 -c`, `python3 -`) go to the real interpreter, and
the Python modules it looks for are empty packages on PYTHONPATH. The device tool's limits are what is tested:
the script ends within its budget, never leaves more than 8 files under $OUT, runs its steps in the declared
order, and a failing step does not stop the next."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import ROOT

SCRIPT = ROOT / "bench" / "gpu_session.sh"
ORDER = ["nvidia-smi", "node-passive", "node-full", "spread", "rma", "planted-fault", "watch-cost", "busy-gpu",
         "cluster-burn", "gpu-tests", "bench", "resnet50", "cupy-probe"]
OUTPUTS = {"summary.txt", "steps.log", "nvidia-smi-q-x.xml", "node-passive.json", "node-full.json",
           "node-fault.json", "rma.tar.gz", "bench.txt"}
MODULES = ["yaml", "psutil", "rich", "pytest", "cupy", "numpy", "torch", "pynvml"]
# What nvidia-smi may be asked: queries only, never a setting (-pl, -lgc, -pm, -mig, -r, ...).
QUERY_ARGS = re.compile(r"^(-q|-x|-L|--query-gpu=[\w.,]+|--format=[\w,]+)$")

STUB = r'''#!{python}
import io, json, os, shutil, signal, sys, tarfile, time
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
if name == "python3" and args[:1] in (["-c"], ["-"]):
    os.execv(sys.executable, [sys.executable, *args])  # the script's own snippets: the real interpreter
if name == "python3" and args[:2] == ["-m", "gpucheck"]:
    step = ("node-full" if "--full" in args else "planted-fault" if "--profile" in args
            else "busy-gpu" if "gpu.memtest" in args else "rma" if args[2] == "rma"
            else "spread" if args[2] == "history" or "gpu.host_bandwidth" in args else "node-passive")
elif name == "python3" and args[:2] == ["-m", "pytest"]:
    step = "gpu-tests"
elif name == "python3":
    step = {"gpu_burnin.py": "bench", "cupy_probe.py": "cupy-probe", "gpu_neighbour.py": "busy-gpu",
            "burn_stage_local.py": "cluster-burn", "watch_cost.py": "watch-cost"}.get(os.path.basename(args[0]),
                                                                                      "python3?")
else:
    step = {"torchrun": "resnet50"}.get(name, name)
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps([step, *args]) + "\n")
if step in os.environ.get("STUB_HANG", "").split(","):  # deaf to SIGTERM: only the script's SIGKILL ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(os.environ["STUB_DIR"], "hung.pids"), "a") as pids:
        pids.write(f"{os.getpid()}\n")
    time.sleep(60)
code = 0
if step == "nvidia-smi":
    if "-q" in args:
        print("<nvidia_smi_log><driver_version>580.159.04</driver_version></nvidia_smi_log>")
    elif any(a.startswith("--query-gpu") for a in args):
        print("0, NVIDIA H200, 00000000:00:06.0, 143771 MiB, 700.00 W, 31")
    else:
        print("| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04     CUDA Version: 13.0     |")
elif step == "busy-gpu" and "--only" not in args:  # the other program: holds the GPU until the step kills it
    with open(os.path.join(os.environ["STUB_DIR"], "neighbour.pid"), "w") as pid:
        pid.write(str(os.getpid()))
    print(f"GPU_NEIGHBOUR ready pid={os.getpid()} held_GiB=84.2", flush=True)
    time.sleep(30)
elif step == "busy-gpu":
    pid = open(os.path.join(os.environ["STUB_DIR"], "neighbour.pid")).read()
    held = f"pid {pid} (python3, compute) holds 84.2 GiB"
    if "--allow-busy" in args:
        results = [{"check": "gpu.memtest", "status": "error", "reason": "GPU0 (00000000:00:06.0): could not test "
                    f"enough memory: 50.6 GiB of 140.4 GiB total (36% < 85%); measured beside another program "
                    f"(--allow-busy): {held}"}]
    else:
        results = [{"check": c, "status": "error", "reason": f"GPU0 (00000000:00:06.0): busy: {held}"}
                   for c in ("gpu.gemm", "gpu.memtest")]
    with open(args[args.index("--output") + 1], "w") as out:
        json.dump({"profile": "generic", "exit_code": 3, "results": results}, out)
    code = 3
elif step == "spread" and args[2] == "history":
    print(f"history {args[3]}: {os.environ['GPUCHECK_STATE_DIR']}")
elif step == "spread":  # one run of three: its GEMM figure moves 2 % from run to run
    runs = os.path.join(os.environ["STUB_DIR"], "spread.runs")
    n = len(open(runs).read()) if os.path.exists(runs) else 0
    open(runs, "a").write("x")
    report = {"results": [{"check": "gpu.gemm", "status": "pass", "measured": {"GPU0": {"bf16_TFLOPS": 780 - 8 * n}}},
                          {"check": "gpu.host_bandwidth", "status": "pass", "measured": {"GPU0": {"h2d_GBps": 55.1}}}]}
    with open(args[args.index("--output") + 1], "w") as out:
        json.dump(report, out)
elif step == "rma":  # the archive as gpucheck writes it: one folder, SUMMARY.txt in it
    with tarfile.open(args[args.index("-o") + 1], "w:gz") as tar:
        for member, text in (("SUMMARY.txt", "Serial number: 1654123456789\nVBIOS: 96.00.AF.00.01\n"),
                             ("rma.json", "{}")):
            info = tarfile.TarInfo(f"rma-h200-GPU0/{member}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
elif step.startswith(("node-", "planted-")):
    if step == "planted-fault":
        shutil.copy(args[args.index("--profile") + 1], os.path.join(os.environ["STUB_DIR"], "profile-used.yaml"))
        result = {"check": "gpu.burn", "status": "fail", "measured": {"GPU0": {"temperature_C_max": 41}},
                  "reason": "GPU0 (00000000:00:06.0): hottest sample 41 C > 20 C (burnin.burn_temperature_C_max)"}
    else:
        result = {"check": "gpu.gemm", "status": "pass", "measured": {"GPU0": {"bf16_TFLOPS": 785.9}}, "reason": ""}
    code = 2 if step == "planted-fault" else 0
    report = {"profile": "generic", "counts": {"pass": int(not code), "fail": code // 2}, "duration_s": 0.1,
              "exit_code": code, "results": [result]}
    if step == "node-passive":  # a lone H200: the profile derived from its SKU entry
        report.update(profile="derived-h200-sxm-141gb", thresholds={"sources": {"gpu.memory_per_gpu_MiB_min": "SKU"}})
        report["results"] = [{"check": "gpu.memory", "status": "pass", "expected": ">= 142333 MiB", "reason": ""}]
    with open(args[args.index("--output") + 1], "w") as out:
        json.dump(report, out)
elif step == "cluster-burn":
    print("burn: round 1 of 1: 1 node(s) burning for 60 s")
    print(json.dumps({"node": "pass", "wall_s": 71.2, "gpus": {"GPU0": {"TFLOPS_median": 661.1,
          "temperature_C_max": 61, "points": 60}}, "results": [{"check": "cluster.burn.gpus", "status": "pass",
          "reason": "1 node(s) burning at once for 60 s: 1 GPU(s), every node's own burn verdict passes"}]}))
elif step == "gpu-tests":
    for n in range(3000):  # 300 kB: more than steps.log keeps of one step
        print(f"tests/gpuwork/test_real_gpu.py::test_{n} {'.' * 60}")
    print("12 passed, 3000 deselected in 1.00s")
elif step == "bench":
    print("GEMM bf16  n=8192: gpucheck    782.5 TFLOP/s  torch 2.11.0+cu130    783.8  ratio 0.998")
    print('BENCH {"gemm_bf16": {"ratio": 0.998}}')
elif step == "resnet50":
    print("[resnet_torch_ddp 11:50:13] iteration 1/5: 5357.749 images/s, loss 5.4377", file=sys.stderr)
    print('GPUCHECK_RESULT {"ok": true, "images_per_s": 5350.6, "precision": "amp", "batch_size": 256}')
elif step == "cupy-probe":
    print('CUPYPROBE {"cupy": "14.2.0", "gemmEx_bf16_TFLOPS": 780.1}')
elif step == "watch-cost":
    print("idle over 50 s, NVML polled every 5 s (this machine's NVML), a log file followed")
    print("  gpucheck watch     CPU   0.09 s =  0.180% of one core   RSS   31.0 MiB")
if step in os.environ.get("STUB_FAIL", "").split(","):  # after its output, as gpucheck exits 2 with a report
    print(f"{step}: failing as the test asks", file=sys.stderr)
    code = 2
sys.exit(code)
'''


@pytest.fixture
def session(tmp_path: Path):
    """Run the script with the stubs first on PATH; returns run(budget, hang=(), fail=(), tools=...)."""
    if shutil.which("timeout") is None:
        pytest.skip("no coreutils timeout")
    stubs, modules, out = tmp_path / "bin", tmp_path / "modules", tmp_path / "out"
    stubs.mkdir()
    (stubs / "stub.py").write_text(STUB.replace("{python}", sys.executable, 1))
    (stubs / "stub.py").chmod(0o755)
    for module in MODULES:
        (modules / module).mkdir(parents=True)
        (modules / module / "__init__.py").write_text("")

    def run(budget: int, hang=(), fail=(), tools=("nvidia-smi", "python3", "torchrun"), modules_missing=(), **steps):
        for tool in ("nvidia-smi", "python3", "torchrun"):
            link = stubs / tool
            if tool in tools and not link.exists():
                link.symlink_to(stubs / "stub.py")
        for module in modules_missing:
            shutil.rmtree(modules / module)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "GPU_SESSION_BUDGET_S", "GPU_SESSION_STEPS", "OUT")}
        env.update(steps)
        env.update(PATH=f"{stubs}:/usr/bin:/bin", PYTHONPATH=str(modules), OUT=str(out), STUB_DIR=str(stubs),
                   STUB_LOG=str(stubs / "calls.log"), STUB_HANG=",".join(hang), STUB_FAIL=",".join(fail))
        began = time.monotonic()
        done = subprocess.run([shutil.which("bash") or "/bin/bash", str(SCRIPT), str(budget)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=budget + 60)
        done.wall = time.monotonic() - began
        done.out = out
        done.summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
        log = stubs / "calls.log"
        done.calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        done.stubs = stubs
        return done

    return run


def alive(pid: int, wait_s: float = 2.0) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its parent does not), after up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


def table(summary: str) -> dict[str, str]:
    """The summary's step table: step name -> its whole row."""
    rows = re.findall(r"^(\d+/\d+)\s+(\S+)\s+(.*)$", summary, re.M)
    return {name: rest for _, name, rest in rows}


def test_the_script_ends_within_its_budget_and_reports_the_steps_that_did_not_fit(session) -> None:
    budget = 20
    done = session(budget, hang=ORDER)  # every tool hangs: only the budget ends the run
    rows = table(done.summary)
    assert done.wall <= budget + 1.5, (done.wall, done.stdout[-3000:])
    assert list(rows) == ORDER, done.summary
    first = re.search(r"timed out at (\d+) s", rows["nvidia-smi"])
    assert first and int(first[1]) < 10, rows["nvidia-smi"]  # its 10 s bound cut to what the budget left
    assert done.wall >= int(first[1]), done.wall  # and it did run until then
    for name in ORDER[1:]:
        assert "not started (budget" in rows[name], done.summary
    assert [call[0] for call in done.calls] == ["nvidia-smi"], done.calls
    assert f"=== step 2/{len(ORDER)} node-passive: not started (budget" in done.stdout
    # the hung nvidia-smi ignored SIGTERM and outlived the step's shell: the script killed it, no GPU held after
    pids = [int(pid) for pid in (done.stubs / "hung.pids").read_text().split()]
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # ours: the stub this test started
    assert pids and not left, (pids, left)
    assert "processes it left running killed" in rows["nvidia-smi"], rows["nvidia-smi"]


def test_every_step_runs_in_order_a_failure_stops_nothing_and_at_most_8_files_come_back(session) -> None:
    done = session(480, fail=["node-full"])
    rows = table(done.summary)
    assert done.returncode == 1, done.stdout[-3000:]  # one step failed
    # no step waited on its bound (a wall-clock limit here failed on a loaded machine: 19 s for 15)
    assert not [name for name, row in rows.items() if "timed out" in row or "not started" in row], done.summary
    # (c) the declared order, in the table and in the calls the tools saw
    assert list(rows) == ORDER, done.summary
    seen = [call[0] for call in done.calls]
    assert sorted(set(seen), key=seen.index) == ORDER, seen
    # (d) the failing step is reported, and every later one ran
    assert re.search(r"\bfailed\b", rows["node-full"]) and " 2 " in rows["node-full"], rows["node-full"]
    for name in ORDER[3:]:
        assert rows[name].rstrip().endswith("ok"), done.summary
    # (b) only the declared outputs, at most 8, whatever every step writes
    files = {str(p.relative_to(done.out)) for p in done.out.rglob("*") if p.is_file()}
    assert files == OUTPUTS and len(files) <= 8, files
    assert "8 files under" in done.summary and "WARNING" not in done.stdout
    steps_log = (done.out / "steps.log").read_text()
    assert len(steps_log) < 2_000_000 and "bytes left out" in steps_log  # 300 kB of pytest output cut
    assert "12 passed, 3000 deselected" in steps_log
    # the key lines reach the summary
    for line in ("NVIDIA H200", "planted fault found", "GPU0 gpu.gemm bf16_TFLOPS: 780, 772, 764: spread 2.1 %",
                 "widest spread over 3 runs: 2.1 %", "Serial number: 1654123456789", "rma-h200-GPU0/rma.json",
                 "busy GPU found: error busy", "cluster.burn.gpus: pass: 1 node(s) burning at once for 60 s",
                 "GPU0: burn median 661.1 TFLOP/s, hottest 61 C, 60 points", "12 passed", "ratio 0.998",
                 "5350.6 images/s", "gemmEx_bf16_TFLOPS: 780.1", "profile generic, 1 pass",
                 "profile derived-h200-sxm-141gb", "derived: gpu.memory pass (>= 142333 MiB)"):
        assert line in done.summary, (line, done.summary)
    assert done.summary in done.stdout  # printed at the end too


def test_nvidia_smi_is_only_queried_and_the_planted_fault_profile_loads(session) -> None:
    from gpucheck import profiles

    done = session(480)
    calls = [call[1:] for call in done.calls if call[0] == "nvidia-smi"]
    assert calls, done.calls
    assert all(QUERY_ARGS.match(arg) for args in calls for arg in args), calls  # no -pl, -lgc, -pm, -mig, -r
    fault = next(call[1:] for call in done.calls if call[0] == "planted-fault")
    assert fault[fault.index("--only") + 1] == "gpu.burn", fault
    profile = profiles.load(str(done.stubs / "profile-used.yaml"))  # as the script wrote it, read by the agent
    assert profile.get("burnin", "burn_temperature_C_max") == 20
    assert profile.get("gpu", "ecc_volatile_uncorrected_max") == 0  # inherited from generic: any lone H100 or H200


def test_missing_tools_and_modules_skip_their_steps_and_more_than_8_files_are_warned_of(session, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for n in range(7):  # left by someone else: with the 7 outputs of the steps that run, 14 files
        (out / f"other-{n}.txt").write_text("")
    done = session(480, tools=("python3",), modules_missing=("torch",))
    rows = table(done.summary)
    assert "skipped (no nvidia-smi)" in rows["nvidia-smi"], done.summary
    assert "skipped (no torchrun, no Python module torch)" in rows["resnet50"], done.summary
    assert rows["node-full"].rstrip().endswith("ok"), done.summary
    assert re.search(r"WARNING: 14 files under .* brings back 8 at most", done.stdout), done.stdout[-2000:]


def test_gpu_session_steps_runs_only_the_steps_named(session) -> None:
    done = session(480, GPU_SESSION_STEPS="busy-gpu,nvidia-smi")
    rows = table(done.summary)
    assert list(rows) == ORDER, done.summary
    assert [name for name, row in rows.items() if "not asked" not in row] == ["nvidia-smi", "busy-gpu"], done.summary
    assert {call[0] for call in done.calls} == {"nvidia-smi", "busy-gpu"}, done.calls
    assert done.returncode == 0, done.stdout[-2000:]
