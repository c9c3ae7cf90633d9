"""The GPU SKU table (checks/gpus.yaml) and its loader (gpucheck.skus): the models the issue names are there,
the H100 SXM5 carries the data-sheet figures of the real H100 measured for this project, real nvidia-smi
outputs match the entry their PCI device id and their name both point at, an unknown GPU matches nothing,
and a malformed table is one line naming the file, the SKU and the key."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpucheck import profiles, skus
from gpucheck.node.derived_profile import expectations
from support import FIXTURES, ROOT, run_gpucheck

MEASURED = FIXTURES / "measured" / "h100-sxm-80gb-driver580"
TABLE = ROOT / "checks" / skus.SKU_TABLE_FILE
SYSTEM_TABLE = Path("/etc/gpucheck/checks") / skus.SKU_TABLE_FILE  # searched before the package's own


@pytest.fixture(scope="module")
def table() -> skus.SkuTable:
    return skus.load(TABLE)


# ------------------------------------------------------------------ the models the issue names

# (SKU id, a name NVML reports for it, its PCI device id). The names are NVIDIA's (nvidia-smi -L / NVML);
# older drivers drop the "NVIDIA " prefix of GeForce and A100 names, which the second name of a row checks.
REQUIRED = [
    ("h200-sxm-141gb", "NVIDIA H200", 0x2335),
    ("h100-sxm5-80gb", "NVIDIA H100 80GB HBM3", 0x2330),
    ("h100-pcie-80gb", "NVIDIA H100 PCIe", 0x2331),
    ("h100-nvl-94gb", "NVIDIA H100 NVL", 0x2321),
    ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", 0x20B2),
    ("a100-sxm4-40gb", "A100-SXM4-40GB", 0x20B0),
    ("a100-pcie-40gb", "NVIDIA A100-PCIE-40GB", 0x20B1),
    ("a100-pcie-80gb", "NVIDIA A100 80GB PCIe", 0x20B5),
    ("a30", "NVIDIA A30", 0x20B7),
    ("a10", "NVIDIA A10", 0x2236),
    ("l40s", "NVIDIA L40S", 0x26B9),
    ("l4", "NVIDIA L4", 0x27B8),
    ("t4", "Tesla T4", 0x1EB8),
    ("v100-sxm2-16gb", "Tesla V100-SXM2-16GB", 0x1DB1),
    ("v100-sxm2-32gb", "Tesla V100-SXM2-32GB", 0x1DB5),
    ("v100-pcie-16gb", "Tesla V100-PCIE-16GB", 0x1DB4),
    ("v100-pcie-32gb", "Tesla V100-PCIE-32GB", 0x1DB6),
    ("p100-sxm2-16gb", "Tesla P100-SXM2-16GB", 0x15F9),
    ("p100-pcie-16gb", "Tesla P100-PCIE-16GB", 0x15F8),
    ("p100-pcie-12gb", "Tesla P100-PCIE-12GB", 0x15F7),
    ("p40", "Tesla P40", 0x1B38),
    ("k80", "Tesla K80", 0x102D),
    ("rtx-4090", "NVIDIA GeForce RTX 4090", 0x2684),
    ("rtx-3090", "NVIDIA GeForce RTX 3090", 0x2204),
    ("rtx-3090", "GeForce RTX 3090", 0x2204),
    ("gtx-1080-ti", "GeForce GTX 1080 Ti", 0x1B06),
    ("gtx-1080-ti", "NVIDIA GeForce GTX 1080 Ti", 0x1B06),
    ("titan-xp", "TITAN Xp", 0x1B02),
    ("rtx-2080-ti", "GeForce RTX 2080 Ti", 0x1E07),
    ("rtx-2080-ti", "NVIDIA GeForce RTX 2080 Ti", 0x1E04),
]


@pytest.mark.parametrize("sku_id,name,device", REQUIRED, ids=[f"{r[0]}:{r[1]}" for r in REQUIRED])
def test_every_model_the_issue_names_is_matched_by_id_and_by_name(table, sku_id, name, device):
    sku = table.get(sku_id)
    assert sku is not None, f"{sku_id} is not in {TABLE}"
    assert table.match(None, device) is sku
    assert table.match(name) is sku
    assert table.match(name, device << 16 | 0x10DE) is sku
    assert sku.peak("fp32") and sku.memory_MiB and sku.memory_bandwidth_GBps and sku.power_limit_W
    assert sku.pcie_gen in (3, 4, 5) and sku.pcie_width == 16


def test_the_figures_are_consistent(table):
    for sku in table.skus:
        tensor = {d: sku.peak(d) for d in ("bf16", "fp16", "tf32") if sku.peak(d)}
        if "bf16" in tensor:  # Ampere and later: bf16 and tf32 come together, tf32 at half the bf16 rate
            assert tensor["tf32"] == pytest.approx(tensor["bf16"] / 2, rel=0.02), sku.id
        if "tf32" in tensor:
            assert tensor["tf32"] >= sku.peak("fp32") * 0.99, sku.id
        assert sku.nvml_memory_MiB is None or sku.nvml_memory_MiB <= sku.memory_MiB, sku.id
        assert (sku.nvlink_links == 0) == (sku.nvlink_GBps_per_link == 0), sku.id


def test_every_entry_says_what_a_derived_profile_needs(table):
    """compute capability, form factor, ECC and data-centre: the keys the derived profile reads (optional for a
    site's own entry, stated for every entry shipped)."""
    for sku in table.skus:
        assert sku.compute_capability and sku.form_factor in skus.FORM_FACTORS, sku.id
        assert sku.ecc is not None and sku.data_centre is not None, sku.id
        assert sku.ecc or not sku.data_centre, sku.id  # every data-centre part here has ECC memory
        assert (sku.form_factor == "sxm") == ("SXM" in sku.name), sku.id
    assert table.get("h200-sxm-141gb").compute_capability == "9.0"
    assert table.get("rtx-4090").data_centre is False and table.get("l40s").data_centre is True


def test_compute_capability_read_as_a_number_is_still_major_minor(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(GOOD + "    compute_capability: 8.6\n")  # YAML reads 8.6 as a float
    assert skus.load(path).get("x").compute_capability == "8.6"


def test_every_entry_cites_sources_the_header_defines():
    text = TABLE.read_text()
    defined = set(re.findall(r"^#\s+\[([a-z0-9.-]+)\]\s", text, re.M))
    assert {"h100-ds", "h100-meas", "pci.ids"} <= defined
    blocks = re.split(r"^  ([a-z0-9._-]+):\n", text.split("\nskus:\n", 1)[1], flags=re.M)[1:]
    assert len(blocks) // 2 == len(skus.load(TABLE).skus)
    for sku_id, block in zip(blocks[::2], blocks[1::2], strict=True):
        comments = " ".join(line.split("#", 1)[1] for line in block.splitlines() if "#" in line)
        cited = set(re.findall(r"\[([a-z0-9.-]+)\]", comments))
        assert cited, f"{sku_id} cites no source"
        assert cited <= defined, f"{sku_id} cites {cited - defined}, which the header does not define"
        # A figure's line carries its source; the dtypes under peak_TFLOPS may share the one on its line, and
        # pcie_width the one on pcie_gen's ("PCIe Gen4 x16").
        lines = block.splitlines()
        peaks_line = next(line for line in lines if line.strip().startswith("peak_TFLOPS:"))
        shared = "[" in peaks_line.split("#", 1)[-1]
        bare = [line.strip() for line in lines if re.search(r":\s*[0-9]", line) and "#" not in line
                and not (shared and line.startswith(" " * 6)) and not line.strip().startswith("pcie_width:")]
        assert not bare, f"{sku_id}: figures without a source comment: {bare}"


def test_published_training_figures_are_the_ones_their_source_line_quotes(table):
    """Each resnet50_train_img_s figure appears, with thousands separators, in the header of the source it cites."""
    text = TABLE.read_text()
    header = text.split("\nskus:\n", 1)[0]
    sources = {tag: block for tag, block in re.findall(r"^#\s+\[(rn50-[a-z]+)\]\s+(.*?)(?=^#\s+\[|^#\s*$|\Z)",
                                                         header, re.M | re.S)}
    assert set(sources) == {"rn50-tf", "rn50-pyt"}
    cites = {"tf-horovod": "rn50-tf", "torch": "rn50-pyt"}
    found = [(sku.id, fw, v) for sku in table.skus for fw, v in sku.resnet50_train_img_s.items()]
    assert len(found) >= 4
    for sku_id, framework, value in found:
        assert f"{value:,.0f}" in sources[cites[framework]], (sku_id, framework, value)


# ------------------------------------------------------------------ the H100 measured for this project

def readme_peaks() -> dict[str, float]:
    """The measured README's "data-sheet peak (dense)" column, by what each row measured."""
    found = {}
    for line in (MEASURED / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"[0-9][0-9,]*", cells[2]):
            continue
        gemm = re.match(r"GEMM (\w+)", cells[0])
        if gemm:
            found[gemm[1]] = float(cells[2].replace(",", ""))
        elif cells[0].startswith("HBM"):
            found["memory_bandwidth_GBps"] = float(cells[2].replace(",", ""))
    return found


def test_h100_sxm5_figures_are_the_measured_readme_data_sheet_column(table):
    column = readme_peaks()
    assert set(column) == {"bf16", "fp16", "tf32", "fp32", "fp64", "memory_bandwidth_GBps"}, column
    readme = (MEASURED / "README.md").read_text()
    facts = json.loads((MEASURED / "nvml-collector-facts.json").read_text())["gpus"][0]
    smi = (MEASURED / "nvidia-smi-q-idle.txt").read_text()
    device = re.search(r"Device Id\s*:\s*(\S+)", smi)[1]

    sku = table.match(facts["name"], device)
    assert sku is table.get("h100-sxm5-80gb")
    assert table.match(facts["name"]) is sku and table.match(None, device) is sku
    for dtype in skus.DTYPES:
        assert sku.peak(dtype) == column[dtype], dtype
    assert sku.memory_bandwidth_GBps == column["memory_bandwidth_GBps"]
    assert sku.nvml_memory_MiB == facts["memory_total_MiB"]
    assert sku.power_limit_W == facts["power_limit_W"] == float(re.search(r"against a (\d+) W limit", readme)[1])
    assert (sku.pcie_gen, sku.pcie_width) == (facts["pcie"]["gen_max"], facts["pcie"]["width_max"])
    gen, width = re.search(r"PCIe Gen(\d) x(\d+), one direction", readme).groups()
    assert (sku.pcie_gen, sku.pcie_width) == (int(gen), int(width))
    assert sku.nvlink_links == 18  # NVLink answers NOT_SUPPORTED on the passed-through GPU: the data sheet's


# ------------------------------------------------------------------ real nvidia-smi outputs

def smi_gpus() -> list[dict]:
    """Every GPU in the nvidia-smi outputs under tests/fixtures: name, PCI device id, what NVML said."""
    found = []
    for path in sorted(FIXTURES.rglob("*.xml")):
        for gpu in ET.parse(path).getroot().iter("gpu"):
            link = gpu.find("pci/pci_gpu_link_info/pcie_gen")
            width = gpu.findtext("pci/pci_gpu_link_info/link_widths/max_link_width") or ""
            power = next(p for p in (gpu.find("power_readings"), gpu.find("gpu_power_readings")) if p is not None)
            found.append({"file": path.name, "name": gpu.findtext("product_name"),
                          "device": gpu.findtext("pci/pci_device_id"),
                          "memory_MiB": int(gpu.findtext("fb_memory_usage/total").split()[0]),
                          "pcie_gen": int(link.findtext("max_link_gen")), "pcie_width": int(width.rstrip("x")),
                          "power_W": float((power.findtext("default_power_limit") or "0 W").split()[0])})
    for path in sorted(FIXTURES.rglob("*.txt")):  # nvidia-smi -q text outputs
        text = path.read_text()
        name, device = re.search(r"Product Name\s*:\s*(.+)", text), re.search(r"Device Id\s*:\s*(\S+)", text)
        if not (name and device):
            continue  # a -d section alone
        memory = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", text)
        found.append({"file": path.name, "name": name[1].strip(), "device": device[1],
                      "memory_MiB": int(memory[1]),
                      "pcie_gen": int(re.search(r"PCIe Generation\s*\n\s*Max\s*:\s*(\d)", text)[1]),
                      "pcie_width": int(re.search(r"Link Width\s*\n\s*Max\s*:\s*(\d+)x", text)[1]),
                      "power_W": float(re.search(r"Default Power Limit\s*:\s*([\d.]+) W", text)[1])})
    assert len(found) >= 8, found
    return found


def test_real_outputs_match_where_their_id_and_their_name_agree(table):
    """The PCI device id and the name are independent keys: on every real output they name the same SKU
    (or both none), and what NVML reported fits that SKU's figures."""
    known = []
    for gpu in smi_gpus():
        by_id, by_name = table.match(None, gpu["device"]), table.match(gpu["name"])
        if skus.device_id(gpu["device"]) is not None:
            assert by_id is by_name, (gpu, by_id and by_id.id, by_name and by_name.id)
        sku = table.match(gpu["name"], gpu["device"])
        assert sku is (by_id or by_name)
        if sku is None:
            continue
        known.append(sku.id)
        assert (gpu["pcie_gen"], gpu["pcie_width"]) == (sku.pcie_gen, sku.pcie_width), gpu
        assert gpu["memory_MiB"] <= sku.memory_MiB, gpu
        assert sku.nvml_memory_MiB in (None, gpu["memory_MiB"]), gpu
        assert gpu["power_W"] >= sku.power_limit_W, gpu  # an HGX A100 board runs a 500 W custom TDP
        # the memory a derived profile asks of a GPU with no profile of its own: every real output has it
        assert gpu["memory_MiB"] >= expectations(sku, 8)["memory_per_gpu_MiB_min"][0], gpu
    assert {"h100-sxm5-80gb", "a100-sxm4-80gb", "t4", "p100-pcie-16gb", "a10"} <= set(known), known


def test_real_outputs_of_models_not_in_the_table_match_nothing(table):
    """An RTX 2080 (not Ti), an RTX 3080, a GTX 1660 Ti named "Graphics Device", a Blackwell card and an
    A10G whose id the hypervisor masked: no entry, and no near name (A10 for A10G) catches them."""
    listed = {device for sku in table.skus for device in sku.pci_device_ids}
    unknown = [gpu for gpu in smi_gpus() if skus.device_id(gpu["device"]) not in listed]
    assert len({gpu["name"] for gpu in unknown}) >= 4, unknown
    for gpu in unknown:
        assert table.match(gpu["name"], gpu["device"]) is None, gpu


def test_cuda_device_names_in_nccl_tests_logs_match_by_name(table):
    """nccl-tests prints CUDA's device name, which is NVML's: the A100 40GB and RTX 2080 Ti logs have no
    nvidia-smi output beside them. A GH200 is not in the table."""
    names = set()
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in ("", ".txt", ".log"):
            names |= set(re.findall(r"Rank +\d+ .*device +\d+ +\[[^\]]*\] +(.+?)\s*$",
                                    path.read_text(errors="replace"), re.M))
    matched = {name: table.match(name) for name in names}
    assert {"a100-sxm4-40gb", "rtx-2080-ti", "h100-sxm5-80gb", "t4"} <= {s.id for s in matched.values() if s}
    assert [name for name, sku in matched.items() if sku is None] == ["NVIDIA GH200 120GB"]


# ------------------------------------------------------------------ matching

@pytest.mark.parametrize("value,expected", [
    (0x233010DE, 0x2330), ("0x233010DE", 0x2330), ("233010DE", 0x2330), ("0x233010de", 0x2330),
    ("10de:2330", 0x2330), ("10DE:2330", 0x2330), (0x2330, 0x2330), ("0x2330", 0x2330), (" 2330 ", 0x2330),
    ("000000DE", None), ("0x12341002", None), ("1002:2330", None), ("GH100", None), ("", None), ("0x", None),
    (None, None), (True, None), (2.5, None), (0, None), (0x1233010DE, None),
])
def test_device_id_reads_the_forms_nvml_and_nvidia_smi_print(value, expected):
    assert skus.device_id(value) == expected


def test_unknown_gpus_match_nothing(table):
    assert table.match("NVIDIA B200", 0x290110DE) is None
    assert table.match("NVIDIA H100 80GB HBM3 (not quite)") is None
    assert table.match("", None) is None and table.match(None, None) is None
    assert table.match("NVIDIA A10G", "000000DE") is None  # a masked id falls back to the name; A10 is not A10G


def test_the_id_wins_over_the_name_and_the_name_backs_up_an_unknown_id(table):
    assert table.match("NVIDIA A10", 0x2330).id == "h100-sxm5-80gb"
    assert table.match("NVIDIA A10", 0x9999).id == "a10"
    assert table.match("NVIDIA  H100   80GB HBM3").id == "h100-sxm5-80gb"  # whitespace runs as one space


def test_peak_names_the_dtypes_a_sku_lacks(table):
    h100, t4, k80 = table.get("h100-sxm5-80gb"), table.get("t4"), table.get("k80")
    assert (h100.peak("bf16"), h100.peak("fp64")) == (989, 67)
    assert t4.peak("bf16") is None and t4.peak("tf32") is None and t4.peak("fp16") == 65
    assert k80.peak("fp16") is None
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        h100.peak("fp8")


def test_module_match_loads_the_default_table():
    assert skus.match("Tesla T4", "1EB810DE").id == "t4"
    assert skus.match("NVIDIA B200") is None


# ------------------------------------------------------------------ validation: one line naming file, SKU, key

GOOD = """skus:
  x:
    name: X
    nvml_names: ["NVIDIA X"]
    pci_device_ids: [0x1234]
    peak_TFLOPS: {fp32: 10}
    memory_MiB: 1024
    memory_bandwidth_GBps: 100
    power_limit_W: 100
    pcie_gen: 4
    pcie_width: 16
"""

# Aliases of aliases: ten to the sixth nodes once expanded, refused before construction.
LAUGHS = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"{c}: &{c} [{','.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True))


@pytest.mark.parametrize("text,message", [
    (GOOD.replace("    pcie_gen", "    colour: red\n    pcie_gen"), "SKU 'x': unknown key 'colour'"),
    (GOOD.replace("100\n    power", ".nan\n    power"), "SKU 'x': 'memory_bandwidth_GBps' must be a finite number > 0"),
    (GOOD.replace("power_limit_W: 100", "power_limit_W: -1"), "SKU 'x': 'power_limit_W' must be a finite number"),
    (GOOD.replace("power_limit_W: 100", "power_limit_W: .inf"), "'power_limit_W' must be a finite number"),
    (GOOD.replace("memory_MiB: 1024", "memory_MiB: 1024.5"), "SKU 'x': 'memory_MiB' must be an integer > 0"),
    (GOOD.replace("pcie_gen: 4", "pcie_gen: true"), "SKU 'x': 'pcie_gen' must be an integer"),
    (GOOD.replace("    pcie_width: 16\n", ""), "SKU 'x': 'pcie_width' is missing"),
    (GOOD.replace('["NVIDIA X"]', '["NVIDIA (X"]'), "SKU 'x': 'nvml_names' has a bad regular expression"),
    (GOOD.replace("{fp32: 10}", "{fp8: 10}"), "SKU 'x': 'peak_TFLOPS' has unknown dtype 'fp8'"),
    (GOOD.replace("{fp32: 10}", "{fp32: .nan}"), "SKU 'x': 'peak_TFLOPS.fp32' must be a finite number > 0"),
    (GOOD.replace("[0x1234]", "[0x12345]"), "SKU 'x': 'pci_device_ids' holds 16-bit PCI device ids"),
    (GOOD.replace("pcie_width: 16", "pcie_width: 16\n    nvlink_links: 4"), "'nvlink_links' without"),
    (GOOD + GOOD.split("skus:\n")[1].replace("  x:", "  y:").replace("NVIDIA X", "NVIDIA Y"),
     "SKU 'y': pci_device_ids 0x1234 is also SKU 'x's"),
    (GOOD + GOOD.split("skus:\n")[1].replace("  x:", "  y:").replace("0x1234", "0x4321"),
     "SKU 'y': nvml_names 'NVIDIA X' is also SKU 'x's"),
    (GOOD.replace("  x:", "  X Y:"), "SKU id 'X Y' must be lower-case"),
    (GOOD + "    resnet50_train_img_s: {mxnet: 3000}\n",
     "SKU 'x': 'resnet50_train_img_s' has unknown framework 'mxnet'"),
    (GOOD + "    resnet50_train_img_s: {torch: 0}\n",
     "SKU 'x': 'resnet50_train_img_s.torch' must be a finite number > 0"),
    (GOOD + "    resnet50_train_img_s: [2470]\n", "SKU 'x': 'resnet50_train_img_s' must be a mapping of framework"),
    (GOOD + "version: 2\n", "unknown key 'version' (known: skus)"),
    (GOOD + "    compute_capability: 9\n", "SKU 'x': 'compute_capability' must be MAJOR.MINOR such as \"9.0\""),
    (GOOD + "    compute_capability: \"sm_90\"\n", "'compute_capability' must be MAJOR.MINOR"),
    (GOOD + "    form_factor: oam\n", "SKU 'x': 'form_factor' must be one of sxm, pcie, got 'oam'"),
    (GOOD + "    ecc: 1\n", "SKU 'x': 'ecc' must be true or false, got 1"),
    (GOOD + "    data_centre: \"no\"\n", "SKU 'x': 'data_centre' must be true or false"),
    ("skus: {}\n", "'skus' must be a non-empty mapping"),
    ("- 1\n", "must be a mapping with the key 'skus'"),
    (GOOD.replace("    name: X\n", "    name: [X\n"), "line 4 is not valid YAML"),
    (LAUGHS, "more than 10000 YAML nodes"),
])
def test_a_malformed_table_is_one_line_naming_file_sku_and_key(tmp_path, text, message):
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(skus.SkuError) as caught:
        skus.load(path)
    reason = str(caught.value)
    assert message in reason and str(path) in reason and "\n" not in reason, reason


def test_the_good_example_loads(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(GOOD)
    [sku] = skus.load(path).skus
    assert (sku.id, sku.nvlink_links, sku.nvml_memory_MiB, sku.peak("fp32")) == ("x", 0, None, 10)


def test_unreadable_tables_are_one_line(tmp_path):
    for content, message in ((b"\xff\xfe", "is not UTF-8 text"), (b"#" * (skus.MAX_TABLE_BYTES + 1), "larger than")):
        path = tmp_path / "gpus.yaml"
        path.write_bytes(content)
        with pytest.raises(skus.SkuError, match=message):
            skus.load(path)
    with pytest.raises(skus.SkuError, match="cannot read GPU SKU table"):
        skus.load(tmp_path / "missing.yaml")


# ------------------------------------------------------------------ where the table is found

def test_the_table_is_not_a_profile(tmp_path):
    assert "gpus" not in profiles.available()
    shutil.copy(TABLE, tmp_path / skus.SKU_TABLE_FILE)
    assert "gpus" not in profiles.available(tmp_path)
    listing = run_gpucheck(["profiles", "--no-detect"], timeout=60)
    assert listing.returncode == 0 and "gpus" not in listing.stdout and "BROKEN" not in listing.stdout, listing


def test_the_first_table_in_the_profile_directories_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUCHECK_PROFILES_DIR", raising=False)
    shipped = Path(profiles.__file__).resolve().parent / "checks" / skus.SKU_TABLE_FILE
    assert skus.table_path() == (SYSTEM_TABLE if SYSTEM_TABLE.is_file() else shipped)
    assert shipped.resolve() == TABLE.resolve()  # the package's checks/ is the repository's
    (tmp_path / skus.SKU_TABLE_FILE).write_text(GOOD)
    assert [s.id for s in skus.load(extra_dir=tmp_path).skus] == ["x"]
    monkeypatch.setenv("GPUCHECK_PROFILES_DIR", str(tmp_path))
    assert skus.table_path() == tmp_path / skus.SKU_TABLE_FILE
    monkeypatch.setenv("GPUCHECK_PROFILES_DIR", str(tmp_path / "none"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert skus.table_path(empty) == skus.table_path()


@pytest.mark.skipif(SYSTEM_TABLE.is_file(), reason=f"{SYSTEM_TABLE} exists here and is found first")
def test_an_installed_package_finds_its_own_table(tmp_path):
    """The wheel's layout (tests/node/test_install.py builds the real one): gpucheck/checks/ a directory
    inside the installed package, not the checkout's link; run from elsewhere with no search overrides."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "agent" / "gpucheck", site / "gpucheck", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (site / "gpucheck" / "checks").is_symlink()
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCHECK_PROFILES_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    code = "from gpucheck import skus; t = skus.load(); print(t.path); print(len(t.skus))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    path, count = done.stdout.split()
    assert Path(path) == site / "gpucheck" / "checks" / skus.SKU_TABLE_FILE
    assert int(count) == len(skus.load(TABLE).skus)


def test_the_training_figures_frameworks_are_the_benchmarks_gpucheck_cluster_runs():
    from gpucheck.cluster.frameworks import FRAMEWORKS

    assert set(skus.TRAINING_FRAMEWORKS) == {f.benchmark for f in FRAMEWORKS.values()}
