"""GPU inventory checks: count, model, compute capability, driver, memory, persistence, MIG."""

from __future__ import annotations

import re
from typing import Any

from ..model import Result, Status, worst
from ..profiles import SKUS, Profile
from ..versions import version_tuple
from . import Check
from .links import sysfs_pci_address
from .per_gpu import (
    EVIDENCE,
    NODE_EVIDENCE,
    READ_ERROR_HINT,
    Finding,
    any_unread,
    asks,
    field_error,
    for_gpus,
    gpu_label,
    labels,
    live_gpus,
    per_gpu,
    read_finding,
    requires,
    skip_unless_unread,
    stated,
    thresholds,
    unread,
)


def missing_from_nvml(nvml: dict[str, Any], pci: dict[str, Any] | None) -> str | None:
    """What the PCI bus has that NVML does not count, in words, or None."""
    bus = (pci or {}).get("gpus", [])
    gpus = nvml.get("gpus", [])
    absent = len(bus) - len(gpus)
    if absent <= 0:
        return None
    seen = {sysfs_pci_address(g["pci_bus_id"]) for g in gpus if g.get("pci_bus_id")}
    unmatched = ", ".join(f"{d['address']} (driver {d.get('driver') or 'none'})"
                          for d in bus if d["address"] not in seen)
    if len(seen & {d["address"] for d in bus}) == len(gpus):  # each NVML GPU found on the bus: the rest are missing
        return f"{absent} of {len(bus)} GPUs on the PCI bus not visible to NVML: {unmatched}"
    return f"{absent} of {len(bus)} GPUs on the PCI bus not visible to NVML (among {unmatched})"


def count(f: dict[str, Any], p: Profile) -> Result:
    nvml = f["nvml"]
    gpus = nvml["gpus"]
    lost = [g for g in gpus if g.get("lost")]
    alive = len(gpus) - len(lost)
    expected = p.get("gpu", "count")
    missing = missing_from_nvml(nvml, f.get("pci_gpus"))
    problems = [f"GPU{g['index']} is lost ({g.get('lost_reason') or 'NVML: GPU is lost'})" for g in lost]
    problems += [f"{gpu_label(g)} stopped answering NVML ({g['stopped_answering']})"
                 for g in gpus if g.get("stopped_answering") and not g.get("lost")]
    if missing:
        problems.append(missing)
    if expected is not None and len(gpus) != expected:  # lost ones are counted, and named above
        problems.insert(0, f"{len(gpus)} GPUs visible, {expected} expected")
    elif expected is None and not alive:
        problems.insert(0, "no GPU visible to NVML")
    shown_expected = expected if expected is not None else ">= 1"
    if lost:
        return Result("gpu.count", Status.FAIL, alive, shown_expected,
                      f"{alive} of {len(gpus)} GPUs respond; " + "; ".join(problems),
                      f"{NODE_EVIDENCE}; the GPU has fallen off the bus or stopped answering: drain the node, "
                      "reset or reseat the GPU, check Xid 79 and 48 in dmesg")
    if problems:
        return Result("gpu.count", Status.FAIL, alive, shown_expected, "; ".join(problems),
                      f"{NODE_EVIDENCE}; compare `lspci -d 10de:` with `nvidia-smi -L` and the profile; a GPU on the "
                      "bus that the driver does not show, or that stops answering, needs a reset, a reseat or an RMA "
                      "(check dmesg for Xid and NVRM errors)")
    unread_bus = [(g, f) for g in live_gpus(nvml) for f in unread(g, ("pci_bus_id",))]
    if unread_bus and (f.get("pci_gpus") or {}).get("gpus"):  # NVML's GPUs cannot all be matched with the bus
        return Result("gpu.count", worst([f[0] for _, f in unread_bus]), alive, shown_expected,
                      "; ".join(f"{gpu_label(g)}: {f[1]}" for g, f in unread_bus),
                      for_gpus(READ_ERROR_HINT, sorted({g["index"] for g, _ in unread_bus})))
    if expected is None:
        return Result("gpu.count", Status.PASS, alive, shown_expected, f"{alive} GPU(s) visible to NVML")
    return Result("gpu.count", Status.PASS, alive, expected, f"{alive} GPUs visible")


def model(f: dict[str, Any], p: Profile) -> Result:
    regex = p.get("gpu", "name_regex")
    if not regex and p.data.get(SKUS):
        return sku_models(f, p.data[SKUS])
    if not regex and not any_unread(f["nvml"], ("name",)):
        names = sorted({g.get("name") for g in live_gpus(f["nvml"])} - {None})
        return Result("gpu.model", Status.SKIP, names, None, "profile does not pin a GPU model")

    def inspect(g: dict[str, Any]) -> Finding:
        name = g.get("name")
        if not regex or (name is None and field_error(g, "name")) or re.search(regex, name or ""):
            return None
        return Status.FAIL, f"{name!r} does not match"

    return per_gpu("gpu.model", f["nvml"], inspect, lambda g: g.get("name"), regex,
                   "every GPU is the profile's model" if regex else "profile does not pin a GPU model",
                   "wrong hardware for this profile: pick the right profile (--profile) or fix the node",
                   fields=("name",))


def sku_models(f: dict[str, Any], found: dict[str, str | None]) -> Result:
    """A derived profile's node: every GPU one SKU, or said plainly which GPU is which (each is judged against
    its own entry; one the table does not know, for health only)."""
    gpus = live_gpus(f["nvml"])
    groups: dict[str, list[str]] = {}
    for g in gpus:
        sku = found.get(f"GPU{g['index']}")
        groups.setdefault(f"{g.get('name')!r} (SKU {sku})" if sku else f"{g.get('name')!r} (in no SKU entry: "
                          "judged for health only)", []).append(f"GPU{g['index']}")
    measured = {f"GPU{g['index']}": found.get(f"GPU{g['index']}") for g in gpus}
    unread_names = [(g, finding) for g in gpus for finding in unread(g, ("name",))]
    if unread_names:  # a name NVML did not give is never a pass, whatever the bus says the GPU is
        return Result("gpu.model", worst([finding[0] for _, finding in unread_names]), measured, None,
                      "; ".join(f"{gpu_label(g)}: {finding[1]}" for g, finding in unread_names),
                      for_gpus(READ_ERROR_HINT, sorted({g["index"] for g, _ in unread_names})))
    if len(groups) == 1 and all(measured.values()):
        return Result("gpu.model", Status.PASS, measured, None,
                      f"every GPU is {next(iter(groups))}, judged against its entry in the SKU table")
    return Result("gpu.model", Status.WARN, measured, None,
                  f"GPUs of {len(groups)} kinds on one node: " + "; ".join(f"{labels(group)} {kind}"
                                                                          for kind, group in groups.items()),
                  "a node's GPUs are normally one model: check the hardware against the order; if this node is "
                  "meant to be so, write a profile for it (`gpucheck profiles` shows the derived thresholds)")


def compute_capability(f: dict[str, Any], p: Profile) -> Result:
    fields = ("compute_capability",)
    if not asks(p, f["nvml"], "compute_capability_min"):
        return skip_unless_unread("gpu.compute_capability", f["nvml"], fields,
                                  "profile sets no minimum compute capability")
    wanted = stated(thresholds(p, f["nvml"], "compute_capability_min"))

    def inspect(g: dict[str, Any]) -> Finding:
        minimum, cc = p.for_gpu(g, "compute_capability_min"), g.get("compute_capability")
        if minimum is None:
            return None
        if cc is None:
            return None if field_error(g, "compute_capability") else (Status.ERROR, "compute capability not reported")
        return None if version_tuple(cc) >= version_tuple(minimum) else (
            Status.FAIL, f"compute capability {cc} < {minimum}")

    return per_gpu("gpu.compute_capability", f["nvml"], inspect, lambda g: g.get("compute_capability"),
                   at_least(wanted), f"compute capability >= {wanted}" if isinstance(wanted, str)
                   else "every GPU's compute capability >= its SKU's",
                   "this GPU generation is too old for the profile's stack: use a profile for this hardware "
                   "(--profile) or a stack built for it", fields=fields)


def at_least(wanted: Any, unit: str = "") -> Any:
    """">= 9.0", or per GPU where GPUs of two SKUs have their own minimum."""
    if isinstance(wanted, dict):
        return {label: f">= {value}{unit}" for label, value in wanted.items()}
    return f">= {wanted}{unit}"


def driver(f: dict[str, Any], p: Profile) -> Result:
    nvml = f["nvml"]
    version, cuda = nvml.get("driver_version"), nvml.get("cuda_driver_version")
    need_driver, need_cuda = p.get("gpu", "driver_version_min"), p.get("gpu", "cuda_driver_version_min")
    expected = {"driver_version_min": need_driver, "cuda_driver_version_min": need_cuda}
    measured = {"driver_version": version, "cuda_driver_version": cuda}
    findings = [read_finding(key, record) for key, record in (nvml.get("errors") or {}).items()]
    if need_driver and version is not None and version_tuple(version) < version_tuple(need_driver):
        findings.append((Status.FAIL, f"driver {version} older than {need_driver}"))
    if need_cuda and cuda is not None and version_tuple(cuda) < version_tuple(need_cuda):
        findings.append((Status.FAIL, f"driver supports CUDA {cuda}, stack needs {need_cuda}"))
    shutdown = nvml.get("shutdown_error")
    if shutdown:
        # everything was read; a driver that cannot close an NVML session cleanly is worth a look
        findings.append((Status.WARN, f"{shutdown['call']} {shutdown['error']} ({shutdown['text']}) after every "
                                      f"GPU was read: the driver may be wedged"))
    if findings:
        status = worst([s for s, _ in findings])
        hint = ("upgrade the driver branch (site.yml --tags gpu with the stack's driver pin)"
                if status == Status.FAIL else "check `dmesg` for Xid/NVRM errors; a reboot clears a wedged driver")
        return Result("gpu.driver", status, measured, expected, "; ".join(reason for _, reason in findings), hint)
    return Result("gpu.driver", Status.PASS, measured, expected, f"driver {version}, CUDA {cuda}")


def memory(f: dict[str, Any], p: Profile) -> Result:
    if not asks(p, f["nvml"], "memory_per_gpu_MiB_min"):
        return skip_unless_unread("gpu.memory", f["nvml"], ("memory",), "profile sets no minimum GPU memory")
    wanted = stated(thresholds(p, f["nvml"], "memory_per_gpu_MiB_min"))

    def inspect(g: dict[str, Any]) -> Finding:
        minimum, total = p.for_gpu(g, "memory_per_gpu_MiB_min"), g.get("memory_total_MiB")
        if minimum is None:
            return None
        if total is None:
            return None if field_error(g, "memory") else (Status.ERROR, "memory size not reported")
        return None if total >= minimum else (Status.FAIL, f"{total} MiB < {minimum} MiB")

    return per_gpu("gpu.memory", f["nvml"], inspect, lambda g: g.get("memory_total_MiB"), at_least(wanted, " MiB"),
                   f"every GPU has >= {wanted} MiB" if not isinstance(wanted, dict)
                   else "every GPU has its SKU's memory",
                   f"{EVIDENCE}; a GPU reporting less memory than its model has is faulty or in a wrong mode: reset, "
                   "then RMA",
                   fields=("memory",))


def persistence(f: dict[str, Any], p: Profile) -> Result:
    fields = ("persistence_mode",)
    if not requires(p, f["nvml"], "persistence_mode_required"):
        return skip_unless_unread("gpu.persistence", f["nvml"], fields, "profile does not require persistence mode")

    def inspect(g: dict[str, Any]) -> Finding:
        mode = g.get("persistence_mode")
        if not p.for_gpu(g, "persistence_mode_required", False):
            return None
        if mode is False:
            return Status.FAIL, "persistence mode off"
        if mode is None and field_error(g, "persistence_mode") is None:
            return Status.FAIL, "persistence mode not supported"
        return None

    return per_gpu(
        "gpu.persistence", f["nvml"], inspect, lambda g: g.get("persistence_mode"),
        stated(thresholds(p, f["nvml"], "persistence_mode_required")), "persistence mode on",
        "start nvidia-persistenced (systemctl enable --now nvidia-persistenced); without it every job pays "
        "driver initialisation and GPU state can reset between jobs", fields=fields)


def mig(f: dict[str, Any], p: Profile) -> Result:
    expected = p.get("gpu", "mig_mode_expected", False)

    def inspect(g: dict[str, Any]) -> Finding:
        if g.get("mig_mode") is None and field_error(g, "mig_mode"):
            return None
        current = bool(g.get("mig_mode"))  # not supported: no MIG, as good as disabled
        if current != expected:
            return Status.FAIL, f"MIG {'enabled' if current else 'disabled'}, expected {'on' if expected else 'off'}"
        if g.get("mig_mode_pending") is not None and bool(g["mig_mode_pending"]) != current:
            return Status.WARN, "a MIG mode change is pending a GPU reset"
        return None

    return per_gpu("gpu.mig", f["nvml"], inspect, lambda g: g.get("mig_mode"), expected,
                   f"MIG {'enabled' if expected else 'disabled'} as expected",
                   "nvidia-smi -i N -mig 0 (or 1) and reset the GPU; MIG slices cannot run NCCL across GPUs",
                   fields=("mig_mode",))


CHECKS = [
    Check("gpu.count", ("nvml", "pci_gpus?"), count,
          "GPU count against the profile and the PCI bus; lost and missing GPUs named"),
    Check("gpu.model", ("nvml",), model, "GPU model against the profile"),
    Check("gpu.compute_capability", ("nvml",), compute_capability, "compute capability >= the profile's minimum"),
    Check("gpu.driver", ("nvml",), driver, "driver and CUDA driver versions against the stack's minimum"),
    Check("gpu.memory", ("nvml",), memory, "memory per GPU against the profile"),
    Check("gpu.persistence", ("nvml",), persistence, "persistence mode on"),
    Check("gpu.mig", ("nvml",), mig, "MIG mode as the profile expects"),
]
