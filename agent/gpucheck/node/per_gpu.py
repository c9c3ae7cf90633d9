"""Helpers that turn per-GPU findings into one Result naming every affected GPU.

The one rule for fields NVML could not read (nvml.py keeps a record of each under the GPU's
`errors`): such a field is never a pass and never a made-up value. For every check that needs
it, that GPU's finding is `error` naming the GPU, the field, the call and the NVML error (or the
hang), except the NVML errors that NVIDIA documents as the GPU's own trouble (HARDWARE_ERRORS),
which are `fail`. NOT_SUPPORTED is no error: the field is None and the check says what that means.

A remediation names the GPUs it is about: a command written for "the GPU" (`nvidia-smi -r -i N`) is given the
index of each GPU found (`nvidia-smi -r -i 3`), and an action two hints share is said once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..model import Result, Status, worst
from ..profiles import Profile

Finding = tuple[Status, str] | None

# nvml.h's own words for the return codes that mean the GPU itself is in trouble: a read that
# answers one of them fails the check (drain the node), it is not a harness error.
HARDWARE_ERRORS = {
    "NVML_ERROR_INSUFFICIENT_POWER": "a device's external power cables are not properly attached",
    "NVML_ERROR_IRQ_ISSUE": "NVIDIA kernel detected an interrupt issue with a GPU",
    "NVML_ERROR_CORRUPTED_INFOROM": "infoROM is corrupted",
    "NVML_ERROR_GPU_IS_LOST": "the GPU has fallen off the bus or has otherwise become inaccessible",
    "NVML_ERROR_RESET_REQUIRED": "the GPU requires a reset before it can be used again",
}


def keep_evidence(command: str = "gpucheck rma N") -> str:
    """The first action wherever one resets, reboots, reseats or returns a GPU: a reset zeroes the volatile ECC
    counters and a reboot loses the kernel log's Xids, what the vendor's RMA form asks for (docs/rma.md). `gpucheck
    rma N` archives one GPU's evidence (N: its index, which for_gpus writes in), `gpucheck rma` every GPU's."""
    return f"keep the evidence first ({command}): a reset or reboot clears what an RMA needs"


EVIDENCE = keep_evidence()
NODE_EVIDENCE = keep_evidence("gpucheck rma")  # where the hint cannot name the GPU
READ_ERROR_HINT = ("NVML could not read the GPU: check `dmesg` for Xid errors and `nvidia-smi -q -i N`; "
                   f"{EVIDENCE}; reset the GPU (nvidia-smi -r -i N) or reboot; if it persists, drain the node and "
                   "open an RMA")
# a command (in its backticks) up to a bracket or a separator
COMMAND = re.compile(r"`?(?:nvidia-smi|gpucheck rma)(?: [^\s()`;,]+)*`?")
ANY_GPU = re.compile(r"(-i|rma) N\b")  # a hint's word for "the GPU this is about"
ACTIONS = "; "  # what separates a hint's actions


def for_gpus(hint: str, indices: Sequence[int]) -> str:
    """The hint with its commands for the GPUs found: `nvidia-smi -r -i N` -> `nvidia-smi -r -i 3`, `gpucheck rma N`
    -> `gpucheck rma 3`, one command per GPU (`nvidia-smi -r -i 3, nvidia-smi -r -i 5`). Without a GPU to name, as
    it is."""
    if not indices:
        return hint

    def each(command: re.Match[str]) -> str:
        text = command.group(0)
        return ", ".join(ANY_GPU.sub(rf"\g<1> {i}", text) for i in indices) if ANY_GPU.search(text) else text

    return COMMAND.sub(each, hint)


def distinct_actions(hints: Sequence[tuple[str, Sequence[int]]]) -> str:
    """(hint, the GPUs it is about) in order -> each action once, its commands for its GPUs: an action already
    said, or said within a longer one (`reset the GPU … or reboot` within `drain the node and reset the GPU …
    or reboot`), adds its GPUs to that one rather than being said again."""
    said: list[tuple[str, list[int]]] = []
    for hint, gpus in hints:
        for action in (a.strip() for a in hint.split(ACTIONS)):
            earlier = next((s for s in said if action in s[0]), None)
            if earlier is None:
                said.append((action, list(gpus)))
            else:
                earlier[1].extend(i for i in gpus if i not in earlier[1])
    return ACTIONS.join(for_gpus(action, sorted(gpus)) for action, gpus in said if action)


def gpu_label(gpu: dict[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU{gpu['index']}" + (f" ({bus})" if bus else "")


# A figure standing on its own in a finding ("94 °C", "threshold 89 °C"): not a digit of a name or an address (GPU3,
# Gen4, x16, 00000000:18:00.0), which a shared finding must have in common.
FIGURE = re.compile(r"(?<![\w.:-])\d+(?:\.\d+)?(?![\w:-]|\.\d)")


def labels(names: Iterable[str]) -> str:
    """"GPU0-3, GPU6" for GPU0, GPU1, GPU2, GPU3, GPU6."""
    numbers = sorted(int(name.removeprefix("GPU")) for name in names)
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"GPU{r[0]}" if len(r) == 1 else f"GPU{r[0]}-{r[-1]}" for r in runs)


def gpu_names(indices: Sequence[int], total: int) -> str:
    """`all 8 GPUs`, or `3 GPUs (GPU0-1, GPU5)`: the GPUs a finding is shared by."""
    if len(indices) == total:
        return f"all {total} GPUs"
    return f"{len(indices)} GPUs ({labels(f'GPU{i}' for i in indices)})"


def _span(figures: Sequence[str]) -> str:
    low, high = min(figures, key=float), max(figures, key=float)
    return low if float(low) == float(high) else f"{low}-{high}"


def shared_findings(found: Sequence[tuple[dict[str, Any], str]], total: int) -> str:
    """The findings, one part per finding several GPUs share: said once, with the GPUs it is about (gpu_names)
    first and the range of the one figure that differs between them (`all 8 GPUs: 94-95 °C at or above its slowdown
    threshold 89 °C`); a GPU's finding of its own keeps that GPU's label (its PCI address, for the RMA), as do
    findings that differ in more than one figure. In the order first found."""
    groups: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for gpu, text in found:
        groups.setdefault(FIGURE.sub("\0", text), []).append((gpu, text))
    parts = []
    for shape, members in groups.items():
        columns = list(zip(*(FIGURE.findall(text) for _, text in members), strict=True))
        indices = [gpu["index"] for gpu, _ in members]
        # apart: a GPU's own finding; two figures that differ from GPU to GPU (which goes with which would be
        # lost); a GPU found twice in the same words (the count would be wrong)
        if len(set(indices)) < 2 or len(set(indices)) < len(indices) or sum(
                len({float(f) for f in column}) > 1 for column in columns) > 1:
            parts.extend(f"{gpu_label(gpu)}: {text}" for gpu, text in members)
            continue
        spans = [_span(column) for column in columns]
        words = shape.split("\0")  # one more than the figures: the same shape has them in the same places
        parts.append(f"{gpu_names(indices, total)}: "
                     + "".join(w + f for w, f in zip(words, [*spans, ""], strict=True)))
    return "; ".join(parts)


def live_gpus(nvml: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in nvml.get("gpus", []) if not g.get("lost")]


def field_error(gpu: dict[str, Any], field: str) -> dict[str, str] | None:
    """The record of why `field` was not read on this GPU, or None when it was (or is not supported)."""
    errors = gpu.get("errors") or {}
    return errors.get(field) or errors.get("*")


def read_finding(field: str, record: dict[str, str]) -> tuple[Status, str]:
    """The verdict on one field NVML did not answer: fail for hardware trouble, error otherwise."""
    code, call, text = record.get("error", ""), record.get("call", "?"), record.get("text", "")
    if code in HARDWARE_ERRORS:
        return Status.FAIL, f"{field} not read: {call} answered {code} ({HARDWARE_ERRORS[code]})"
    if code == "hung":
        return Status.ERROR, f"{field} not read: {call} hung ({text})"
    if code == "not_read":
        return Status.ERROR, f"{field} not read: {text}"
    return Status.ERROR, f"{field} not read: {call} answered {code} ({text})"


def unread(gpu: dict[str, Any], fields: Sequence[str]) -> list[tuple[Status, str]]:
    found = []
    for field in fields:
        record = field_error(gpu, field)
        if record is not None:
            found.append(read_finding(field, record))
    return found


def any_unread(nvml: dict[str, Any], fields: Sequence[str]) -> bool:
    return any(unread(g, fields) for g in live_gpus(nvml))


def thresholds(profile: Profile, nvml: dict[str, Any], key: str) -> dict[str, Any]:
    """{"GPU0": the profile's `gpu` threshold `key` for it} over the responsive GPUs (None: it states none)."""
    return {f"GPU{g['index']}": profile.for_gpu(g, key) for g in live_gpus(nvml)}


def asks(profile: Profile, nvml: dict[str, Any], key: str) -> bool:
    """Whether the profile states `gpu.key` for the node or for any responsive GPU."""
    return profile.get("gpu", key) is not None or any(v is not None for v in thresholds(profile, nvml, key).values())


def requires(profile: Profile, nvml: dict[str, Any], key: str) -> bool:
    """Whether the profile turns `gpu.key` on (true, a link count above 0) for the node or any responsive GPU."""
    return bool(profile.get("gpu", key)) or any(thresholds(profile, nvml, key).values())


def stated(values: dict[str, Any], shown: Callable[[Any], Any] = lambda value: value) -> Any:
    """A per-GPU threshold as a Result's `expected` says it: once when every GPU has the same, else per GPU."""
    present = {label: value for label, value in values.items() if value is not None}
    if not present:
        return None
    if len(present) == len(values) and len({repr(v) for v in present.values()}) == 1:
        return shown(next(iter(present.values())))
    return {label: shown(value) for label, value in present.items()}


def skip_unless_unread(check: str, nvml: dict[str, Any], fields: Sequence[str], reason: str,
                       expected: Any = None) -> Result:
    """A check the profile does not ask for is `skip`, unless a field it reads could not be read:
    an NVML read failure is reported wherever it happens."""
    if not any_unread(nvml, fields):
        return Result(check, Status.SKIP, expected=expected, reason=reason)
    return per_gpu(check, nvml, lambda g: None, lambda g: None, expected, reason, fields=fields)


def per_gpu(
    check: str,
    nvml: dict[str, Any],
    inspect: Callable[[dict[str, Any]], Finding],
    measure: Callable[[dict[str, Any]], Any],
    expected: Any,
    ok_reason: str,
    remediation: str = "",
    fields: Sequence[str] = (),
) -> Result:
    """Inspect each responsive GPU; the result is the worst finding, naming each GPU found.

    `fields`: the collector's field keys the check reads; one that was not read on a GPU is that
    GPU's finding (read_finding), beside whatever `inspect` finds in the fields that were read."""
    gpus = live_gpus(nvml)
    if not gpus:
        return Result(check, Status.SKIP, expected=expected, reason="no responsive GPU to inspect")
    bad: list[tuple[dict[str, Any], tuple[Status, str]]] = []
    unread_on: list[int] = []  # the GPUs with a field not read, and those with a finding of their own
    judged_on: list[int] = []
    for gpu in gpus:
        found = unread(gpu, fields)
        if found:
            unread_on.append(gpu["index"])
        finding = inspect(gpu)
        if finding is not None and finding[0] != Status.PASS:
            found.append(finding)
            judged_on.append(gpu["index"])
        bad.extend((gpu, f) for f in found)
    measured = {f"GPU{g['index']}": measure(g) for g in gpus}
    if not bad:
        return Result(check, Status.PASS, measured, expected, ok_reason)
    status = worst([f[0] for _, f in bad])
    reason = shared_findings([(gpu, f[1]) for gpu, f in bad], len(gpus))
    hints = [(remediation, judged_on)] if judged_on and remediation else []
    if unread_on:
        hints.append((READ_ERROR_HINT, unread_on))
    return Result(check, status, measured, expected, reason, distinct_actions(hints))
