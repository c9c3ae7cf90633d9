"""A running process sees its scenario change, as a watcher that called nvmlInit once sees a real GPU's counters
step: the library re-reads the file when it changes (checked at most every 50 ms), keeps the old scenario when the
new file does not load, and answers a GPU that went away as lost (lab/scenarios/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fakenvml_helpers import DEADLINE_S, RATE_LIMIT_S

from lab.fakenvml import env_for, scenario_path


def write(path: Path, extra: str, base: str = "dgx-h100") -> Path:
    """Replace `path` atomically, as the lab does (write a temporary file, rename it over)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"include = {scenario_path(base)}\n{extra}")
    os.replace(tmp, path)
    return path


def test_a_running_process_sees_the_ecc_count_step_without_reinit(watch, tmp_path: Path) -> None:
    scn = write(tmp_path / "s.scn", "")
    w = watch(scn)
    assert (w.ask("ecc(3)"), w.ask("temp(3)")) == (0, 30)
    write(scn, "gpu.3.ecc_uncorrected_volatile = 2\n")
    assert w.until("ecc(3)", 2) < 1.0
    assert (w.ask("ecc(2)"), w.ask("temp(3)")) == (0, 30)  # the rest of the scenario as it was
    assert w.trace.read_text().splitlines().count("nvmlInitWithFlags") == 1
    assert "rejected" not in w.stderr()
    # shutdown + init still reads the file at init, with no wait
    write(scn, "gpu.3.ecc_uncorrected_volatile = 5\n")
    assert w.ask("[nv.nvmlShutdown(), nv.nvmlInit(), ecc(3)]") == [None, None, 5]


def test_a_file_rewritten_in_place_is_seen_too(watch, tmp_path: Path) -> None:
    scn = tmp_path / "s.scn"
    scn.write_text(f"include = {scenario_path('dgx-h100')}\n")
    w = watch(scn)
    assert (w.ask("temp(7)"), w.ask("reasons(7)")) == (29, 0x1)  # gpu_idle
    scn.write_text(f"include = {scenario_path('dgx-h100')}\n"
                   "gpu.7.temperature_C = 92\ngpu.7.clocks_event_reasons = hw_slowdown|hw_thermal_slowdown\n")
    w.until("temp(7)", 92)
    assert w.ask("reasons(7)") == 0x48


def test_a_new_file_that_does_not_load_keeps_the_old_scenario_and_says_so_once(watch, tmp_path: Path) -> None:
    scn = write(tmp_path / "s.scn", "gpu.3.ecc_uncorrected_volatile = 1\n")
    w = watch(scn)
    write(scn, "gpu.3.ecc_uncorrected_volatile = 2\ngpu.3.temprature_C = 40\n")
    w.until_said("rejected", 1)
    # calls over several rate-limit periods: the same bad version is not read (nor reported) again
    end = time.monotonic() + 3 * RATE_LIMIT_S
    while time.monotonic() < end:
        assert w.ask("ecc(3)") == 1
        time.sleep(0.005)
    err = w.stderr()
    assert err.count("s.scn:3: unknown key 'gpu.3.temprature_C'") == 1, err
    assert err.count(f"fakenvml: scenario {scn} rejected; keeping the one loaded\n") == 1, err
    # a second bad version is said once too; a good one after it loads
    write(scn, "gpu_count = 65\n")
    w.until_said("rejected", 2)
    assert "'gpu_count' must be 0..64" in w.stderr()
    write(scn, "gpu.3.ecc_uncorrected_volatile = 3\n")
    w.until("ecc(3)", 3)
    assert w.stderr().count("rejected") == 2


def test_a_relative_scenario_path_is_still_followed_after_a_chdir(libdir: Path, tmp_path: Path) -> None:
    """A daemon that changes directory after nvmlInit still sees the file it loaded change."""
    scn = write(tmp_path / "s.scn", "")
    code = (
        "import os, sys, time\nimport pynvml as nv\nnv.nvmlInit()\nos.chdir('/')\n"
        "ecc = lambda: nv.nvmlDeviceGetTotalEccErrors(nv.nvmlDeviceGetHandleByIndex(3), 1, 0)\n"
        "before = ecc()\n"
        f"open({str(scn)!r} + '.tmp', 'w').write(open({str(scn)!r}).read() + 'gpu.3.ecc_uncorrected_volatile = 7\\n')\n"
        f"os.replace({str(scn)!r} + '.tmp', {str(scn)!r})\n"
        "start = time.monotonic()\n"
        "while ecc() != 7 and time.monotonic() - start < 2:\n    time.sleep(0.005)\n"
        "print(before, ecc())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env_for(Path("s.scn"), libdir), cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.stdout.strip() == "0 7", proc.stderr


def test_gpus_going_away_answer_as_lost_on_their_old_handles(watch, tmp_path: Path) -> None:
    scn = write(tmp_path / "s.scn", "")
    w = watch(scn)
    assert w.gpus == 8
    write(scn, "gpu_count = 4\n")
    w.until("count()", 4)
    assert [w.ask(f"name({i})") for i in (3, 4, 7)] == ["NVIDIA H100 80GB HBM3", "NVMLError_GpuIsLost",
                                                         "NVMLError_GpuIsLost"]
    assert w.ask("ecc(6)") == "NVMLError_GpuIsLost"
    assert w.ask("handle(6)") == "NVMLError_InvalidArgument"  # an index beyond the count, as at init
    # the same handles answer again once the GPUs are back
    write(scn, "")
    w.until("name(7)", "NVIDIA H100 80GB HBM3")
    assert w.ask("count()") == 8
    assert w.proc.poll() is None


def test_a_thread_hung_in_a_call_does_not_hold_off_a_reload(watch, tmp_path: Path) -> None:
    scn = write(tmp_path / "s.scn", "hang = nvmlDeviceGetTemperature@gpu2\n")
    w = watch(scn)
    w.ask("__import__('threading').Thread(target=temp, args=(2,), daemon=True).start()")
    start = time.monotonic()
    while not w.traced("nvmlDeviceGetTemperature gpu=2"):  # the thread is in the call
        assert time.monotonic() - start < DEADLINE_S
        time.sleep(0.005)
    write(scn, "hang = nvmlDeviceGetTemperature@gpu2\ngpu.3.ecc_uncorrected_volatile = 4\n")
    w.until("ecc(3)", 4)
    # and a hang rule that arrives with a reload hangs the running process's next such call
    write(scn, "hang = nvmlDeviceGetPowerUsage@gpu1\n")
    w.until("ecc(3)", 0)
    power = "__import__('threading').Thread(target=ask, args=(nv.nvmlDeviceGetPowerUsage, h[%d]), daemon=True)"
    assert w.ask(f"[(t.start(), t.join(0.2), t.is_alive())[2] for t in ({power % 0}, {power % 1})]") == [False, True]
    assert w.ask("temp(3)") == 30


def test_concurrent_calls_never_see_half_of_two_scenarios(libdir: Path, tmp_path: Path) -> None:
    """Threads ask GPU 63's serial while the file flips between a 64-GPU version (serial `here`) and a 63-GPU
    one (serial `gone`, the GPU absent: GPU_IS_LOST). `gone` could only come from a torn read: the new
    gpu_count (at the start of the scenario) with the old GPU 63 (at its end, copied last)."""
    def version(n: int) -> str:
        return f"gpu_count = {64 - n % 2}\ngpu.63.serial = {'gone' if n % 2 else 'here'}\n"

    scn = write(tmp_path / "s.scn", version(0))
    code = (
        "import pynvml as nv, threading, json, sys, time\nnv.nvmlInit()\n"
        "h = nv.nvmlDeviceGetHandleByIndex(63)\nseen, stop = {}, False\n"
        "def read():\n"
        "    while not stop:\n"
        "        try:\n            v = nv.nvmlDeviceGetSerial(h)\n"
        "        except nv.NVMLError as e:\n            v = type(e).__name__\n"
        "        seen[v] = seen.get(v, 0) + 1\n"
        "threads = [threading.Thread(target=read) for _ in range(4)]\n"
        "[t.start() for t in threads]\nprint('ready', flush=True)\n"
        "final, start = sys.stdin.readline().strip(), time.monotonic()\n"
        "while seen.get(final, 0) < 100 and time.monotonic() - start < 2:\n    time.sleep(0.005)\n"
        "stop = True\n[t.join() for t in threads]\nprint(json.dumps(seen), flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env_for(scn, libdir), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout and proc.stdin and proc.stdout.readline() == "ready\n"
        for n in range(1, 11):
            write(scn, version(n))
            time.sleep(RATE_LIMIT_S * 1.2)  # each version outlives one rate-limit period, so the readers meet it
        out, err = proc.communicate("here\n", timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen = json.loads(out)
    assert "gone" not in seen, seen
    assert seen.get("NVMLError_GpuIsLost", 0) > 0 and seen.get("here", 0) > 0, seen
    assert "rejected" not in err, err
