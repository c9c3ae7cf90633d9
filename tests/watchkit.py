"""One node's `gpucheck watch` as the systemd unit runs it, against the fake NVML and a real scheduler (Slurm:
tests/slurmkit.py, or a Kubernetes control plane: tests/kubekit.py): its scenario, kernel log, state directory and
output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lab import compute
from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree_for
from lab.nvidia_repo import load
from lab.nvidia_repo.payloads import nvidia_smi
from support import ROOT, wait_for

# A site's profile for the repairs: the lab's checks (the fake CuPy's modelled speed), a reset for an ECC error.
REPAIR_PROFILE = "name: lab-repair\ninherits: lab\nrepair:\n  gpu.ecc_errors: reset-gpu\n  gpu.row_*: reset-gpu\n"
ECC_ON_GPU3 = "gpu.3.ecc_uncorrected_volatile = 2\n"


class Watch:
    """One node's watcher: its scenario, kernel log, state directory and output."""

    def __init__(self, tmp: Path, scheduler_env: dict[str, str], scenario: str = "dgx-h100", site: str = "",
                 profile: str = "dgx-h100", told: tuple[str, ...] = ("--slurm",)) -> None:
        """The watcher tells its scheduler with the options `told`, in an environment with `scheduler_env`."""
        self.tmp, self.told = tmp, told
        self.scenario = tmp / "scenario.scn"
        shutil.copy(scenario_path(scenario), self.scenario)
        self.log = tmp / "kern.log"
        self.log.touch()
        self.out = tmp / "watch.out"
        self.metrics = tmp / "prom" / "gpucheck-watch.prom"  # beside the node run's textfile, under its own name
        self.metrics.parent.mkdir()
        (tmp / "node.yaml").write_text(f"profile: {profile}\nprometheus_textfile: {tmp / 'prom' / 'gpucheck.prom'}\n"
                                       + site)
        self.env = {**env_for(self.scenario, build_library()), **scheduler_env,
                    "GPUCHECK_SYSFS_ROOT": str(write_pci_tree_for(self.scenario, tmp / "sys")),
                    "GPUCHECK_STATE_DIR": str(tmp / "state"), "GPUCHECK_CONFIG": str(tmp / "node.yaml"),
                    "PYTHONPATH": str(ROOT / "agent")}
        self.proc: subprocess.Popen | None = None
        self.seq = 0

    def start(self, beside: Path | None = None, saving: bool = True) -> None:
        """`beside`: a program started with the watcher in a PID namespace of their own, where it sees no other
        process (a lab host's Fabric Manager, on a build machine running the lab). `saving`: wait until it saved
        where it stands (not on a full disk)."""
        self.out.write_text("")
        argv = [sys.executable, "-m", "gpucheck", "watch", "--kernel-log", str(self.log), "--interval", "1",
                "--nvml-timeout", "2", *self.told]
        if beside is not None:
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", "--", "sh", "-c",
                    f'{beside} 600 & exec "$@"', "sh", *argv]
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self.out.open("w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.wait("watching")
        if saving:
            self.wait_saved()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            watcher = next((p for p in [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
                            if "gpucheck" in p.cmdline()[:3]), None)
            (watcher or psutil.Process(self.proc.pid)).send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # never left behind to hold NVML under the next test
                for proc in [*psutil.Process(self.proc.pid).children(True), psutil.Process(self.proc.pid)]:
                    proc.kill()
                self.proc.wait(timeout=30)
                said = self.said()
                raise AssertionError(f"the watcher did not stop within 30 s of SIGTERM (killed):\n{said}") from None
            assert code == 0, self.said()
            assert "stopped" in self.said()

    def said(self) -> str:
        return self.out.read_text()

    def wait(self, text: str, timeout: float = 30) -> str:
        return wait_for(lambda: text in self.said() and self.said(), timeout, f"`{text}` in:\n{self.said()}")

    def wait_saved(self) -> None:
        """Until the watcher has read NVML once and saved where it stands (its state file)."""
        state = self.tmp / "state" / "watch.json"
        wait_for(lambda: state.exists() and '"gpus"' in state.read_text(), 30, f"a saved sample:\n{self.said()}")

    def wait_baseline(self, holds) -> None:
        """Until the sample the watcher saved (what it compares the next poll with) satisfies `holds`."""
        state = self.tmp / "state" / "watch.json"

        def saved():
            try:
                sample = json.loads(state.read_text()).get("sample")
            except (OSError, ValueError):
                return False
            return sample is not None and holds(sample)
        wait_for(saved, 30, f"the watcher's saved sample:\n{self.said()}")

    def plant(self, message: str) -> None:
        self.seq += 1
        with self.log.open("a") as fh:
            fh.write(f"3,{self.seq},{time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000},-;{message}\n")

    def reports(self) -> list[Path]:
        return sorted((self.tmp / "state" / "reports").glob("*.json"))


def repairable(tmp: Path, scheduler_env: dict[str, str], site: str = "", told: tuple[str, ...] = ("--slurm",),
               repair: str = "") -> Watch:
    """A watcher whose node's GPUs reset through the lab's stand-in `nvidia-smi -r` (lab/nvidia_repo: it writes the
    reset layer the scenario includes), its repair's proof on the fake CuPy, the profile naming a reset for an ECC
    error (REPAIR_PROFILE). `repair`: more of node.yaml's `repair:` settings ("jobs_wait_s: 2")."""
    (tmp / "lab-repair.yaml").write_text(REPAIR_PROFILE)
    more = f", {repair}" if repair else ""
    w = Watch(tmp, scheduler_env, site=f"repair: {{burn_s: 3, return_window_s: 3600{more}}}\n" + site,
              profile=str(tmp / "lab-repair.yaml"), told=told)
    layer = tmp / "reset.scn"
    w.machine = w.scenario.read_text()  # the healthy machine each fault() starts from
    w.scenario.write_text(w.machine + f"\ninclude_if_present = {layer}\n")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    pkg = next(p for p in load().packages if p.name == "nvidia-smi")
    [entry] = nvidia_smi(pkg, Path("unused"))
    (bin_dir / "nvidia-smi").write_bytes(entry.data or b"")
    (bin_dir / "nvidia-smi").chmod(0o755)
    # the lab's simulated compute, its modelled GEMMs 10x the lab's rate: one GPU's proof, not eight hosts' burn
    w.env.update({**compute.environment(), "FAKECUPY_TFLOPS": str(10 * compute.TFLOPS),
                  "PATH": f"{bin_dir}:{w.env.get('PATH') or os.environ['PATH']}",
                  "PYTHONPATH": f"{ROOT / 'agent'}:{compute.SOURCE}", "FAKENVML_RESET_LAYER": str(layer)})
    return w


def fault(w: Watch, lines: str) -> None:
    """The healthy machine with `lines`, then its reset layer, replaced at once, and the layer emptied: a new fault
    is a new GPU state, as the lab installs one (lab/gpus.py)."""
    stepped = w.tmp / "stepped.scn"
    stepped.write_text(f"{w.machine}\n{lines}include_if_present = {w.tmp / 'reset.scn'}\n")
    os.replace(stepped, w.scenario)
    (w.tmp / "reset.scn").unlink(missing_ok=True)
