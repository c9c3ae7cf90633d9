"""gpu.p2p_bandwidth: every ordered pair of the node's GPUs copying to each other (--full, 2+ GPUs).

The collector runs `python -m gpucheck.gpuwork.p2p` once with every live GPU visible (CUDA device i = the i-th
UUID in NVML index order), killed at --bench-timeout. A pair is judged against burnin.p2p_bandwidth_fraction_min
x its path's one-direction rate: NVLink (the SKU's links x GB/s per link; through NVSwitch every pair gets all of
them, in a direct mesh without NVSwitch a pair may share one link, so one link's rate is the floor) when NVML
shows NVLink on both GPUs, else the PCIe link's rate (NVML's maximum generation x width). A slow link or GPU shows
in every pair it is part of, so the GPU in most slow pairs is named, not only the pairs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...model import Result, Status
from ...profiles import Profile
from .. import Check, Context
from ..busy import refuse_if_busy
from ..per_gpu import NODE_EVIDENCE, live_gpus
from .checks import no_gpu_list
from .judge import WORKER_HINT, Gpu, fmt, gpu_view, pcie_link, setting, share, shown
from .runner import gpu_program, run_programs

PROGRAM = "gpucheck.gpuwork.p2p"
PAIRS_SHOWN = 6
REMEDIATION = ("check gpu.nvlink (links down, Xid 74) and, on NVSwitch systems, gpu.fabric_manager; `nvidia-smi topo "
               f"-m` for the path between the GPUs named; {NODE_EVIDENCE}; reseat or RMA the GPU in most slow pairs")


def collect(ctx: Context) -> dict[str, Any]:
    """{"gpus": [labels, CUDA device order], "skipped" | "unavailable" | "result" | "not_finished", ...}."""
    no_gpu_list(ctx)
    refuse_if_busy(ctx, "the peer copies (every pair at once, one program)")
    gpus = live_gpus(ctx.facts["nvml"])
    placed = [g for g in gpus if g.get("uuid")]
    facts: dict[str, Any] = {"gpus": [f"GPU{g['index']}" for g in placed],
                             "not_placed": [f"GPU{g['index']}" for g in gpus if not g.get("uuid")]}
    if len(placed) < 2:
        return {**facts, "skipped": "one GPU: no peer to copy to" if len(gpus) == 1 else
                "fewer than two GPUs NVML gave a UUID for: no pair to test"}
    program = gpu_program(PROGRAM, [g["uuid"] for g in placed], [])
    outcome = run_programs({"p2p": program}, ctx.bench_timeout)["p2p"]
    result = outcome.results.get("p2p")
    why = None
    if result is None and not outcome.unavailable:
        why = (f"not finished: killed at --bench-timeout ({ctx.bench_timeout:g} s) during p2p" if outcome.timed_out
               else f"not run: the program exited with {outcome.exit} without a result")
    return {**facts, "unavailable": outcome.unavailable, "result": result, "not_finished": why, "begin": outcome.begin,
            "exit": outcome.exit, "timed_out": outcome.timed_out, "stderr_tail": outcome.stderr_tail}


def nvlink_rate(src: Gpu, dst: Gpu, nvswitch: bool) -> tuple[float, str] | None:
    """The NVLink rate between two GPUs and what it is based on; None when NVML shows no NVLink on one of them
    or the SKU table has no NVLink figure."""
    for gpu in (src, dst):
        links = gpu.nvml.get("nvlink") or {}
        if not links.get("up") or not gpu.sku or not gpu.sku.get("nvlink_links"):
            return None
    links = min(src.sku["nvlink_links"], dst.sku["nvlink_links"])
    per_link = min(src.sku["nvlink_GBps_per_link"], dst.sku["nvlink_GBps_per_link"])
    if nvswitch:
        return links * per_link, f"NVLink {links} x {per_link:g} GB/s"
    return per_link, f"one NVLink link {per_link:g} GB/s (a direct mesh: links per pair not known)"


def pair_basis(src: Gpu, dst: Gpu, nvswitch: bool) -> tuple[float, str] | None:
    nvlink = nvlink_rate(src, dst, nvswitch)
    if nvlink:
        return nvlink
    rates = [r for r in (pcie_link(src)[0], pcie_link(dst)[0]) if r]
    return (min(rates), f"PCIe {min(rates):g} GB/s") if len(rates) == 2 else None


def suspect(slow: list[tuple[str, str, float, str]]) -> str:
    """The GPU in most slow pairs, when one stands out."""
    counts = Counter(label for src, dst, _, _ in slow for label in (src, dst))
    (top, most), *rest = counts.most_common()
    if rest and rest[0][1] == most:
        tied = sorted(label for label, n in counts.items() if n == most)
        return f"{', '.join(tied)} are each in {most} of the {len(slow)} slow pairs"
    return f"{top} is in {most} of the {len(slow)} slow pairs: the likely cause"


def p2p_bandwidth(f: dict[str, Any], p: Profile) -> Result:
    check, facts = "gpu.p2p_bandwidth", f["p2p"]
    if facts.get("skipped"):
        return Result(check, Status.SKIP, reason=facts["skipped"])
    for key in ("unavailable", "not_finished"):
        if facts.get(key):
            return Result(check, Status.ERROR, reason=facts[key], remediation=WORKER_HINT,
                          evidence=facts.get("stderr_tail", ""))
    result = facts["result"]
    if result.get("fault"):
        return Result(check, Status.FAIL, reason=f"p2p failed: {result['fault']}", remediation=REMEDIATION,
                      evidence=facts.get("stderr_tail", ""))
    if result.get("error"):
        return Result(check, Status.ERROR, reason=f"p2p could not run: {result['error']}", remediation=WORKER_HINT,
                      evidence=facts.get("stderr_tail", ""))
    fraction, nvswitch = setting(p, "p2p_bandwidth_fraction_min"), bool(p.get("gpu", "nvswitch", False))
    order = facts["gpus"]
    by_label = {label: gpu_view(f, label, int(label.removeprefix("GPU"))) for label in order}
    measured: dict[str, dict[str, float]] = {}
    expected: dict[str, dict[str, str]] = {}
    slow: list[tuple[str, str, float, str]] = []
    unjudged, ratios, unmeasured = 0, [], []
    for pair in result.get("pairs") or []:
        try:
            src, dst = order[pair["src"]], order[pair["dst"]]
        except (IndexError, KeyError, TypeError):
            unmeasured.append(f"a pair of unknown CUDA devices ({pair.get('src')} -> {pair.get('dst')})")
            continue
        rate = pair.get("GBps")
        figure = f"to_{dst}_GBps"
        if not isinstance(rate, (int, float)):
            unmeasured.append(f"{src} -> {dst} not measured: {pair.get('error') or 'no figure'}")
            continue
        measured.setdefault(src, {})[figure] = shown(rate)
        basis = pair_basis(by_label[src], by_label[dst], nvswitch)
        if basis is None:
            unjudged += 1
            continue
        minimum = fraction * basis[0]
        expected.setdefault(src, {})[figure] = f">= {fmt(minimum)} ({fraction:g} x {basis[1]})"
        ratios.append((rate / basis[0], src, dst))
        if rate < minimum:
            access = "" if pair.get("peer_access", True) else ", no peer access"
            slow.append((src, dst, rate, f"{src} -> {dst} {fmt(rate)} GB/s (< {fmt(minimum)}{access})"))
    if not measured and not unmeasured:
        return Result(check, Status.ERROR, reason="the p2p program reported no pair", remediation=WORKER_HINT,
                      evidence=facts.get("stderr_tail", ""))
    texts = {text for per_source in expected.values() for text in per_source.values()}
    shown_expected: Any = expected  # per source GPU; one basis for every pair: per figure
    if len(texts) == 1:
        shown_expected = {figure: text for per_source in expected.values() for figure, text in per_source.items()}
    notes = [f"{unjudged} pairs measured, not judged: the PCIe link's rate is not known"] if unjudged else []
    notes += [f"{', '.join(facts['not_placed'])} not tested: NVML gave no UUID"] if facts.get("not_placed") else []
    pairs = len(result["pairs"])
    errors = [f"{len(unmeasured)} of {pairs} pairs not measured: " + "; ".join(unmeasured[:PAIRS_SHOWN])] \
        if unmeasured else []
    if slow:
        listed = ", ".join(text for *_, text in sorted(slow, key=lambda s: s[2])[:PAIRS_SHOWN])
        more = f" and {len(slow) - PAIRS_SHOWN} more" if len(slow) > PAIRS_SHOWN else ""
        reason = f"{suspect(slow)}; {len(slow)} of {pairs} pairs slow: {listed}{more}"
        return Result(check, Status.FAIL, measured, shown_expected, "; ".join([reason, *errors, *notes]), REMEDIATION,
                      facts.get("stderr_tail", ""))
    if errors:
        return Result(check, Status.ERROR, measured or None, shown_expected or None, "; ".join([*errors, *notes]),
                      WORKER_HINT, facts.get("stderr_tail", ""))
    if not ratios:
        return Result(check, Status.SKIP, measured, None, "; ".join(notes) or "measured, not judged")
    low = min(ratios)
    reason = (f"every one of {pairs} ordered pairs at or above its minimum (slowest {low[1]} -> {low[2]} at "
              f"{share(low[0])} of its basis)")
    return Result(check, Status.PASS, measured, shown_expected, "; ".join([reason, *notes]))


CHECKS = [Check("gpu.p2p_bandwidth", ("nvml?", "pci_gpus?", "sku", "gpu_users", "p2p"), p2p_bandwidth,
                "peer-to-peer copy GB/s of every GPU pair against NVLink or PCIe; the slow GPU named", active=True)]
COLLECTORS = {"p2p": collect}
