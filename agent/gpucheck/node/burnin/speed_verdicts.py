"""The burn-in's speed and memory verdicts, each GPU on its own: gpu.gemm, gpu.memory_bandwidth,
gpu.host_bandwidth, gpu.memtest.

Speeds are judged as fractions of a data-sheet figure (docs/burnin.md): the GPU's SKU entry (checks/gpus.yaml)
for GEMM and memory bandwidth, the PCIe link NVML reports for host bandwidth. A GPU the SKU table does not know
is measured and reported, and its GEMM and memory figures are `skip`, saying so.
"""

from __future__ import annotations

from typing import Any

from ...model import Result, Status
from ...profiles import Profile
from ..per_gpu import NODE_EVIDENCE, field_error, read_finding
from .judge import Gpu, Judged, fmt, judge_each, pcie_link, setting, settle, share, shown

MIB, GIB = 1024**2, 1024**3


def size(nbytes: float) -> str:
    """Bytes as a person reads them: GiB from 1 GiB up, MiB below."""
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB else f"{nbytes / MIB:.1f} MiB"


OFFSETS_SHOWN = 4


def lowest(found: dict[str, Judged]) -> tuple[str, str, float] | None:
    """(GPU, figure, measured / basis) of the lowest judged figure."""
    ratios = [(ratio, label, figure) for label, judged in found.items() for figure, ratio in judged.ratios.items()]
    if not ratios:
        return None
    ratio, label, figure = min(ratios)
    return label, figure, ratio


def ok_text(found: dict[str, Judged], what: str, basis: str) -> str:
    low = lowest(found)
    if low is None:
        return f"{what}: measured"
    label, figure, ratio = low
    return f"{what}: every figure at or above its minimum (lowest: {label} {figure} at {share(ratio)} of {basis})"


def against(judged: Judged, figure: str, value: float, basis: float, fraction: float, unit: str,
            basis_name: str) -> tuple[Status, str] | None:
    """Judge one figure against fraction x basis; the finding when it falls short."""
    minimum = fraction * basis
    judged.expected[figure] = f">= {fmt(minimum)} ({fraction:g} x {fmt(basis)})"
    judged.ratios[figure] = value / basis
    if value < minimum:
        return Status.FAIL, (f"{figure.split('_')[0]} {fmt(value)} {unit} < {fmt(minimum)} ({fraction:g} x "
                             f"{basis_name} {fmt(basis)}; {share(value / basis)} of it)")
    return None


# ---------------------------------------------------------------- gpu.gemm

def gemm(f: dict[str, Any], p: Profile) -> Result:
    fraction = setting(p, "gemm_fraction_min")

    def judge(gpu: Gpu, result: dict[str, Any]) -> Judged:
        tflops = result.get("tflops") or {}
        judged = Judged(Status.PASS, measured={f"{d}_TFLOPS": shown(v) for d, v in tflops.items()})
        if gpu.sku_error:
            return Judged(Status.ERROR, f"the GPU SKU table could not be read: {gpu.sku_error}", judged.measured)
        if gpu.sku is None:
            return Judged(Status.SKIP, gpu.unknown(), judged.measured)
        peaks = gpu.sku.get("peak_TFLOPS") or {}
        findings: list[tuple[Status, str]] = []
        notes: list[str] = []
        for dtype, why in (result.get("errors") or {}).items():
            if dtype in peaks:
                findings.append((Status.ERROR, f"{dtype} not measured: {why}"))
            else:
                notes.append(f"{dtype} not measured ({why}), and not judged: no {dtype} figure for {gpu.sku['name']}")
        for dtype, value in tflops.items():
            if dtype not in peaks:
                notes.append(f"{dtype} measured, not judged: the SKU table has no {dtype} figure for {gpu.sku['name']}")
                continue
            finding = against(judged, f"{dtype}_TFLOPS", value, peaks[dtype], fraction, "TFLOP/s", "peak")
            if finding:
                findings.append(finding)
        return settle(judged, findings, notes)

    return judge_each("gpu.gemm", "gemm", f, judge,
                      lambda found: ok_text(found, "GEMM TFLOP/s per dtype", "the SKU's peak"),
                      "a GPU below its peak: check gpu.clocks and gpu.burn (power or thermal slowdown), the power "
                      "limit (gpu.power) and persistence; compare with the node's other GPUs")


# ---------------------------------------------------------------- gpu.memory_bandwidth

def memory_bandwidth(f: dict[str, Any], p: Profile) -> Result:
    fraction = setting(p, "memory_bandwidth_fraction_min")

    def judge(gpu: Gpu, result: dict[str, Any]) -> Judged:
        measured = {key: shown(result[key]) for key in ("copy_GBps", "stream_add_GBps")
                    if isinstance(result.get(key), (int, float))}
        judged = Judged(Status.PASS, measured=measured)
        if gpu.sku_error:
            return Judged(Status.ERROR, f"the GPU SKU table could not be read: {gpu.sku_error}", measured)
        if gpu.sku is None:
            return Judged(Status.SKIP, gpu.unknown(), measured)
        if "copy_GBps" not in measured:
            return Judged(Status.ERROR, "no device copy figure in the worker's result", measured)
        finding = against(judged, "copy_GBps", measured["copy_GBps"], gpu.sku["memory_bandwidth_GBps"], fraction,
                          "GB/s", "data sheet")
        return settle(judged, [finding] if finding else [], [])

    return judge_each("gpu.memory_bandwidth", "memory_bandwidth", f, judge,
                      lambda found: ok_text(found, "device memory copy GB/s", "the data sheet's"),
                      "slow device memory: check gpu.clocks (memory clock), row remapping and ECC (gpu.row_remap, "
                      "gpu.ecc_errors); compare with the node's other GPUs")


# ---------------------------------------------------------------- gpu.host_bandwidth

def link_rate(gpu: Gpu) -> tuple[float | None, str, tuple[Status, str] | None]:
    """(one-direction GB/s of the GPU's PCIe link at its maximum, what it is, the finding when NVML could not read
    it). NVML's maximum generation and width; the SKU's where NVML does not support them."""
    for key in ("pcie_gen_max", "pcie_width_max"):
        record = field_error(gpu.nvml, key)
        if record is not None:
            return None, "", read_finding(key, record)
    return (*pcie_link(gpu), None)


def host_bandwidth(f: dict[str, Any], p: Profile) -> Result:
    fraction = setting(p, "host_bandwidth_fraction_min")

    def judge(gpu: Gpu, result: dict[str, Any]) -> Judged:
        measured = {key: shown(result[key]) for key in ("h2d_GBps", "d2h_GBps")
                    if isinstance(result.get(key), (int, float))}
        judged = Judged(Status.PASS, measured=measured)
        rate, link, unread = link_rate(gpu)
        if unread:
            return Judged(unread[0], unread[1], measured)
        cpus = f" (bound to CPUs {result['cpus']})" if result.get("cpus") else ""
        if rate is None:
            return Judged(Status.SKIP, "measured, not judged: the PCIe link's generation and width are not known"
                          + cpus, measured)
        findings = []
        for key in ("h2d_GBps", "d2h_GBps"):
            if key not in measured:
                findings.append((Status.ERROR, f"no {key.split('_')[0]} figure in the worker's result"))
                continue
            finding = against(judged, key, measured[key], rate, fraction, "GB/s", link)
            if finding:
                findings.append((finding[0], finding[1] + cpus))
        return settle(judged, findings, [])

    return judge_each("gpu.host_bandwidth", "host_bandwidth", f, judge,
                      lambda found: ok_text(found, "pinned host<->device GB/s", "the PCIe link's rate"),
                      "slow host link: check gpu.pcie (a downtrained link), the slot and riser, the BIOS's PCIe "
                      "settings (ACS, MaxReadReq) and that no other load shares the root port")


# ---------------------------------------------------------------- gpu.memtest

def memtest(f: dict[str, Any], p: Profile) -> Result:
    coverage_min = setting(p, "memtest_coverage_min")

    def judge(gpu: Gpu, result: dict[str, Any]) -> Judged:
        bad, tested = result.get("bad_words"), result.get("bytes_tested") or 0
        # coverage of the GPU's whole memory (the worker's device total, else NVML's), so that memory another
        # program holds is never a silent pass; an older worker's share of free memory only where neither is known
        total_MiB = gpu.nvml.get("memory_total_MiB")
        total = result.get("total_bytes") or (total_MiB * MIB if isinstance(total_MiB, int) and total_MiB > 0 else None)
        coverage = round(tested / total, 3) if total else result.get("coverage")
        of = f"{size(total)} total" if total else f"{size(result.get('free_bytes') or 0)} free (no total known)"
        measured = {"bad_words": bad, "coverage": round(coverage, 3) if isinstance(coverage, float) else coverage,
                    "bytes_tested": tested}
        judged = Judged(Status.PASS, measured={k: v for k, v in measured.items() if v is not None},
                        expected={"bad_words": "0", "coverage": f">= {coverage_min:g} of the GPU's memory"})
        if not isinstance(bad, int):
            return Judged(Status.ERROR, "no bad-word count in the worker's result", judged.measured, judged.expected)
        if bad > 0:
            offsets = ", ".join(hex(o) for o in (result.get("bad_offsets") or [])[:OFFSETS_SHOWN])
            patterns = ", ".join(f"{name} {n}" for name, n in (result.get("bad_by_pattern") or {}).items() if n)
            judged.status = Status.FAIL
            judged.reason = (f"{bad} bad word{'s' if bad > 1 else ''} in {size(tested)} tested"
                             + (f" (first at byte offsets {offsets})" if offsets else "")
                             + (f"; by pattern: {patterns}" if patterns else ""))
            return judged
        if not isinstance(coverage, (int, float)) or coverage < coverage_min:
            shown = f"{coverage:.0%}" if isinstance(coverage, (int, float)) else "an unknown share"
            judged.status = Status.ERROR
            judged.reason = (f"could not test enough memory: {size(tested)} of {of} ({shown} < {coverage_min:.0%}); "
                             "the rest is held by another program or the driver, untested")
            return judged
        judged.reason = ""
        return judged

    def ok(found: dict[str, Judged]) -> str:
        tested = sum(j.measured.get("bytes_tested") or 0 for j in found.values())
        return f"no bad word in {size(tested)} tested over the GPUs"

    return judge_each("gpu.memtest", "memtest", f, judge, ok,
                      f"a GPU whose memory returns wrong bits: {NODE_EVIDENCE}; drain the node, check gpu.ecc_errors "
                      "and gpu.row_remap, reset the GPU and rerun; if it recurs, RMA the GPU")
