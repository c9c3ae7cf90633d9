"""Collect the frameworks' own answers: run probe_frameworks.py (beside this module) with each stack's
python, and, in a deep run (--full), `horovodrun --check-build` as evidence. Not in every run: it starts a new
interpreter that imports each framework again for each of its ~10 questions (13-16 CPU-s on a TensorFlow
stack, where the probe that gives the verdict costs ~3.5), and a Slurm health check has a deadline. The probe's
answers are kept and reused while nothing they depend on changed (kept_probes.py)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...config import Stack
from ...model import truncate
from ...parsers import ParseError, marked_records, parse
from ...process import run, which
from .. import Context
from . import kept_probes
from .stacks import BINDINGS, HOROVOD, Interpreters

PROBE = Path(__file__).resolve().with_name("probe_frameworks.py")
MARK = "GPUCHECK_PROBE "  # the probe's own MARK: it cannot import gpucheck
AGENT_PID = "GPUCHECK_AGENT_PID"  # the probe's own AGENT_PID: it dies with the process this names


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
    env[AGENT_PID] = str(os.getpid())
    return env


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The probe's marked lines -> {"tensorflow": rec, "torch": rec, "horovod": {binding: rec}, ...}.

    Later records replace earlier ones (Horovod prints itself before and after hvd.init())."""
    probe: dict[str, Any] = {HOROVOD: {}}
    for record in marked_records(stdout, MARK):
        name = record.get("framework")
        if name == HOROVOD:
            probe[HOROVOD][record.get("binding") or "-"] = record
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


def probe_stack(stack: Stack, timeout: float, interpreters: Interpreters | None = None,
                with_check_build: bool = False, nvml: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stack's probe entry: asked now, or (outside a deep run) the kept answers while they still hold. `nvml`
    is NVML's facts: which driver and GPUs the kept answers were given with."""
    interpreters = interpreters or Interpreters()
    entry: dict[str, Any] = {"name": stack.name, "python": stack.python, "frameworks": list(stack.frameworks),
                             "probe": {HOROVOD: {}}, "error": None, "harness": False}
    if not stack.frameworks:
        return entry
    if not os.access(stack.python, os.X_OK) and not (os.sep not in stack.python and which(stack.python)):
        entry["error"] = f"the stack's python {stack.python} does not exist or is not executable"
        return entry
    refusal = interpreters.refusal(stack.python)
    if refusal:
        entry.update(error=refusal, harness=True)
        return entry
    env = probe_env(stack)
    digests = kept_probes.digests(stack, PROBE, env, nvml)
    why = "asked: a deep run (--full) always asks"
    if not with_check_build:
        kept, why = kept_probes.reuse(stack, digests)
        if kept:
            return kept
    done = run([stack.python, str(PROBE), "--frameworks", ",".join(stack.frameworks)], timeout=timeout, env=env)
    entry["duration_s"] = round(done.duration_s, 2)
    entry["stderr"] = truncate(done.stderr, 2000)
    entry["probe"] = parse_probe_output(done.stdout)
    if "_done" not in entry["probe"]:
        pending = _pending(entry["probe"], stack.frameworks)
        where = f" while probing {pending}" if pending else ""
        if done.timed_out and "_probe" not in entry["probe"]:  # the interpreter itself never answered
            interpreters.did_not_answer(stack.python, timeout)
            entry["error"] = f"{stack.python} did not answer within {timeout:g} s: the probe never started (killed)"
            entry["harness"] = True
        elif done.timed_out:
            entry["error"] = f"the probe did not finish within {timeout:g} s{where} (killed)"
            entry["harness"] = True
        elif done.not_found:
            entry["error"] = f"cannot run {stack.python}: {done.stderr.strip()}"
        elif done.returncode is not None and done.returncode < 0:
            entry["error"] = f"the probe was killed by signal {-done.returncode}{where}"
        else:
            entry["error"] = f"the probe ended early{where}: {done.describe_failure()}"
            entry["harness"] = "_probe" not in entry["probe"]  # never started: the interpreter is broken
    entry["reuse"] = f"{why}; {kept_probes.keep(stack, entry, digests, nvml)}"
    # horovodrun is run by that python: not where it refused to answer
    if with_check_build and HOROVOD in stack.frameworks and not interpreters.refusal(stack.python):
        entry["check_build"] = check_build(stack, env, timeout)
    return entry


def _pending(probe: dict[str, Any], frameworks: list[str]) -> str | None:
    """The framework the probe was busy with when it stopped (it probes the bindings, then Horovod)."""
    for hvd in probe.get(HOROVOD, {}).values():
        if hvd.get("import_ok") and hvd.get("init") is None:
            return f"horovod.{hvd.get('binding')} (hvd.init())"
    for name in (*BINDINGS, HOROVOD):
        if name in frameworks and not probe.get(name):
            return name
    return None


def collect(ctx: Context) -> dict[str, Any]:
    stacks = ctx.config.stacks
    if not stacks:
        return {"configured": False, "stacks": []}
    with ThreadPoolExecutor(max_workers=min(4, len(stacks))) as pool:
        # NVML's facts are there: every check that needs these facts needs NVML's first (tests/node/
        # test_kept_probes.py holds them to it); without them nothing is reused
        results = list(pool.map(lambda s: probe_stack(s, ctx.timeout, ctx.interpreters, ctx.full,
                                                      ctx.facts.get("nvml")), stacks))
    return {"configured": True, "stacks": results}
