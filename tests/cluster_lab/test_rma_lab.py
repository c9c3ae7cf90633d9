"""`gpucheck rma` on the lab's faulty node (node04: GPU3 with uncorrected ECC errors, ecc-uncorrected.scn), run
over SSH as an operator would, after a `gpucheck node` run that kept its failing report. The archive comes back
and is read field by field against what the lab gave the node: the scenario's identity of GPU3 with the UUID the lab
derives for node04 (lab/gpus.py), its counters, its failing check now and in the kept report, and nvidia-smi as the
node's own answers it."""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile

from cluster_lab_helpers import FAULTY, LabState, lab

from lab.gpus import gpu_uuid

ARCHIVE = "/var/tmp/rma-gpu3.tar.gz"
BUS3 = "00000000:5D:00.0"  # GPU3 of the DGX H100 scenario
IDENTITY = {"index": 3, "name": "NVIDIA H100 80GB HBM3", "serial": "1654423090235", "pci_bus_id": BUS3,
            "vbios_version": "96.00.99.00.01", "board_part_number": "692-2G520-0200-000",
            "inforom_image_version": "G520.0200.00.05"}


def ssh(command: str, check: bool = True):
    return lab("ssh", FAULTY, "--", command, timeout=300, check=check)


def test_rma_on_the_faulty_node_carries_its_gpu3_evidence(lab4: LabState) -> None:
    lab("fault", FAULTY, "scenario", "ecc-uncorrected", timeout=120)  # whatever an earlier test left there
    ssh("gpucheck node --format json >/dev/null", check=False)  # fails (exit 2): its report is kept
    kept = ssh("ls /var/lib/gpucheck/reports").stdout.split()
    newest_fail = sorted(n for n in kept if n.endswith("-fail.json"))[-1]
    done = ssh(f"gpucheck rma 3 -o {ARCHIVE} --no-bug-report && base64 -w0 {ARCHIVE}")
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(done.stdout.split()[-1]))) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    doc = json.loads(files["rma.json"])
    assert doc["host"] == FAULTY and doc["target"] == "3"
    [gpu] = doc["gpus"]
    assert {k: gpu[k] for k in IDENTITY} == IDENTITY
    assert gpu["uuid"] == gpu_uuid(FAULTY, 3)
    assert re.fullmatch(r"\d+\.\d+\.\d+", doc["versions"]["driver"])
    assert gpu["counters"]["ecc_mode"] is True
    assert (gpu["counters"]["ecc_errors"]["volatile_uncorrected"],
            gpu["counters"]["ecc_errors"]["aggregate_uncorrected"]) == (2, 2)
    now = [r for r in gpu["findings_now"] if r["check"] == "gpu.ecc_errors"]
    assert [(r["status"], r["measured"]["volatile_uncorrected"]) for r in now] == [("fail", 2)]
    assert "GPU3" in now[0]["reason"]
    # the node's kept report of the run above is among the evidence, its GPU3 finding with it
    assert newest_fail in doc["kept_reports"] and f"reports/{newest_fail}" in files
    past = [r for r in gpu["findings_over_time"] if r["report"] == newest_fail]
    assert [(r["check"], r["measured"]["volatile_uncorrected"]) for r in past] == [("gpu.ecc_errors", 2)]
    # nvidia-smi -q as the node answers it (the lab's driver package has a stand-in that prints only its header)
    smi = ssh(f"nvidia-smi -q -i {BUS3}", check=False)
    if smi.returncode == 0:
        assert files["nvidia-smi-q.txt"].decode() == smi.stdout
    else:
        assert any(m.startswith("nvidia-smi -q: nvidia-smi exited with") for m in doc["missing"]), doc["missing"]
        assert smi.stderr.strip() in files["nvidia-smi-q.txt"].decode()
    assert "Serial number: 1654423090235" in files["SUMMARY.txt"].decode()
    assert "gpu.ecc_errors: FAIL" in files["SUMMARY.txt"].decode()
