"""`gpucheck rma` end to end, as a separate process: the fake NVML library with GPU3's uncorrected ECC errors
(lab/scenarios/ecc-uncorrected.scn), the kernel log, nvidia-smi, dcgmi and nvidia-bug-report.sh replayed by
programs on PATH, the node's kept reports and a history store with the fleet. The archive is read field by
field against what each source said."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from lab.fakenvml import build_library, env_for, scenario_path, write_pci_tree
from support import MEASURED, run_gpucheck

BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
       "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
# GPU3 of lab/scenarios/dgx-h100.scn, as the scenario states it
GPU3 = {"index": 3, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-eb1b57b5-2baa-14f9-d653-f3c8926fc103",
        "serial": "1654423090235", "pci_bus_id": "00000000:5D:00.0", "vbios_version": "96.00.99.00.01",
        "board_part_number": "692-2G520-0200-000", "inforom_image_version": "G520.0200.00.05"}
MODEL = GPU3["name"]
XID48 = ("[  100.000000] NVRM: Xid (PCI:0000:5d:00): 48, pid=1234, name=python3, An uncorrectable double bit "
         "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.")
XID13_GPU0 = "[  101.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception: ESR 0x404600=0x80000001"
SMI_Q = (MEASURED / "h100-sxm-80gb-driver580" / "nvidia-smi-q-idle.txt").read_text()
DCGMI_V = "Version : 3.3.5\nBuild ID : 14\nBuild Date : 2024-02-24\n"


def script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def node_report(host: str, started: str, uuid: str, bf16: float, index: int = 3) -> dict:
    """A kept `gpucheck node --full` report: one GEMM figure of one GPU, with what the profile expected."""
    return {"gpucheck_version": "0.1.0", "host": host, "profile": "dgx-h100", "started": started, "exit_code": 0,
            "facts": {"gpus": [{"index": index, "uuid": uuid, "pci_bus_id": GPU3["pci_bus_id"], "name": MODEL}]},
            "results": [{"check": "gpu.gemm", "status": "pass", "measured": {f"GPU{index}": {"bf16_TFLOPS": bf16}},
                         "expected": {f"GPU{index}": {"bf16_TFLOPS_min": 594.0}}, "reason": ""}]}


@pytest.fixture
def node04(tmp_path: Path):
    """The environment of a node whose GPU3 failed: its tools, its kept reports, the fleet's history store."""
    tools = tmp_path / "bin"
    tools.mkdir()
    script(tools / "dmesg", f"cat <<'EOF'\n{XID48}\n{XID13_GPU0}\nEOF")
    (tmp_path / "smi-q.txt").write_text(SMI_Q)
    script(tools / "nvidia-smi", f'echo "$@" >> {tmp_path}/smi-args\ncat {tmp_path}/smi-q.txt')
    script(tools / "dcgmi", f"[ \"$1\" = -v ] && printf '{DCGMI_V}'")
    script(tools / "nvidia-bug-report.sh", '[ "$1" = --output-file ] && echo "bug report of $(hostname)" | '
                                           'gzip > "$2.gz"')
    state = tmp_path / "state"
    (state / "reports").mkdir(parents=True)
    for name, started, bf16 in (("20261101T030000Z-pass-full.json", "2026-11-01T03:00:00Z", 790.0),
                                ("20261120T030000Z-pass-full.json", "2026-11-20T03:00:00Z", 702.0)):
        (state / "reports" / name).write_text(json.dumps(node_report("node04", started, GPU3["uuid"], bf16)))
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for n, bf16 in enumerate((780.0, 800.0, 820.0)):  # three other H100s; node09's GPU is no H100 and not counted
        (fleet / f"node0{n + 1}.json").write_text(json.dumps(node_report(f"node0{n + 1}", "2026-11-20T03:00:00Z",
                                                                        f"GPU-other-{n}", bf16)))
    other_model = node_report("node09", "2026-11-20T03:00:00Z", "GPU-a100", 100.0)
    other_model["facts"]["gpus"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    (fleet / "node09.json").write_text(json.dumps(other_model))
    store = tmp_path / "history.sqlite"
    done = run_gpucheck(["history", "import", str(fleet), str(state / "reports"), "--store", str(store)])
    assert done.returncode == 0, done.stderr
    env = env_for(scenario_path("ecc-uncorrected"), build_library())
    env.update(PATH=f"{tools}:{env['PATH']}", GPUCHECK_SYSFS_ROOT=str(write_pci_tree(tmp_path / "sys", BUS)),
               GPUCHECK_STATE_DIR=str(state), GPUCHECK_HISTORY=str(store))
    return env


def unpack(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_archive_holds_every_field_an_rma_asks_for(node04, tmp_path):
    archive = tmp_path / "out" / "rma-node04-gpu3.tar.gz"  # its folder is made, as for gpucheck node --output
    done = run_gpucheck(["rma", "0000:5d:00.0", "-o", str(archive)], node04)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(archive)
    assert "nvidia-smi -q ..." in done.stderr and "written (0 piece(s) of evidence missing" in done.stderr
    files = unpack(archive)
    doc = json.loads(files["rma.json"])
    [gpu] = doc["gpus"]
    assert {k: gpu[k] for k in GPU3} == GPU3  # every identity field, as NVML answered
    assert doc["versions"]["driver"] == "535.183.01" and doc["versions"]["dcgm"] == "Version : 3.3.5"
    assert gpu["counters"]["ecc_errors"]["volatile_uncorrected"] == 2
    assert gpu["counters"]["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False,
                                                "failure": False}
    assert [(e["xid"], e["severity"]) for e in gpu["xid_events"]] == [(48, "fatal")]  # not GPU0's Xid 13
    assert files["kernel-xid.txt"].decode() == XID48 + "\n"
    now = {r["check"]: r for r in gpu["findings_now"]}
    assert now["gpu.ecc_errors"]["status"] == "fail" and now["gpu.ecc_errors"]["measured"]["volatile_uncorrected"] == 2
    assert now["gpu.xid"]["status"] == "fail" and "48" in now["gpu.xid"]["reason"]
    # the burn-in's figures over time, with the SKU floor the profile set, and the latest against the fleet
    assert [(r["started"], r["value"], r["expected"]) for r in gpu["figures_over_time"] if r["check"] == "gpu.gemm"] \
        == [("2026-11-01T03:00:00Z", 790.0, {"bf16_TFLOPS_min": 594.0}),
            ("2026-11-20T03:00:00Z", 702.0, {"bf16_TFLOPS_min": 594.0})]
    [figure] = gpu["figures"]
    assert (figure["figure"], figure["value"], figure["fleet_gpus"], figure["fleet_median"], figure["vs_fleet_pct"]) \
        == ("bf16_TFLOPS", 702.0, 3, 800.0, -12.2)
    # the evidence as taken
    assert (tmp_path / "smi-args").read_text() == "-q -i 00000000:5D:00.0\n"
    assert files["nvidia-smi-q.txt"].decode() == SMI_Q
    assert files["dcgm.txt"].decode().startswith(f"$ dcgmi -v\n{DCGMI_V}")
    assert gzip.decompress(files["nvidia-bug-report.log.gz"]).startswith(b"bug report of ")
    assert json.loads(files["report-now.json"])["exit_code"] == 2
    assert sorted(n for n in files if n.startswith("reports/")) == [
        "reports/20261101T030000Z-pass-full.json", "reports/20261120T030000Z-pass-full.json"]
    assert doc["missing"] == []
    summary = files["SUMMARY.txt"].decode()
    for text in ("Serial number: 1654423090235", "VBIOS: 96.00.99.00.01", "Board part number: 692-2G520-0200-000",
                 "Xid 48 (fatal) at 100 s after boot: pid=1234", "gpu.ecc_errors: FAIL",
                 "gpu.gemm bf16_TFLOPS: 702 TFLOP/s (2026-11-20T03:00:00Z); fleet median 800 TFLOP/s over 3 GPU(s), "
                 "-12.2 %"):
        assert text in summary


def test_what_cannot_be_had_is_named_and_the_archive_still_written(node04, tmp_path):
    node04["PATH"] = node04["PATH"].replace(f"{tmp_path}/bin:", "")  # no nvidia-smi, dcgmi, bug report here
    node04["GPUCHECK_HISTORY"] = str(tmp_path / "none.sqlite")
    archive = tmp_path / "a.tar.gz"
    done = run_gpucheck(["rma", "3", "-o", str(archive), "--reports", str(tmp_path / "nowhere")], node04)
    assert done.returncode == 0, done.stderr
    missing = json.loads(unpack(archive)["rma.json"])["missing"]
    assert [m.split(":")[0] for m in missing] == ["nvidia-smi -q", "DCGM", "nvidia-bug-report.sh", "no kept reports",
                                                  "no fleet comparison"]


@pytest.mark.parametrize(("args", "says"), [
    (["9"], "no GPU of this node is '9' (an index, a UUID, a PCI bus id or a serial number): it has GPU0 ("),
    (["3", "-o", "{tmp}"], "is a directory: name the archive's file"),
    (["3", "-o", "{tmp}/new/"], "{tmp}/new/ is a directory: name the archive's file"),
    (["3", "-o", "{tmp}/a-file/a.tar.gz"], "cannot write {tmp}/a-file/a.tar.gz: Not a directory"),
])
def test_bad_input_is_one_line_and_exit_3_and_leaves_nothing(node04, tmp_path, args, says):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    (tmp_path / "a-file").write_text("a file where a folder is named")
    done = run_gpucheck(["rma", *args, "--no-bug-report"], node04)
    assert done.returncode == 3
    [line] = [x for x in done.stderr.splitlines() if x.startswith("gpucheck: error:")]
    assert says.replace("{tmp}", str(tmp_path)) in line
    assert not [p for p in tmp_path.rglob("*") if ".tar.gz" in p.name]


def test_a_node_whose_nvml_and_kernel_log_cannot_be_read_still_gets_its_archive(node04, tmp_path):
    """A GPU fallen off the bus can take NVML with it: without a GPU named, the node's evidence is still taken,
    and the archive says what could not be read and why."""
    broken = tmp_path / "broken.scn"
    broken.write_text("no such key = 1\n")
    node04["FAKENVML_SCENARIO"] = str(broken)
    script(tmp_path / "bin" / "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1")
    script(tmp_path / "bin" / "journalctl", "exit 1")
    archive = tmp_path / "node.tar.gz"
    done = run_gpucheck(["rma", "-o", str(archive), "--no-bug-report"], node04)
    assert done.returncode == 0, done.stderr
    files = unpack(archive)
    doc = json.loads(files["rma.json"])
    assert doc["gpus"] == [] and doc["target"] == "node"
    unread = [m for m in doc["missing"] if m.startswith(("NVML:", "kernel log:"))]
    assert unread[0].startswith("NVML: no GPU named (") and "Operation not permitted" in unread[1], unread
    assert files["nvidia-smi-q.txt"].decode() == SMI_Q  # nvidia-smi -q of the whole node, taken all the same
    gpu3 = run_gpucheck(["rma", "3", "-o", str(tmp_path / "gpu3.tar.gz"), "--no-bug-report"], node04)
    assert gpu3.returncode == 3 and "'3' cannot be identified: run gpucheck rma without a GPU" in gpu3.stderr
    assert not (tmp_path / "gpu3.tar.gz").exists()
