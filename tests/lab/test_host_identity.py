"""Lab hosts are distinct machines to `gpucheck cluster` (cluster/duplicates.py): they share the build machine's
kernel, so its boot id, and their GPUs come from one scenario file; each gets its own GPU UUIDs and its own
/etc/machine-id. Neither root namespaces nor a running lab are needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab import golden, gpus, host
from lab.state import HostState

READ_UUIDS = ("import json, pynvml; pynvml.nvmlInit(); print(json.dumps([pynvml.nvmlDeviceGetUUID("
              "pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]))")


def uuids_through_the_library(dest: Path) -> list[str]:
    """What NVML (the fake library, as the agent loads it) answers for each GPU of the scenario in dest."""
    from lab.fakenvml import build_library

    env = dict(os.environ, LD_LIBRARY_PATH=str(build_library()), FAKENVML_SCENARIO=str(dest / "scenario"))
    done = subprocess.run([sys.executable, "-c", READ_UUIDS], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_two_hosts_with_one_scenario_have_different_gpu_uuids(tmp_path: Path) -> None:
    gpus.install("lab", tmp_path / "node01", "node01")
    gpus.install("lab", tmp_path / "node02", "node02")
    first, second = uuids_through_the_library(tmp_path / "node01"), uuids_through_the_library(tmp_path / "node02")
    assert first == [gpus.gpu_uuid("node01", 0), gpus.gpu_uuid("node01", 1)]
    assert len(second) == 2 and not set(first) & set(second)
    assert all(u.startswith("GPU-") and len(u) == len("GPU-b27db3ff-a991-550d-6c5a-50887329a33f") for u in first)
    gpus.install("lab", tmp_path / "node01-again", "node01")  # the same at every `up`, as a GPU's own
    assert uuids_through_the_library(tmp_path / "node01-again") == first


def test_a_scenario_installed_for_no_host_keeps_its_own_uuids(tmp_path: Path) -> None:
    gpus.install("lab", tmp_path)
    assert uuids_through_the_library(tmp_path)[0] == "GPU-b27db3ff-a991-550d-6c5a-50887329a33f"  # dgx-h100.scn's


def test_every_gpu_on_the_bus_gets_a_uuid_and_the_bus_is_unchanged(tmp_path: Path) -> None:
    gpus.install("seven-of-eight", tmp_path / "plain")
    gpus.install("seven-of-eight", tmp_path / "own", "node03")
    assert gpus.slot_count(tmp_path / "own" / "scenario") == 8  # pci_gpu_count: the GPU NVML misses too
    text = (tmp_path / "own" / "scenario").read_text()
    assert f"gpu.7.uuid = {gpus.gpu_uuid('node03', 7)}\n" in text
    # last: the installed driver package's versions, once there is one; then what GPU resets cleared (very last)
    assert text.endswith(gpus.DRIVER_LINES + gpus.RESET_LINES)
    assert text.splitlines()[-1] == "include_if_present = /var/lib/fakenvml/reset.scn"
    bus = sorted(p.name for p in (tmp_path / "plain" / "sys" / "bus" / "pci" / "devices").iterdir())
    assert sorted(p.name for p in (tmp_path / "own" / "sys" / "bus" / "pci" / "devices").iterdir()) == bus
    gpus.add_hang(tmp_path / "own")  # a fault later keeps the host's UUIDs
    assert f"gpu.0.uuid = {gpus.gpu_uuid('node03', 0)}" in (tmp_path / "own" / "scenario").read_text()


def test_each_host_writes_its_own_machine_id_and_no_golden_image_keeps_one(tmp_path: Path) -> None:
    hosts = [HostState(f"node0{i}", f"10.213.7.1{i}", f"gclab-node0{i}", f"gclabv-node0{i}", "lab") for i in (1, 2)]
    identity = host.HostIdentity("k", "p", "ck", "cp")
    ids = []
    for h in hosts:
        spec = host.spec(h, hosts, ["/base"], identity, "", "http://10.213.7.1:3128", None)
        [written] = [f for f in spec["files"] if f["path"] == "/etc/machine-id"]
        ids.append(written["content"].strip())
    assert ids[0] != ids[1] and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert ids[0] == host.machine_id("node01")
    upper = tmp_path / "upper"
    (upper / "etc").mkdir(parents=True)
    (upper / "etc" / "machine-id").write_text(ids[0] + "\n")
    golden.clean_layer(upper)
    assert not (upper / "etc" / "machine-id").exists()
