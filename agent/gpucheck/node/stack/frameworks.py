"""Framework checks: TensorFlow, Horovod and PyTorch as each stack's own interpreter sees them.

The verdict comes from the frameworks themselves (`tf.test.is_built_with_cuda()`, `hvd.nccl_built()`,
`torch.cuda.device_count()`, ...), asked by probe_frameworks.py, which framework_probe.py runs with
each stack's python. `horovodrun --check-build` (deep runs only) is kept as evidence: it has been seen listing
PyTorch as built in a virtualenv without torch.
"""

from __future__ import annotations

from typing import Any

from ...model import Result, Status, worst
from ...profiles import Profile
from ...versions import version_tuple
from .. import Check
from ..per_gpu import live_gpus
from . import framework_probe
from .cuda_arch import coverage, parse_arch
from .framework_records import GPU_FRAMEWORKS, gpu_problem
from .stacks import BINDINGS, CONFIG_HINT, HOROVOD, NAMES, TENSORFLOW, TORCH
from .version_codes import nccl_version

Finding = tuple[Status, str]


def _required(p: Profile) -> list[str]:
    return [str(x) for x in (p.get("frameworks", "required") or [])]


def _gate(check: str, name: str, f: dict[str, Any], p: Profile) -> tuple[Result | None, list[dict[str, Any]]]:
    """Skip/fail before looking at any stack: nothing configured, or no stack with this framework."""
    facts = f["frameworks"]
    required = name in _required(p)
    if not facts.get("configured"):
        extra = f" (the profile requires {NAMES[name]})" if required else ""
        return Result(check, Status.SKIP, reason=CONFIG_HINT + extra), []
    stacks = [s for s in facts["stacks"] if name in s["frameworks"]]
    if stacks:
        return None, stacks
    names = ", ".join(s["name"] for s in facts["stacks"])
    if required:
        return Result(check, Status.FAIL, None, f"a stack with {name}",
                      f"the profile requires {NAMES[name]} but no configured stack has it (stacks: {names})",
                      f"install a {NAMES[name]} stack (site.yml --tags frameworks) and list it in "
                      "/etc/gpucheck/node.yaml"), []
    return Result(check, Status.SKIP, reason=f"no configured stack has {NAMES[name]} (stacks: {names})"), []


def _record(stack: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, Finding | None]:
    """The probe's record for a framework, or the finding that explains its absence or import failure."""
    record = stack["probe"].get(name)
    if record is None:
        status = Status.ERROR if stack.get("harness") else Status.FAIL
        return None, (status, f"stack {stack['name']}: {stack.get('error') or 'the probe reported nothing'}")
    if not record.get("import_ok"):
        return None, (Status.FAIL, f"stack {stack['name']}: import {name} failed: {record.get('import_error')}")
    return record, None


def _result(check: str, findings: list[Finding], measured: Any, expected: Any, ok: list[str],
            remediation: str, evidence: str = "") -> Result:
    bad = [fd for fd in findings if fd[0] != Status.PASS]
    if not bad:
        return Result(check, Status.PASS, measured, expected, "; ".join(ok), evidence=evidence)
    status = worst([fd[0] for fd in bad])
    return Result(check, status, measured, expected, "; ".join(text for _, text in bad), remediation,
                  evidence=evidence)


def _asked(stacks: list[dict[str, Any]]) -> str:
    """Whether each stack was asked in this run or its kept answers reused (kept_probes.py), for the evidence."""
    return "\n".join(f"stack {s['name']}: {s['reuse']}" for s in stacks if s.get("reuse"))


def _nvml_gpus(f: dict[str, Any]) -> int | None:
    nvml = f.get("nvml")
    return len(live_gpus(nvml)) if nvml else None


def gpu_framework(name: str, f: dict[str, Any], p: Profile) -> Result:
    """frameworks.tensorflow / frameworks.torch: it imports in every stack that lists it and, where the
    profile wants GPUs, is a CUDA build that sees every GPU NVML reports."""
    check = f"frameworks.{name}"
    framework = GPU_FRAMEWORKS[name]
    gated, stacks = _gate(check, name, f, p)
    if gated:
        return gated
    gpu_required = bool(p.get("frameworks", "gpu_required", False))
    nvml_gpus = _nvml_gpus(f)
    findings: list[Finding] = []
    ok, measured = [], {}
    for stack in stacks:
        record, problem = _record(stack, name)
        if problem:
            findings.append(problem)
            continue
        measured[stack["name"]] = framework.measured(record)
        label = f"stack {stack['name']}: {NAMES[name]} {record.get('version')}"
        cannot = gpu_problem(framework, record, nvml_gpus) if gpu_required else None
        if cannot:
            findings.append((Status.FAIL, label + cannot))
            continue
        ok.append(f"{label}{framework.build(record)}, sees {record.get(framework.gpus_key)} GPU(s)")
        findings.append((Status.PASS, ""))
    expected = {framework.gpus_key: nvml_gpus, framework.cuda_key: True} if gpu_required else "imports"
    return _result(check, findings, measured, expected, ok, framework.remediation, _asked(stacks))


def tensorflow(f: dict[str, Any], p: Profile) -> Result:
    return gpu_framework(TENSORFLOW, f, p)


def torch(f: dict[str, Any], p: Profile) -> Result:
    return gpu_framework(TORCH, f, p)


# controller / tensor operation name in the profile -> the hvd.*_built() it is answered by
HOROVOD_BUILT_KEYS = {"mpi": "mpi", "gloo": "gloo", "nccl": "nccl", "ddl": "ddl", "ccl": "ccl", "mlsl": "ccl",
                      "cuda": "cuda", "rocm": "rocm"}
DISPLAY = {"mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL", "ddl": "DDL", "ccl": "oneCCL", "mlsl": "MLSL"}


def _check_build_notes(stack: dict[str, Any], bindings: dict[str, dict[str, Any]]) -> list[str]:
    """Where horovodrun --check-build disagrees with Horovod's own answers (kept as information)."""
    parsed = (stack.get("check_build") or {}).get("parsed")
    if not parsed:
        return []
    notes = []
    for binding, record in bindings.items():
        listed = parsed.get("frameworks", {}).get("pytorch" if binding == TORCH else binding)
        if listed and not record.get("import_ok"):
            notes.append(f"horovodrun --check-build lists {NAMES[binding]} as built but horovod.{binding} "
                         "does not import")
        built = record.get("built") or {}
        for section in ("controllers", "tensor_operations"):
            for op, mark in parsed.get(section, {}).items():
                key = HOROVOD_BUILT_KEYS.get(op)
                if key in built and bool(built[key]) != bool(mark):
                    note = (f"horovodrun --check-build {'lists' if mark else 'does not list'} {op} "
                            f"but horovod.{binding} says {key}_built() is {built[key]}")
                    if note not in notes:
                        notes.append(note)
    return notes


def horovod(f: dict[str, Any], p: Profile) -> Result:
    check = "frameworks.horovod"
    gated, stacks = _gate(check, HOROVOD, f, p)
    if gated:
        return gated
    controllers = [str(c).lower() for c in (p.get("frameworks", "horovod_controllers_required") or [])]
    ops = [str(o).lower() for o in (p.get("frameworks", "horovod_ops_required") or [])]
    gpu_required = bool(p.get("frameworks", "gpu_required", False))
    findings: list[Finding] = []
    asked = _asked(stacks)
    ok, measured, evidence, notes = [], {}, [asked] if asked else [], []
    for stack in stacks:
        name = stack["name"]
        records: dict[str, dict[str, Any]] = stack["probe"].get(HOROVOD) or {}
        expected_bindings = [b for b in BINDINGS if b in stack["frameworks"]] or list(records) or ["-"]
        cb = stack.get("check_build")
        if cb:
            evidence.append(f"stack {name}: $ {cb['path']} --check-build\n{cb['output'].strip()}")
        notes += [f"stack {name}: {n}" for n in _check_build_notes(stack, records)]
        for binding in expected_bindings:
            record = records.get(binding)
            module = f"horovod.{binding}" if binding != "-" else "horovod"
            label = f"stack {name}: {module}"
            if record is None:
                status = Status.ERROR if stack.get("harness") else Status.FAIL
                findings.append((status, f"{label}: {stack.get('error') or 'the probe reported nothing'}"))
                continue
            if not record.get("import_ok"):
                findings.append((Status.FAIL, f"{label}: import failed: {record.get('import_error')}"))
                continue
            built = record.get("built") or {}
            init = record.get("init")
            code = record.get("nccl_version_code")
            measured[f"{name}:{module}"] = {
                "version": record.get("version"), "built": built, "init": init,
                "nccl_version": nccl_version(code) if code else None,
            }
            problems: list[Finding] = []
            if init is None:
                status = Status.ERROR if stack.get("harness") else Status.FAIL
                problems.append((status, f"hvd.init() never returned: {stack.get('error') or 'the probe stopped'}"))
            elif not init.get("ok"):
                problems.append((Status.FAIL, f"hvd.init() failed: {init.get('error')}"))
            for kind, wanted in (("controller", controllers), ("tensor operations", ops)):
                for item in wanted:
                    key = HOROVOD_BUILT_KEYS.get(item, item)
                    if not built.get(key):
                        problems.append((Status.FAIL, f"built without {DISPLAY.get(item, item)} {kind} "
                                                      f"({key}_built() is {built.get(key)})"))
            if gpu_required and built.get("cuda") is False:
                problems.append((Status.FAIL, "built without CUDA (cuda_built() is False)"))
            if problems:
                findings.append((worst([s for s, _ in problems]),
                                 f"{label} {record.get('version')}: " + "; ".join(t for _, t in problems)))
                continue
            have = [k for k in ("mpi", "gloo", "nccl") if built.get(k)]
            nccl = f" {nccl_version(code)}" if code else ""
            ok.append(f"{label} {record.get('version')}: built with "
                      f"{', '.join(k.upper() + (nccl if k == 'nccl' else '') for k in have) or 'nothing'}; "
                      f"hvd.init() ok (size {init.get('size')})")
            findings.append((Status.PASS, ""))
    expected = {"controllers": controllers, "tensor_operations": ops, "init": "ok"}
    result = _result(check, findings, measured, expected, ok + notes,
                     "rebuild Horovod with the missing parts (HOROVOD_WITH_MPI=1, HOROVOD_WITH_GLOO=1, "
                     "HOROVOD_GPU_OPERATIONS=NCCL, HOROVOD_WITH_TENSORFLOW/PYTORCH=1) against the stack's "
                     "framework (site.yml --tags frameworks)", "\n\n".join(evidence))
    if notes and result.status != Status.PASS:
        result.reason += "; " + "; ".join(notes)
    return result


def _builds(f: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(stack, framework, arch list) of every CUDA build the probes reported."""
    builds = []
    for stack in f["frameworks"].get("stacks", []):
        for name, framework in GPU_FRAMEWORKS.items():
            record = stack["probe"].get(name) or {}
            archs = framework.archs(record) if record.get("import_ok") else []
            if archs:
                builds.append((stack["name"], name, archs))
    return builds


def gpu_arch(f: dict[str, Any], p: Profile) -> Result:
    """Every GPU's compute capability against the architectures the frameworks were built for."""
    check = "frameworks.gpu_arch"
    if not f["frameworks"].get("configured"):
        return Result(check, Status.SKIP, reason=CONFIG_HINT)
    gpus = live_gpus(f.get("nvml") or {})
    if not gpus:
        return Result(check, Status.SKIP, reason="no responsive GPU to compare")
    builds = _builds(f)
    if not builds:
        return Result(check, Status.SKIP,
                      reason="no CUDA build of TensorFlow or PyTorch in the configured stacks (CPU builds)")
    by_cc: dict[str, list[str]] = {}
    for g in gpus:
        by_cc.setdefault(str(g.get("compute_capability")), []).append(f"GPU{g['index']}")
    if len(by_cc) == 1 and len(gpus) > 2:
        by_cc = {cc: [f"all {len(gpus)} GPUs"] for cc in by_cc}
    findings: list[Finding] = []
    ok = []
    measured = {f"{stack}:{fw}": archs for stack, fw, archs in builds}
    for stack, fw, archs in builds:
        parsed = [a for a in (parse_arch(x, fw) for x in archs) if a]
        label = f"stack {stack}: {NAMES[fw]} (built for {', '.join(archs)})"
        for cc_text, names in sorted(by_cc.items()):
            cc = version_tuple(cc_text)
            if len(cc) < 2:
                findings.append((Status.ERROR, f"{', '.join(names)}: compute capability not reported"))
                continue
            covered = coverage((cc[0], cc[1]), parsed)
            if covered is None:
                findings.append((Status.FAIL, f"{label} has no code for compute capability {cc_text} "
                                              f"({', '.join(names)})"))
            elif covered == "ptx":
                findings.append((Status.WARN, f"{label} runs on compute capability {cc_text} ({', '.join(names)}) "
                                              "only through PTX JIT compilation (slow first start, possibly "
                                              "slower kernels)"))
            else:
                findings.append((Status.PASS, ""))
        ok.append(f"stack {stack}: {NAMES[fw]} has code for compute capability {', '.join(sorted(by_cc))}")
    return _result(check, findings, measured, sorted(by_cc), ok,
                   "install a framework build that includes these GPUs' architectures (or build from source "
                   "with TF_CUDA_COMPUTE_CAPABILITIES / TORCH_CUDA_ARCH_LIST); old GPUs may need an older "
                   "framework release")


def summary(facts: dict[str, Any] | None) -> dict[str, Any]:
    """Versions per stack, for the report's facts (what `gpucheck cluster` compares across nodes)."""
    out: dict[str, Any] = {}
    for stack in (facts or {}).get("stacks", []):
        probe = stack.get("probe") or {}
        versions: dict[str, Any] = {}
        for name in GPU_FRAMEWORKS:
            record = probe.get(name)
            if record:
                versions[name] = record.get("version") if record.get("import_ok") else None
        for binding, record in (probe.get(HOROVOD) or {}).items():
            versions.setdefault(HOROVOD, record.get("version"))
            code = record.get("nccl_version_code")
            if code:
                versions[f"horovod.{binding}.nccl"] = nccl_version(code)
        out[stack["name"]] = versions
    return out


CHECKS = [
    # NVML first: the probe's kept answers are reused only for the driver and GPUs they were given with
    Check("frameworks.tensorflow", ("nvml?", "frameworks"), tensorflow,
          "TensorFlow imports in its stack, was built with CUDA and sees every GPU"),
    Check("frameworks.horovod", ("nvml?", "frameworks"), horovod,
          "Horovod imports, hvd.init() works, built with the controllers and operations the profile needs"),
    Check("frameworks.torch", ("nvml?", "frameworks"), torch, "PyTorch imports, has CUDA and sees every GPU"),
    Check("frameworks.gpu_arch", ("nvml?", "frameworks"), gpu_arch,
          "every GPU's compute capability is covered by the architectures TensorFlow/PyTorch were built for"),
]
COLLECTORS = {"frameworks": framework_probe.collect}
