"""Ask the frameworks of one stack about themselves, in the stack's own interpreter.

Run as a file by the agent (framework_probe.py, beside it):
`<stack python> probe_frameworks.py --frameworks tensorflow,horovod`.
gpucheck is not installed in the stack's virtualenv, so this uses only the standard library and the
frameworks it probes, and stays compatible with old interpreters (Python 3.6+).

Output: one line per framework (and per Horovod binding), `GPUCHECK_PROBE {json}`, flushed as soon as
it is known, so a framework that hangs or crashes the interpreter leaves what came before it. A Horovod
record is printed once before `hvd.init()` (with `"init": null`) and again after it. The frameworks'
own prints, Python and C alike, go to stderr: stdout carries only these lines.
"""

import argparse
import importlib
import json
import os
import sys
import traceback

# This mark and the framework names below are framework_probe.MARK and config.KNOWN_FRAMEWORKS: this file
# runs in the stack's interpreter, where gpucheck cannot be imported.
MARK = "GPUCHECK_PROBE "
AGENT_PID = "GPUCHECK_AGENT_PID"  # framework_probe.AGENT_PID: the agent that waits for this probe
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
HOROVOD_BUILT = ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built")

_HERE = os.path.dirname(os.path.abspath(__file__))
# The probe's own folder (gpucheck/node: gpu.py, host.py, links.py, ...) must not shadow anything the
# frameworks import.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _claim_stdout():
    """Keep the real stdout for our lines; send everything else written to fd 1 to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def die_with_the_agent():
    """Linux: this probe gets SIGKILL when the agent that started it dies, even by SIGKILL (coreutils `timeout`
    past its grace, the OOM killer), when the agent had no chance to end it. Where prctl cannot be had, nothing
    changes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9)  # 9: SIGKILL
    except Exception:
        return
    # Reparented to init before prctl: the agent is gone, nobody waits for this probe. (Any other parent may be a
    # wrapper script of the stack's python: the signal then comes with that wrapper's death.)
    if os.getppid() == 1 and os.environ.get(AGENT_PID, "1") != "1":
        os._exit(1)


def last_line(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def attempt(record, key, fn):
    """record[key] = fn(), or record["errors"][key] = the exception's last line."""
    try:
        value = jsonable(fn())
    except BaseException as exc:  # SystemExit and friends from a framework are findings too
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.setdefault("errors", {})[key] = last_line(exc)
        return None
    record[key] = value
    return value


def import_module(record, name):
    try:
        module = importlib.import_module(name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record["import_ok"] = False
        record["import_error"] = last_line(exc)
        return None
    record["import_ok"] = True
    return module


def probe_tensorflow(emit):
    record = {"framework": "tensorflow"}
    tf = import_module(record, "tensorflow")
    if tf is not None:
        record["version"] = str(getattr(tf, "__version__", "") or "") or None
        attempt(record, "built_with_cuda", lambda: bool(tf.test.is_built_with_cuda()))
        attempt(record, "build_info", lambda: dict(tf.sysconfig.get_build_info()))
        attempt(record, "gpus", lambda: len(tf.config.list_physical_devices("GPU")))
    emit(record)


def probe_torch(emit):
    record = {"framework": "torch"}
    torch = import_module(record, "torch")
    if torch is not None:
        record["version"] = str(getattr(torch, "__version__", "") or "") or None
        attempt(record, "cuda_version", lambda: torch.version.cuda)
        attempt(record, "cuda_available", lambda: bool(torch.cuda.is_available()))
        attempt(record, "device_count", lambda: int(torch.cuda.device_count()))
        attempt(record, "arch_list", lambda: list(torch.cuda.get_arch_list()))
        attempt(record, "cudnn_version", lambda: torch.backends.cudnn.version())
        attempt(record, "nccl_version", lambda: list(torch.cuda.nccl.version()))
        dist = {}
        attempt(dist, "available", lambda: bool(torch.distributed.is_available()))
        if dist.get("available"):
            for backend in ("nccl", "gloo", "mpi"):
                attempt(dist, backend, lambda b=backend: bool(getattr(torch.distributed, f"is_{b}_available")()))
        record["distributed"] = dist
    emit(record)


def normalise_built(name, value):
    """hvd.nccl_built() returns NCCL's version code (or 0/False) in recent Horovods, a bool before."""
    if isinstance(value, bool) or value is None:
        return bool(value), None
    if isinstance(value, int):
        return value != 0, (value if name == "nccl_built" and value > 1 else None)
    return bool(value), None


def probe_horovod(emit, binding):
    record = {"framework": "horovod", "binding": binding}
    base = import_module(record, "horovod")
    if base is None:
        emit(record)
        return
    record["version"] = str(getattr(base, "__version__", "") or "") or None
    if binding is None:
        record["import_ok"] = False
        record["import_error"] = "no Horovod binding to probe: neither tensorflow nor torch is importable"
        emit(record)
        return
    hvd = import_module(record, "horovod." + binding)
    if hvd is None:
        emit(record)
        return
    built = {}
    for name in HOROVOD_BUILT:
        fn = getattr(hvd, name, None)
        if fn is None:
            continue
        value = attempt(built, name, fn)
        if name in built:
            built[name], code = normalise_built(name, value)
            if code:
                record["nccl_version_code"] = code
    record["built"] = {k[:-len("_built")]: v for k, v in built.items() if k != "errors"}
    if built.get("errors"):
        record["built_errors"] = built["errors"]
    record["init"] = None  # printed before hvd.init(): if init kills the process, the agent knows where
    emit(record)
    init = {}
    attempt(init, "call", hvd.init)
    if "errors" in init:
        init = {"ok": False, "error": init["errors"]["call"]}
    else:
        init = {"ok": True}
        attempt(init, "size", hvd.size)
        attempt(init, "rank", hvd.rank)
        for name in ("mpi_enabled", "gloo_enabled"):
            if hasattr(hvd, name):
                attempt(init, name, getattr(hvd, name))
        if hasattr(hvd, "shutdown"):
            attempt(init, "shutdown", hvd.shutdown)
        init.pop("shutdown", None)
        init.pop("call", None)
    record["init"] = init
    emit(record)


def importable(name):
    try:
        import importlib.util
        return importlib.util.find_spec(name) is not None
    except BaseException:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", required=True, help="comma-separated: tensorflow,horovod,torch")
    args = parser.parse_args(argv)
    wanted = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    die_with_the_agent()
    out = _claim_stdout()

    def emit(record):
        out.write(MARK + json.dumps(record, sort_keys=True) + "\n")
        out.flush()

    emit({"framework": "_probe", "python": sys.version.split()[0], "executable": sys.executable,
          "frameworks": wanted})
    if "tensorflow" in wanted:
        probe_tensorflow(emit)
    if "torch" in wanted:
        probe_torch(emit)
    if "horovod" in wanted:
        bindings = [b for b in ("tensorflow", "torch") if b in wanted]
        if not bindings:
            bindings = [b for b in ("tensorflow", "torch") if importable(b)] or [None]
        for binding in bindings:
            probe_horovod(emit, binding)
    emit({"framework": "_done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
