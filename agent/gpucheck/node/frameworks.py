"""Framework checks: TensorFlow, Horovod and PyTorch as each stack's own interpreter sees them.

The verdict comes from the frameworks themselves (`tf.test.is_built_with_cuda()`, `hvd.nccl_built()`,
`torch.cuda.device_count()`, ...), asked by workloads/probe_frameworks.py run as a file by the stack's
python. `horovodrun --check-build` is kept as evidence only: it has been seen listing PyTorch as built
in a virtualenv without torch.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..config import Stack
from ..model import Result, Status, truncate, worst
from ..parsers import ParseError, parse
from ..process import run, which
from ..profiles import Profile
from ..versions import version_tuple
from . import Check, Context
from .libraries import CONFIG_HINT, nccl_version
from .per_gpu import live_gpus

PROBE = Path(__file__).resolve().parent.parent / "workloads" / "probe_frameworks.py"
MARK = "GPUCHECK_PROBE "
NAMES = {"tensorflow": "TensorFlow", "horovod": "Horovod", "torch": "PyTorch"}
BINDINGS = ("tensorflow", "torch")
INSTALL_HINT = "install or repair the stack (site.yml --tags frameworks) and check /etc/gpucheck/node.yaml"


# ---------------------------------------------------------------------------------------------
# Collection
# ---------------------------------------------------------------------------------------------

def probe_env(stack: Stack) -> dict[str, str]:
    """The agent's environment, plus what a single-process hvd.init() needs as root, and every GPU."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # compare with every GPU NVML sees
    env.pop("PYTHONHOME", None)
    bindir = str(Path(stack.python).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # as if the virtualenv were activated
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The probe's marked lines -> {"tensorflow": rec, "torch": rec, "horovod": {binding: rec}, ...}.

    Later records replace earlier ones (Horovod prints itself before and after hvd.init())."""
    probe: dict[str, Any] = {"horovod": {}}
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            record = json.loads(line[len(MARK):])
        except ValueError:
            continue
        name = record.get("framework")
        if name == "horovod":
            probe["horovod"][record.get("binding") or "-"] = record
        elif isinstance(name, str):
            probe[name] = record
    return probe


def check_build(stack: Stack, env: dict[str, str], timeout: float) -> dict[str, Any] | None:
    horovodrun = Path(stack.python).parent / "horovodrun"
    if not horovodrun.exists():
        return None
    done = run([str(horovodrun), "--check-build"], timeout=timeout, env=env)
    result: dict[str, Any] = {"path": str(horovodrun), "rc": done.returncode, "output": truncate(done.output, 2000)}
    if not done.ok:
        result["error"] = done.describe_failure()
    try:
        result["parsed"] = parse("horovod-build", done.stdout)
    except ParseError as exc:
        result["parse_error"] = str(exc)
    return result


def probe_stack(stack: Stack, timeout: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": stack.name, "python": stack.python, "frameworks": list(stack.frameworks),
                             "probe": {"horovod": {}}, "error": None, "harness": False}
    if not stack.frameworks:
        return entry
    if not os.access(stack.python, os.X_OK) and not (os.sep not in stack.python and which(stack.python)):
        entry["error"] = f"the stack's python {stack.python} does not exist or is not executable"
        return entry
    env = probe_env(stack)
    done = run([stack.python, str(PROBE), "--frameworks", ",".join(stack.frameworks)], timeout=timeout, env=env)
    entry["duration_s"] = round(done.duration_s, 2)
    entry["stderr"] = truncate(done.stderr, 2000)
    entry["probe"] = parse_probe_output(done.stdout)
    if "_done" not in entry["probe"]:
        pending = _pending(entry["probe"], stack.frameworks)
        where = f" while probing {pending}" if pending else ""
        if done.timed_out:
            entry["error"] = f"the probe did not finish within {timeout:g} s{where} (killed)"
            entry["harness"] = True
        elif done.not_found:
            entry["error"] = f"cannot run {stack.python}: {done.stderr.strip()}"
        elif done.returncode is not None and done.returncode < 0:
            entry["error"] = f"the probe was killed by signal {-done.returncode}{where}"
        else:
            entry["error"] = f"the probe ended early{where}: {done.describe_failure()}"
            entry["harness"] = "_probe" not in entry["probe"]  # never started: the interpreter is broken
    if "horovod" in stack.frameworks:
        entry["check_build"] = check_build(stack, env, timeout)
    return entry


def _pending(probe: dict[str, Any], frameworks: list[str]) -> str | None:
    """The framework the probe was busy with when it stopped."""
    for hvd in probe.get("horovod", {}).values():
        if hvd.get("import_ok") and hvd.get("init") is None:
            return f"horovod.{hvd.get('binding')} (hvd.init())"
    for name in ("tensorflow", "torch", "horovod"):
        if name in frameworks and not (probe.get(name) if name != "horovod" else probe.get("horovod")):
            return name
    return None


def collect(ctx: Context) -> dict[str, Any]:
    stacks = ctx.config.stacks
    if not stacks:
        return {"configured": False, "stacks": []}
    with ThreadPoolExecutor(max_workers=min(4, len(stacks))) as pool:
        results = list(pool.map(lambda s: probe_stack(s, ctx.timeout), stacks))
    return {"configured": True, "stacks": results}


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------

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


def _nvml_gpus(f: dict[str, Any]) -> int | None:
    nvml = f.get("nvml")
    return len(live_gpus(nvml)) if nvml else None


def tensorflow(f: dict[str, Any], p: Profile) -> Result:
    check = "frameworks.tensorflow"
    gated, stacks = _gate(check, "tensorflow", f, p)
    if gated:
        return gated
    gpu_required = bool(p.get("frameworks", "gpu_required", False))
    nvml_gpus = _nvml_gpus(f)
    findings: list[Finding] = []
    ok, measured = [], {}
    for stack in stacks:
        record, problem = _record(stack, "tensorflow")
        if problem:
            findings.append(problem)
            continue
        info = record.get("build_info") or {}
        errors = record.get("errors") or {}
        measured[stack["name"]] = {"version": record.get("version"), "gpus": record.get("gpus"),
                                   "built_with_cuda": record.get("built_with_cuda"),
                                   "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version")}
        label = f"stack {stack['name']}: TensorFlow {record.get('version')}"
        if gpu_required:
            if record.get("built_with_cuda") is not True:
                why = errors.get("built_with_cuda") or "a CPU-only build (tensorflow-cpu?)"
                findings.append((Status.FAIL, f"{label} was not built with CUDA: {why}"))
                continue
            if "gpus" in errors:
                findings.append((Status.FAIL, f"{label}: list_physical_devices('GPU') failed: {errors['gpus']}"))
                continue
            seen = record.get("gpus") or 0
            if nvml_gpus is not None and seen < nvml_gpus:
                findings.append((Status.FAIL, f"{label} sees {seen} of the {nvml_gpus} GPUs NVML reports"))
                continue
        cuda = f", CUDA {info['cuda_version']}, cuDNN {info.get('cudnn_version')}" if info.get("cuda_version") else ""
        ok.append(f"{label}{cuda}, sees {record.get('gpus')} GPU(s)")
        findings.append((Status.PASS, ""))
    expected = {"gpus": nvml_gpus, "built_with_cuda": True} if gpu_required else "imports"
    return _result(check, findings, measured, expected, ok,
                   "install the CUDA build of TensorFlow (tensorflow[and-cuda]) matching the driver; check "
                   "that the CUDA libraries it needs load (libs.* checks) and that CUDA_VISIBLE_DEVICES is unset; "
                   + INSTALL_HINT)


def torch(f: dict[str, Any], p: Profile) -> Result:
    check = "frameworks.torch"
    gated, stacks = _gate(check, "torch", f, p)
    if gated:
        return gated
    gpu_required = bool(p.get("frameworks", "gpu_required", False))
    nvml_gpus = _nvml_gpus(f)
    findings: list[Finding] = []
    ok, measured = [], {}
    for stack in stacks:
        record, problem = _record(stack, "torch")
        if problem:
            findings.append(problem)
            continue
        dist = record.get("distributed") or {}
        measured[stack["name"]] = {"version": record.get("version"), "cuda_version": record.get("cuda_version"),
                                   "cuda_available": record.get("cuda_available"),
                                   "device_count": record.get("device_count"),
                                   "distributed": {k: v for k, v in dist.items() if k != "errors"}}
        label = f"stack {stack['name']}: PyTorch {record.get('version')}"
        if gpu_required:
            if not record.get("cuda_version"):
                findings.append((Status.FAIL, f"{label} is a CPU-only build (torch.version.cuda is None)"))
                continue
            if not record.get("cuda_available"):
                why = (record.get("errors") or {}).get("cuda_available", "torch.cuda.is_available() is False")
                findings.append((Status.FAIL, f"{label} cannot use CUDA: {why}"))
                continue
            seen = record.get("device_count") or 0
            if nvml_gpus is not None and seen < nvml_gpus:
                findings.append((Status.FAIL, f"{label} sees {seen} of the {nvml_gpus} GPUs NVML reports"))
                continue
            if dist.get("available") and dist.get("nccl") is False:
                findings.append((Status.FAIL, f"{label}: torch.distributed has no NCCL backend"))
                continue
        cuda = f", CUDA {record['cuda_version']}" if record.get("cuda_version") else " (CPU build)"
        ok.append(f"{label}{cuda}, sees {record.get('device_count')} GPU(s)")
        findings.append((Status.PASS, ""))
    expected = {"device_count": nvml_gpus, "cuda": True} if gpu_required else "imports"
    return _result(check, findings, measured, expected, ok,
                   "install the CUDA build of torch for the driver's CUDA version (the cuXXX index); check that "
                   "CUDA_VISIBLE_DEVICES is unset; " + INSTALL_HINT)


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
        listed = parsed.get("frameworks", {}).get("pytorch" if binding == "torch" else binding)
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
    gated, stacks = _gate(check, "horovod", f, p)
    if gated:
        return gated
    controllers = [str(c).lower() for c in (p.get("frameworks", "horovod_controllers_required") or [])]
    ops = [str(o).lower() for o in (p.get("frameworks", "horovod_ops_required") or [])]
    gpu_required = bool(p.get("frameworks", "gpu_required", False))
    findings: list[Finding] = []
    ok, measured, evidence, notes = [], {}, [], []
    for stack in stacks:
        name = stack["name"]
        records: dict[str, dict[str, Any]] = stack["probe"].get("horovod") or {}
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


# ---------------------------------------------------------------------------------------------
# Compute capability against the architectures the frameworks were built for
# ---------------------------------------------------------------------------------------------

def parse_arch(text: str, framework: str) -> tuple[tuple[int, int], bool, bool] | None:
    """'sm_90' / 'compute_90' / '9.0' / '8.6+PTX' -> ((major, minor), has_sass, has_ptx).

    TensorFlow: "x.y" and "compute_xy" include both binary and PTX code, "sm_xy" binary only (its
    configure script says so). PyTorch's get_arch_list(): "sm_xy" binary, "compute_xy" PTX only.
    """
    raw = str(text).strip().lower()
    ptx_suffix = raw.endswith("+ptx")
    raw = raw.removesuffix("+ptx")
    if raw.startswith(("sm_", "compute_")):
        prefix, _, digits = raw.partition("_")
        digits = "".join(ch for ch in digits if ch.isdigit())
        if len(digits) < 2:
            return None
        cc = (int(digits[:-1]), int(digits[-1]))
        if prefix == "sm":
            return cc, True, ptx_suffix
        return cc, framework == "tensorflow", True
    parts = version_tuple(raw)
    if len(parts) < 2:
        return None
    return (parts[0], parts[1]), True, framework == "tensorflow" or ptx_suffix


def coverage(cc: tuple[int, int], archs: list[tuple[tuple[int, int], bool, bool]]) -> str | None:
    """'sass' when binary code runs on this GPU (same major, minor <= the GPU's), 'ptx' when only
    PTX for an older or equal architecture can be JIT-compiled for it, None when nothing runs."""
    if any(sass and a[0] == cc[0] and a[1] <= cc[1] for a, sass, _ in archs):
        return "sass"
    if any(ptx and a <= cc for a, _, ptx in archs):
        return "ptx"
    return None


def _builds(f: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(stack, framework, arch list) of every CUDA build the probes reported."""
    builds = []
    for stack in f["frameworks"].get("stacks", []):
        tf = stack["probe"].get("tensorflow") or {}
        if tf.get("import_ok") and tf.get("built_with_cuda"):
            archs = (tf.get("build_info") or {}).get("cuda_compute_capabilities")
            if isinstance(archs, str):
                archs = [a for a in archs.replace(",", " ").split() if a]
            if archs:
                builds.append((stack["name"], "tensorflow", list(archs)))
        pt = stack["probe"].get("torch") or {}
        if pt.get("import_ok") and pt.get("cuda_version") and pt.get("arch_list"):
            builds.append((stack["name"], "torch", list(pt["arch_list"])))
    return builds


def gpu_arch(f: dict[str, Any], p: Profile) -> Result:
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
        for name in ("tensorflow", "torch"):
            record = probe.get(name)
            if record:
                versions[name] = record.get("version") if record.get("import_ok") else None
        for binding, record in (probe.get("horovod") or {}).items():
            versions.setdefault("horovod", record.get("version"))
            code = record.get("nccl_version_code")
            if code:
                versions[f"horovod.{binding}.nccl"] = nccl_version(code)
        out[stack["name"]] = versions
    return out


CHECKS = [
    Check("frameworks.tensorflow", ("frameworks", "nvml?"), tensorflow,
          "TensorFlow imports in its stack, was built with CUDA and sees every GPU"),
    Check("frameworks.horovod", ("frameworks",), horovod,
          "Horovod imports, hvd.init() works, built with the controllers and operations the profile needs"),
    Check("frameworks.torch", ("frameworks", "nvml?"), torch, "PyTorch imports, has CUDA and sees every GPU"),
    Check("frameworks.gpu_arch", ("frameworks", "nvml?"), gpu_arch,
          "every GPU's compute capability is covered by the architectures TensorFlow/PyTorch were built for"),
]
COLLECTORS = {"frameworks": collect}
