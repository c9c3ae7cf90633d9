"""What the burn-in verdicts share: the profile's thresholds with their defaults, one GPU's view of the facts,
and the rule that turns each GPU's finding into one Result naming every GPU found.

The rule for a GPU's test (docs/burnin.md, "What a result carries"): a worker that could not start or said
`unavailable` is `error` with its reason; a result with a `fault` (the GPU's own trouble, a CUDA error such
as cudaErrorECCUncorrectable) is `fail`; one with an `error` (the test could not run) is `error`; a test the
worker never reported is `error` with why (killed at --bench-timeout during a test, stopped after a fault);
otherwise the check judges the figures. One GPU's results never change another GPU's verdict (sdc aside).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...model import Result, Status, worst
from ...profiles import Profile
from ..busy import BUSY_HINT
from ..gpu import missing_from_nvml
from ..health import DEFAULT_FAIL_REASONS
from ..per_gpu import NODE_EVIDENCE

# docs/burnin.md's defaults: what a profile without the key gets (checks/generic.yaml states the same).
DEFAULTS: dict[str, Any] = {
    "gemm_fraction_min": 0.6,
    "memory_bandwidth_fraction_min": 0.7,
    "host_bandwidth_fraction_min": 0.6,
    "p2p_bandwidth_fraction_min": 0.5,
    "memtest_coverage_min": 0.85,
    "burn_collapse_fraction_min": 0.5,
    "burn_reasons_fail": DEFAULT_FAIL_REASONS,  # the reasons that are the GPU's own trouble, as gpu.clocks judges
}
# PCIe one-direction data rate per lane in GB/s, after line coding: Gen1/2 8b/10b, Gen3-5 128b/130b, Gen6 FLIT
# (242 of 256 bytes carry data). Gen5 x16 = 63 GB/s, as the H100 data sheet's "128 GB/s" bidirectional.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
WORKER_HINT = "the worker's standard error is in the evidence; rerun with --only on the check to reproduce"
UNREACHED_HINT = (f"a GPU NVML cannot reach was not burnt in (gpu.count says the same): {NODE_EVIDENCE}; reseat it, "
                  "check its power and PCIe link, reboot; RMA it if it stays lost")


def setting(p: Profile, key: str) -> Any:
    return p.get("burnin", key, DEFAULTS.get(key))


def pcie_GBps(gen: Any, width: Any) -> float | None:
    """One direction of a PCIe link, GB/s; None when the generation or width is not known."""
    lane = PCIE_LANE_GBPS.get(gen) if isinstance(gen, int) and not isinstance(gen, bool) else None
    if lane is None or not isinstance(width, int) or isinstance(width, bool) or width <= 0:
        return None
    return round(lane * width, 1)


def pcie_link(gpu: Gpu) -> tuple[float | None, str]:
    """(one-direction GB/s of the GPU's PCIe link at its best, what it is): NVML's maximum generation and width,
    the SKU table's where NVML gives none. The host and the peer copies are judged against it."""
    link = gpu.nvml.get("pcie") or {}
    gen, width = link.get("gen_max"), link.get("width_max")
    source = "NVML's maximum"
    if (gen is None or width is None) and gpu.sku:
        gen, width, source = gpu.sku.get("pcie_gen"), gpu.sku.get("pcie_width"), "the SKU table's"
    return pcie_GBps(gen, width), f"PCIe Gen{gen} x{width} ({source})"


def shown(value: float) -> float:
    """A measured figure as the report keeps it: 4 significant digits (777.1 TFLOP/s, a slow GPU's 0.00832)."""
    return value if isinstance(value, int) else float(f"{value:.4g}")


def fmt(value: float) -> str:
    """A figure as a reason shows it: whole above 100, three significant digits below."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def share(ratio: float) -> str:
    """A measured / basis ratio: two decimals, and two significant digits where those would read 0.00 (the lab's
    modelled GPUs run at 2e-07 of an H100)."""
    return f"{ratio:.2f}" if ratio == 0 or abs(ratio) >= 0.005 else f"{ratio:.2g}"


@dataclass
class Gpu:
    """One GPU as the burn-in sees it: its worker's facts, NVML's facts, its SKU entry (None: not in the table)."""

    label: str  # "GPU0"
    work: dict[str, Any]
    nvml: dict[str, Any]
    sku: dict[str, Any] | None
    sku_error: str | None  # the SKU table could not be read
    table: str | None  # where the SKU table is

    @property
    def named(self) -> str:
        bus = self.work.get("pci_bus_id")
        return f"{self.label} ({bus})" if bus else self.label

    @property
    def name(self) -> str:
        return self.nvml.get("name") or "this GPU"

    def unknown(self) -> str:
        """Why a figure that needs a data sheet is measured, not judged."""
        return f"measured, not judged: {self.name} is not in the GPU SKU table ({self.table or 'checks/gpus.yaml'})"


@dataclass
class Judged:
    """One GPU's verdict on one check."""

    status: Status
    reason: str = ""  # empty for a plain pass
    measured: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)  # judged figure -> measured / its basis (peak, link)


def settle(judged: Judged, findings: list[tuple[Status, str]], notes: list[str]) -> Judged:
    """The worst finding is the GPU's status; the reason says every finding, then the notes."""
    if findings:
        judged.status = worst(s for s, _ in findings)
        judged.reason = "; ".join(text for _, text in findings + [(Status.PASS, n) for n in notes])
    else:
        judged.reason = "; ".join(notes)
    return judged


def gpu_view(f: dict[str, Any], label: str, index: Any, work: dict[str, Any] | None = None) -> Gpu:
    """One GPU's facts (NVML's by index, its SKU entry by label) as a Gpu."""
    nvml = next((g for g in (f.get("nvml") or {}).get("gpus", []) if g.get("index") == index), {})
    sku = f.get("sku") or {}
    return Gpu(label, work if work is not None else {"index": index, "pci_bus_id": nvml.get("pci_bus_id")}, nvml,
               (sku.get("gpus") or {}).get(label), sku.get("error"), sku.get("table"))


def gpus_of(f: dict[str, Any]) -> list[Gpu]:
    """Every GPU the burn-in ran a worker for (or could not), in NVML index order."""
    return [gpu_view(f, label, work.get("index"), work) for label, work in (f["gpuwork"].get("gpus") or {}).items()]


def outcome(gpu: Gpu, test: str) -> dict[str, Any] | Judged:
    """The worker's result for `test`, or the verdict when there is none to judge."""
    work = gpu.work
    if work.get("unavailable"):
        return Judged(Status.ERROR, work["unavailable"])
    result = (work.get("results") or {}).get(test)
    if result is None:
        why = (work.get("not_finished") or {}).get(test) or "no result: the worker never reported this test"
        return Judged(Status.ERROR, why)
    if result.get("fault"):
        return Judged(Status.FAIL, f"{test} failed: {result['fault']}")
    if result.get("error"):
        return Judged(Status.ERROR, f"{test} could not run: {result['error']}")
    return result


def grouped(found: dict[str, Judged], named: dict[str, str], passed: bool) -> list[str]:
    """Each reason once, after every GPU it was found on: "GPU0 (...), GPU3 (...): why"."""
    by_text: dict[str, list[str]] = {}
    for label, judged in found.items():
        if judged.reason and (judged.status == Status.PASS) == passed:
            by_text.setdefault(judged.reason, []).append(named.get(label, label))
    return [f"{', '.join(labels)}: {text}" for text, labels in by_text.items()]


def unreached(f: dict[str, Any]) -> dict[str, str]:
    """The node's GPUs no worker could run on because NVML cannot reach them (lost, or on the PCI bus and not in
    NVML), each a finding: `--only gpu.gemm` on a node with a GPU gone must not pass on the others alone."""
    nvml = f.get("nvml") or {}
    found = {f"GPU{g['index']}": f"not burnt in: {g.get('lost_reason') or 'NVML: GPU is lost'}"
             for g in nvml.get("gpus", []) if g.get("lost")}
    if missing := missing_from_nvml(nvml, f.get("pci_gpus")):
        found["PCI bus"] = f"not burnt in: {missing}"
    return found


def combine(check: str, found: dict[str, Judged], gpus: list[Gpu], ok_reason: str, remediation: str,
            gone: dict[str, str] | None = None) -> Result:
    """One Result: the worst GPU's status; each finding once, with every GPU it was found on. `gone`: the GPUs
    NVML cannot reach (unreached), each a failure."""
    found = {**found, **{label: Judged(Status.FAIL, why) for label, why in (gone or {}).items()}}
    measured = {label: judged.measured for label, judged in found.items() if judged.measured}
    expectations = [judged.expected for judged in found.values() if judged.expected]
    expected: Any = None
    if expectations:
        same = all(e == expectations[0] for e in expectations)
        expected = expectations[0] if same else {label: j.expected for label, j in found.items() if j.expected}
    status = worst(j.status for j in found.values()) if found else Status.SKIP
    named = {gpu.label: gpu.named for gpu in gpus}
    problems, notes = grouped(found, named, passed=False), grouped(found, named, passed=True)
    reason = "; ".join([ok_reason, *problems, *notes] if status == Status.PASS else problems)
    hints = [UNREACHED_HINT] if gone else []
    statuses = {j.status for label, j in found.items() if label not in (gone or {})}
    if Status.FAIL in statuses and remediation:
        hints.append(remediation)
    errors = [g for g in gpus if found.get(g.label) and found[g.label].status == Status.ERROR]
    if any(g.work.get("busy") for g in errors):
        hints.append(BUSY_HINT)
    if any(not g.work.get("busy") for g in errors):
        hints.append(WORKER_HINT)
    evidence = "\n".join(f"--- {named.get(g.label, g.label)}, the worker's standard error (last lines):\n"
                         f"{g.work.get('stderr_tail', '').strip()}" for g in gpus
                         if found.get(g.label) and found[g.label].status in (Status.FAIL, Status.ERROR)
                         and (g.work.get("stderr_tail") or "").strip())
    return Result(check, status, measured or None, expected, reason, "; ".join(hints), evidence)


def judge_each(check: str, test: str, f: dict[str, Any], judge: Callable[[Gpu, dict[str, Any]], Judged],
               ok_reason: Callable[[dict[str, Judged]], str], remediation: str) -> Result:
    """Judge every GPU's result of `test` on its own and combine the findings."""
    gpus, gone = gpus_of(f), unreached(f)
    if not gpus and not gone:
        return Result(check, Status.SKIP, reason="no GPU to run the burn-in on")
    found: dict[str, Judged] = {}
    for gpu in gpus:
        got = outcome(gpu, test)
        found[gpu.label] = got if isinstance(got, Judged) else judge(gpu, got)
        if gpu.work.get("beside"):  # --allow-busy: the figure is not the GPU's alone
            found[gpu.label].reason = "; ".join(filter(None, (found[gpu.label].reason, gpu.work["beside"])))
    return combine(check, found, gpus, ok_reason(found), remediation, gone)
