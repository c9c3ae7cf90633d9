"""`nvidia-smi topo -m`: the link matrix between GPUs and NICs, and each GPU's CPU/NUMA affinity.

The matrix is tab-separated; cells may be empty (a cgroup-restricted job sees no CPU affinity)
and rows may carry extra empty cells, so cells are matched to the header by position and
never by splitting on runs of whitespace when tabs are present. Link types: X (self),
NV# (# bonded NVLinks), PIX, PXB, PHB, NODE, SYS (see the legend nvidia-smi prints).

`nvidia-smi topo -mp` prints the same matrix with PCIe paths only: its legend has no "NV#" line, and a
pair of GPUs joined by NVLink shows its PCIe path. So `nvlink` is True when a cell says NV#, False only
when the legend shows the matrix could have said so (`topo -m`), and None (unknown) otherwise;
`matrix` says which: "nvlink+pcie" (-m), "pcie" (-mp), or None when the text does not tell.
"""

from __future__ import annotations

import re

from ._common import ParseError, guard, text_lines

KIND = "topo"

_GPU = re.compile(r"GPU\d+")
_NVLINK = re.compile(r"NV\d+")
_NIC_LEGEND = re.compile(r"^\s*(?P<nic>NIC\d+)\s*:\s*(?P<name>\S+)\s*$")
_LEGEND = re.compile(r"^\s*Legend:\s*$")
_LEGEND_NVLINK = re.compile(r"^\s*NV#\s*=")
_PCIE_ONLY_COMMAND = re.compile(r"\btopo\s+(?:-mp|--matrix_pci)\b")
_CLOSE_TO_NIC = ("PIX", "PXB")  # at most a PCIe switch between GPU and NIC: the NIC to use (GPUDirect RDMA)


def _cells(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return [cell.strip() for cell in line.split("\t")]
    # Copies with the tabs turned into spaces: columns are separated by two or more spaces.
    cells = [cell.strip() for cell in re.split(r"\s{2,}", line.strip())]
    return ([""] if line[:1].isspace() else []) + cells


def _find_header(lines: list[str]) -> tuple[int, list[str], bool]:
    for index, line in enumerate(lines):
        tabbed = "\t" in line
        cells = _cells(line, tabbed)
        if len(cells) > 1 and cells[0] == "" and _GPU.fullmatch(cells[1]):
            return index, cells[1:], tabbed
    raise ParseError(f"not {KIND} output: no matrix header starting with GPU0")


def _value(cell: str | None) -> str | None:
    return cell if cell and cell != "N/A" else None


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    start, columns, tabbed = _find_header(lines)
    # Device columns (GPU0.., NIC0.., mlx5_0..) come first; then "CPU Affinity", "NUMA Affinity", ...
    ndev = next((i for i, c in enumerate(columns) if " " in c or not c), len(columns))
    devices, extra = columns[:ndev], columns[ndev:]
    legend = {m["nic"]: m["name"] for line in lines if (m := _NIC_LEGEND.match(line))}
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1:]:
        cells = _cells(line, tabbed)
        if cells and cells[0] in devices and cells[0] not in rows:
            rows[cells[0]] = cells[1:]
    gpus = [d for d in devices if _GPU.fullmatch(d)]
    if not gpus or not any(g in rows for g in gpus):
        raise ParseError(f"not {KIND} output: no GPU rows under the matrix header")
    name = {d: legend.get(d, d) for d in devices}
    nics = [name[d] for d in devices if d not in gpus]
    links: dict[str, str] = {}
    nic_affinity: dict[str, list[str]] = {}
    cpu_affinity: dict[str, str | None] = {}
    numa_affinity: dict[str, str | None] = {}
    for gpu in gpus:
        cells = rows.get(gpu, [])
        for column, cell in zip(devices, cells[:ndev], strict=False):
            if column == gpu or not cell or cell == "X":
                continue
            if column not in gpus:
                links[f"{gpu}-{name[column]}"] = cell
            elif gpus.index(column) > gpus.index(gpu):
                links[f"{gpu}-{column}"] = cell
        nic_affinity[gpu] = [name[c] for c, cell in zip(devices, cells[:ndev], strict=False)
                             if c not in gpus and cell in _CLOSE_TO_NIC]
        trailing = cells[ndev:]
        cpu_affinity[gpu] = _value(_nth(trailing, extra, "CPU Affinity"))
        numa_affinity[gpu] = _value(_nth(trailing, extra, "NUMA Affinity"))
    gpu_links = sorted({v for k, v in links.items() if _GPU.fullmatch(k.split("-", 1)[1])})
    matrix = _matrix_kind(lines, any(_NVLINK.fullmatch(v) for v in gpu_links))
    return {
        "matrix": matrix,
        "gpus": gpus,
        "nics": nics,
        "nic_legend": legend,
        "links": links,
        "gpu_link_types": gpu_links,
        "nvlink": {"nvlink+pcie": any(_NVLINK.fullmatch(v) for v in gpu_links), "pcie": None}.get(matrix),
        "nic_affinity": nic_affinity,
        "cpu_affinity": cpu_affinity,
        "numa_affinity": numa_affinity,
    }


def _matrix_kind(lines: list[str], nvlink_seen: bool) -> str | None:
    """"nvlink+pcie" (`topo -m`), "pcie" (`topo -mp`), or None when neither the cells nor the text tell."""
    if nvlink_seen or any(_LEGEND_NVLINK.match(line) for line in lines):
        return "nvlink+pcie"
    if any(_LEGEND.match(line) or _PCIE_ONLY_COMMAND.search(line) for line in lines):
        return "pcie"  # a legend without NV#, or the command line that asked for PCIe paths only
    return None


def _nth(cells: list[str], names: list[str], wanted: str) -> str | None:
    """The cell under the column `wanted`, by position; None if the column or the cell is missing."""
    if wanted not in names:
        return None
    index = names.index(wanted)
    return cells[index] if index < len(cells) else None
