"""stack.pins: the versions installed on this node against the pins in node.yaml, which site.yml's
gpucheck_agent role writes from the inventory's versions.yml (the versions site.yml installed).

A minimum in a profile says what is new enough; a pin says what this site installed. A fleet that drifts
all together, or one node upgraded by hand, passes the first and fails this one.

Nothing is probed again: the driver is NVML's answer (gpu.*), CUDA, cuDNN and NCCL the libraries' own
version functions (libs.*: the copy the system's search order loads, not a stack's own wheels), the
frameworks their own `__version__` in each stack's interpreter (frameworks.*). A pinned version that could
not be read is `error`, never a pass; a pinned library that is not there at all is `fail`.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from ...model import Result, Status, worst
from ...profiles import Profile
from .. import Check, Context
from ..per_gpu import read_finding
from .library_search import SYSTEM_ORIGINS, pick
from .stacks import HOROVOD

CHECK = "stack.pins"
LIBRARY_OF = {"cuda": "cudart", "cudnn": "cudnn", "nccl": "nccl"}  # node.yaml's pin -> LIBRARIES key
# How many parts of a version each library's own function reports (version_codes.py): cudaRuntimeGetVersion
# gives 12.2 for CUDA 12.2.140, cudnnGetVersion 8.9.7 for cuDNN 8.9.7.29. A pin is compared on at most these.
READ_PARTS = {"cuda": 2, "cudnn": 3, "nccl": 3}
HOW_TO_PIN = ("no pins in node.yaml: site.yml's gpucheck_agent role writes `pins:` (driver, CUDA, cuDNN, NCCL) and "
              "`stacks.<name>.pins:` (the frameworks) from the inventory's versions.yml; rerun "
              "site.yml --tags agent")
REMEDIATION = ("put back the pinned version (site.yml --tags gpu for the driver, CUDA, cuDNN and NCCL; --tags "
               "frameworks for a stack), or, if the new version is meant, change the pin in "
               "inventory/<site>/group_vars/all/versions.yml and rerun site.yml so every node gets it")
UNREAD_HINT = "the check that reads it (gpu.driver, libs.*, frameworks.*) says why it could not be read"
GLOB = "*?["

Finding = tuple[Status, str]
Installed = tuple[str | None, Finding | None]  # the version, or why there is none to compare


def collect(ctx: Context) -> dict[str, Any]:
    """The pins as node.yaml states them (no probe: the other collectors read the versions)."""
    return {"system": dict(ctx.config.pins),
            "stacks": {s.name: dict(s.pins) for s in ctx.config.stacks if s.pins}}


def _parts(version: str) -> tuple[list[str], str | None]:
    """'2.5.1+cu121' -> (['2', '5', '1'], 'cu121')."""
    public, _, local = version.strip().partition("+")
    return public.split("."), (local or None)


def _same(a: str, b: str) -> bool:
    return int(a) == int(b) if a.isdigit() and b.isdigit() else a == b  # "03" is 3; "1rc0" is not 1


def matches(pin: str, installed: str, parts: int | None = None) -> bool:
    """Whether an installed version is what the pin says: a glob ("535.*") matches the whole version;
    an exact pin is compared part by part on the pin's own precision ("12.2" takes 12.2.140, not 12.20),
    at most `parts` parts (what the version's reader reports), and on its local label when it has one
    ("2.5.1+cpu" is not "2.5.1+cu121"; "2.5.1" is either)."""
    if any(ch in pin for ch in GLOB):
        return fnmatch.fnmatchcase(installed.strip(), pin)
    want, want_local = _parts(pin)
    have, have_local = _parts(installed)
    count = min(len(want), parts or len(want))
    if len(have) < count or not all(_same(w, h) for w, h in zip(want[:count], have[:count], strict=True)):
        return False
    return want_local is None or want_local == have_local


def driver_version(nvml: dict[str, Any] | None) -> Installed:
    if nvml is None:
        return None, (Status.ERROR, "driver version not read: NVML did not answer (gpu.driver says why)")
    version = nvml.get("driver_version")
    if version:
        return str(version), None
    record = (nvml.get("errors") or {}).get("driver_version")
    if record:
        return None, read_finding("driver_version", record)
    return None, (Status.ERROR, "driver version not reported by NVML")


def library_version(name: str, libraries: dict[str, Any] | None) -> Installed:
    """The version of the copy the system loads (LD_LIBRARY_PATH, the ldconfig cache, the standard folders)."""
    label = f"{name} (lib{LIBRARY_OF[name]})"
    if libraries is None:
        return None, (Status.ERROR, f"{label} version not read: the library search did not run")
    entry = pick(libraries.get("libraries", {}).get(LIBRARY_OF[name], []), SYSTEM_ORIGINS)
    if entry is None:
        return None, (Status.FAIL, f"{label} is pinned but not installed: no lib{LIBRARY_OF[name]}.so in the "
                                   "system's search path (LD_LIBRARY_PATH, ldconfig, standard folders)")
    if entry.get("error") or not entry.get("version"):
        why = entry.get("error") or "its version function gave no version"
        return None, (Status.ERROR, f"{label} version not read: {entry['path']} {why}")
    return str(entry["version"]), None


def framework_versions(stack: str, name: str, frameworks: dict[str, Any] | None) -> list[Installed]:
    """What the stack's own interpreter reported (Horovod: one version per binding probed)."""
    label = f"stack {stack}: {name}"  # as node.yaml pins it
    entry = next((s for s in (frameworks or {}).get("stacks", []) if s.get("name") == stack), None)
    if entry is None:
        return [(None, (Status.ERROR, f"{label} version not read: the stack was not probed"))]
    probe = entry.get("probe") or {}
    records = list((probe.get(HOROVOD) or {}).values()) if name == HOROVOD else (
        [probe[name]] if probe.get(name) else [])
    if not records:
        why = entry.get("error") or "the probe reported nothing"
        return [(None, (Status.ERROR, f"{label} version not read: {why}"))]
    found = []
    for record in records:
        if record.get("version"):
            found.append((str(record["version"]), None))
        elif record.get("import_ok") is False:
            found.append((None, (Status.ERROR, f"{label} version not read: import failed: "
                                               f"{record.get('import_error')}")))
        else:
            found.append((None, (Status.ERROR, f"{label} version not read: it has no __version__")))
    return found


def judge(label: str, pin: str, installed: Installed, parts: int | None = None) -> tuple[Finding, str | None]:
    version, problem = installed
    if problem or version is None:
        return problem or (Status.ERROR, f"{label}: no version"), None
    if matches(pin, version, parts):
        return (Status.PASS, f"{label} {version}"), version
    return (Status.FAIL, f"{label} {version} installed, pinned {pin}"), version


def pins(f: dict[str, Any], p: Profile) -> Result:
    stated = f["pins"]
    system, stacks = stated.get("system") or {}, stated.get("stacks") or {}
    if not system and not stacks:
        return Result(CHECK, Status.SKIP, reason=HOW_TO_PIN)
    findings: list[Finding] = []
    measured: dict[str, Any] = {"system": {}, "stacks": {}}
    for name, pin in system.items():
        installed = driver_version(f.get("nvml")) if name == "driver" else library_version(name, f.get("libraries"))
        finding, version = judge(name, pin, installed, READ_PARTS.get(name))
        findings.append(finding)
        measured["system"][name] = version
    for stack, framework_pins in stacks.items():
        for name, pin in framework_pins.items():
            for installed in framework_versions(stack, name, f.get("frameworks")):
                finding, version = judge(f"stack {stack}: {name}", pin, installed)
                findings.append(finding)
                measured["stacks"].setdefault(stack, {})[name] = version
    expected = {"system": system, "stacks": stacks}
    status = worst([s for s, _ in findings])
    if status == Status.PASS:
        return Result(CHECK, status, measured, expected, "as pinned: " + ", ".join(t for _, t in findings))
    bad = [text for s, text in findings if s != Status.PASS]
    hints = [hint for kind, hint in ((Status.FAIL, REMEDIATION), (Status.ERROR, UNREAD_HINT))
             if any(s == kind for s, _ in findings)]
    return Result(CHECK, status, measured, expected, "; ".join(bad), "; ".join(hints))


CHECKS = [
    Check(CHECK, ("pins", "nvml?", "libraries?", "frameworks?"), pins,
          "installed driver, CUDA, cuDNN, NCCL and framework versions are the ones node.yaml pins (site.yml's stack)"),
]
COLLECTORS = {"pins": collect}
