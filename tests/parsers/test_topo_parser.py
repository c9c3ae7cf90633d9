"""nvidia-smi topo -m: the values SOURCES.md lists, then format variations."""

from __future__ import annotations

from gpucheck.parsers import parse
from support import REAL

H100 = "topo/h100-8gpu-nv18-6nic-nic-legend-broken-cpu-affinity.txt"
V100 = "topo/v100-sxm2-8gpu-hybrid-cube-mesh-nv1-nv2-no-nic-no-legend-issue37.txt"
GPUS = [f"GPU{i}" for i in range(8)]


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_h100_nic_legend_and_empty_cpu_affinity_cells() -> None:
    r = parse("topo", real(H100))
    assert r["gpus"] == GPUS
    assert r["nics"] == [f"mlx5_{i}" for i in range(6)]  # NIC0..NIC5 named through the NIC Legend
    assert r["nvlink"] is True and r["gpu_link_types"] == ["NV18"]
    assert len([k for k in r["links"] if k.split("-")[1].startswith("GPU")]) == 28  # every GPU pair once
    assert (r["links"]["GPU0-GPU7"], r["links"]["GPU0-mlx5_0"], r["links"]["GPU0-mlx5_2"]) == ("NV18", "PIX",
                                                                                               "NODE")
    assert r["links"]["GPU6-mlx5_5"] == "PIX"
    assert r["cpu_affinity"] == dict.fromkeys(GPUS[:4]) | dict.fromkeys(GPUS[4:], "1")
    assert r["numa_affinity"] == dict.fromkeys(GPUS[:4], "0") | dict.fromkeys(GPUS[4:], "1")
    assert r["nic_affinity"]["GPU0"] == ["mlx5_0", "mlx5_1"] and r["nic_affinity"]["GPU1"] == []


def test_v100_hybrid_cube_mesh_without_nics_or_numa_column() -> None:
    r = parse("topo", real(V100))
    assert (r["gpus"], r["nics"], r["nic_legend"]) == (GPUS, [], {})
    assert r["gpu_link_types"] == ["NV1", "NV2", "SYS"] and r["nvlink"] is True
    assert (r["links"]["GPU0-GPU1"], r["links"]["GPU0-GPU3"], r["links"]["GPU0-GPU4"]) == ("NV1", "NV2", "SYS")
    assert r["links"]["GPU6-GPU7"] == "NV1"
    assert r["cpu_affinity"] == dict.fromkeys(GPUS, "0-95")
    assert r["numa_affinity"] == dict.fromkeys(GPUS)


def test_dgx_a100_twelve_mlx5_columns_without_legend() -> None:
    r = parse("topo", real("topo/dgx-a100-8gpu-nv12-12mlx5-numa3-1-7-5-gengwg.txt"))
    assert r["nics"] == [f"mlx5_{i}" for i in range(12)]
    assert r["gpu_link_types"] == ["NV12"]
    assert r["numa_affinity"] == {"GPU0": "3", "GPU1": "3", "GPU2": "1", "GPU3": "1", "GPU4": "7", "GPU5": "7",
                                  "GPU6": "5", "GPU7": "5"}
    assert r["cpu_affinity"]["GPU0"] == "48-63,176-191" and r["cpu_affinity"]["GPU7"] == "80-95,208-223"
    assert r["nic_affinity"]["GPU0"] == ["mlx5_0", "mlx5_1"]
    assert r["nic_affinity"]["GPU6"] == ["mlx5_8", "mlx5_9"]
    # Storage NICs mlx5_4/5 and mlx5_10/11 have no GPU behind a PCIe switch.
    assert not any(n in ("mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11") for nics in r["nic_affinity"].values()
                   for n in nics)
    assert r["links"]["GPU3-mlx5_2"] == "PXB" and r["links"]["GPU3-mlx5_11"] == "SYS"


PCIE_ONLY_SPACES = """\
        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      PHB     SYS     0-15            0
GPU1    PHB      X      SYS     0-15            0
NIC0    SYS     SYS      X

Legend:

  X    = Self
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
"""


def test_pcie_only_box_copied_with_spaces_and_crlf() -> None:
    r = parse("topo", PCIE_ONLY_SPACES.replace("\n", "\r\n"))
    assert (r["gpus"], r["nics"]) == (["GPU0", "GPU1"], ["mlx5_0"])
    assert r["links"] == {"GPU0-GPU1": "PHB", "GPU0-mlx5_0": "SYS", "GPU1-mlx5_0": "SYS"}
    assert (r["nvlink"], r["matrix"]) == (False, "nvlink+pcie")  # the legend of `topo -m` lists NV#
    assert r["cpu_affinity"] == {"GPU0": "0-15", "GPU1": "0-15"} and r["numa_affinity"]["GPU1"] == "0"


def test_matrix_cut_after_two_rows() -> None:
    text = "\n".join(real(V100).splitlines()[:3])
    r = parse("topo", text)
    assert r["gpus"] == GPUS
    assert r["links"]["GPU0-GPU6"] == "NV2" and "GPU2-GPU3" not in r["links"]
    assert r["cpu_affinity"]["GPU1"] == "0-95" and r["cpu_affinity"]["GPU5"] is None


# `nvidia-smi topo -mp`: the same matrix with PCIe paths only, and a legend without the NV# line. On this
# DGX-1V hybrid cube mesh, GPU0-GPU1 are joined by NVLink, but -mp shows their PCIe path (PIX).
PCIE_MATRIX = """\
\tGPU0\tGPU1\tGPU2\tCPU Affinity
GPU0\t X \tPIX\tSYS\t0-19,40-59
GPU1\tPIX\t X \tSYS\t0-19,40-59
GPU2\tSYS\tSYS\t X \t20-39,60-79

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
"""


def test_pcie_only_matrix_does_not_know_about_nvlink() -> None:
    r = parse("topo", PCIE_MATRIX)
    assert r["links"]["GPU0-GPU1"] == "PIX" and r["gpu_link_types"] == ["PIX", "SYS"]
    assert (r["nvlink"], r["matrix"]) == (None, "pcie")


def test_the_command_line_says_pcie_only_when_the_legend_is_cut() -> None:
    text = "$ nvidia-smi topo -mp\n" + PCIE_MATRIX.split("Legend:")[0]
    assert (parse("topo", text)["nvlink"], parse("topo", text)["matrix"]) == (None, "pcie")


def test_no_legend_and_no_nvlink_cell_is_unknown_not_no() -> None:
    r = parse("topo", PCIE_MATRIX.split("Legend:")[0])
    assert (r["nvlink"], r["matrix"]) == (None, None)
    assert parse("topo", real(V100))["matrix"] == "nvlink+pcie"  # no legend, but NV1/NV2 cells
