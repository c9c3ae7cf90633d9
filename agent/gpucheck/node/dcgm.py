"""DCGM's own diagnostic, `dcgmi diag -r N`, where DCGM is installed (--full).

How dcgmi behaves (NVIDIA/DCGM, dcgmi/Diag.cpp, Command.cpp, main_dcgmi.cpp, 3.3 to 4.6): `-j` prints JSON
(every release since 2.x); the exit status is DCGM's return code, a negative dcgmReturn_t, so 226 is
DCGM_ST_NVVS_ERROR (a test failed; the results are printed all the same), 205 DCGM_ST_NVVS_ISOLATE_ERROR (a
failure DCGM says needs the GPU isolated) and 235 DCGM_ST_CONNECTION_NOT_VALID (no host engine; `diag` itself
first falls back to an engine embedded in dcgmi, StartDiag::DoExecuteConnectionFailure, so it sees 235 only
when that cannot start either). The diagnostic runs inside the host engine (nv-hostengine): killing dcgmi does
not stop it, so after a timeout it is stopped the way dcgmi's own signal handler does, `dcgmi diag` with
DCGMI_STOP_DIAG_HOSTNAME set.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

from ..model import Result, Status
from ..parsers import ParseError, parse
from ..process import run
from ..profiles import Profile
from . import Check, CollectError, Context
from .busy import refuse_if_busy

CHECK = "gpu.dcgm"
DEFAULT_LEVEL = 2
LEVELS = (1, 2, 3, 4)
HOST = "localhost"  # dcgmi's default host engine
EXIT_NAMES = {226: "DCGM_ST_NVVS_ERROR", 205: "DCGM_ST_NVVS_ISOLATE_ERROR", 235: "DCGM_ST_CONNECTION_NOT_VALID"}
EXIT_ISOLATE = 205
NO_HOST_ENGINE = re.compile(r"unable to connect to host engine|unable to establish a connection to the specified "
                            r"host|host engine connection invalid", re.IGNORECASE)
# TCLAP's answer to an option it does not know (a dcgmi without -j)
OPTION_REFUSED = re.compile(r"PARSE ERROR|Couldn't find match for argument", re.IGNORECASE)
GPU_NAMED = re.compile(r"\bGPU\s*:?\s*(\d+)\b")
MESSAGE_MAX_CHARS = 300
START_DCGM = ("start the DCGM host engine: systemctl enable --now nvidia-dcgm (or run nv-hostengine), check "
              "`dcgmi discovery -l`, then rerun")


def level_of(profile: Profile | None) -> int:
    level = profile.get("burnin", "dcgm_level", DEFAULT_LEVEL) if profile else DEFAULT_LEVEL
    if isinstance(level, bool) or level not in LEVELS:
        raise CollectError(f"burnin.dcgm_level must be one of 1, 2, 3, 4, got {level!r}",
                           "fix the profile's burnin.dcgm_level", harness=True)
    return int(level)  # a YAML 2.0 is level 2


def collect(ctx: Context) -> dict[str, Any]:
    level = level_of(ctx.profile)
    refuse_if_busy(ctx, "dcgmi diag (every GPU at once)")
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    done = run(argv, ctx.bench_timeout)
    if done.not_found:
        return {"installed": False, "level": level}
    if not done.timed_out and "{" not in done.stdout and OPTION_REFUSED.search(done.output):
        argv = argv[:-1]  # a dcgmi older than -j: its table is read instead
        done = run(argv, ctx.bench_timeout)
    facts: dict[str, Any] = {
        "installed": True, "level": level, "command": " ".join(argv), "exit": done.returncode,
        "timed_out": done.timed_out, "seconds": round(done.duration_s, 1), "output": done.output,
        "failure": None if done.ok else done.describe_failure(),
        "host_engine_down": bool(NO_HOST_ENGINE.search(done.output)),
        "stopped": stop_diagnostic(ctx) if done.timed_out else None,
    }
    try:
        facts["parsed"] = parse("dcgmi", done.stdout)
    except ParseError as exc:
        facts["parse_error"] = str(exc)
    return facts


def stop_diagnostic(ctx: Context) -> str:
    """Ask the host engine to stop the diagnostic dcgmi left running; what dcgmi answered."""
    done = run(["dcgmi", "diag"], ctx.timeout, env=dict(os.environ, DCGMI_STOP_DIAG_HOSTNAME=HOST))
    return "asked to stop" if done.ok else f"could not be stopped: {done.describe_failure()}"


def exit_text(code: int | None) -> str:
    return f"exit {code}" + (f" ({EXIT_NAMES[code]})" if code in EXIT_NAMES else "")


def messages_of(parsed: dict[str, Any], test: str) -> list[str]:
    """DCGM's messages for one test, each once (the JSON repeats an entity's message in the test's summary)."""
    unique = dict.fromkeys(" ".join(m.split()) for m in parsed.get("details", {}).get(test, []))
    return [m if len(m) <= MESSAGE_MAX_CHARS else m[:MESSAGE_MAX_CHARS - 3] + "..." for m in unique]


def gpus_named(messages: list[str]) -> list[str]:
    numbers = sorted({int(n) for message in messages for n in GPU_NAMED.findall(message)})
    return [f"GPU{n}" for n in numbers]


def finding(parsed: dict[str, Any], test: str, verb: str) -> str:
    """'PCIe failed on GPU2: GPU 2 PCIe link width 8x, expected 16x'."""
    messages = messages_of(parsed, test)
    gpus = gpus_named(messages)
    where = f" on {', '.join(gpus)}" if gpus else ""
    return f"{test} {verb}{where}" + (f": {'; '.join(messages)}" if messages else " (DCGM gave no message)")


def evidence_of(facts: dict[str, Any], parsed: dict[str, Any]) -> str:
    """Every DCGM test with its result and messages, then dcgmi's own output."""
    about = ", ".join(x for x in (f"DCGM {parsed['version']}" if parsed.get("version") else "",
                                  f"{parsed['gpu_count']} GPUs" if parsed.get("gpu_count") else "",
                                  exit_text(facts["exit"]), f"{facts['seconds']:g} s") if x)
    lines = [f"{facts['command']} ({about})"]
    for test, status in parsed["tests"].items():
        lines.append(f"  {test}: {status}")
        lines += [f"    {message}" for message in messages_of(parsed, test)]
    lines += [f"  Error: {error}" for error in parsed.get("errors") or []]
    return "\n".join([*lines, "", facts["output"]])


def not_run(facts: dict[str, Any], required: bool, expected: str) -> Result | None:
    """The result when dcgmi could not give a verdict, or None when it did."""
    level = facts["level"]
    if not facts["installed"]:
        if required:
            return Result(CHECK, Status.ERROR, None, expected,
                          "dcgmi not installed, and the profile requires DCGM (burnin.dcgm_required)",
                          "install DCGM and enable nvidia-dcgm (site.yml's dcgm role, dcgm_enabled: true)")
        return Result(CHECK, Status.SKIP, None, expected, "dcgmi not installed")
    evidence = facts["output"]
    if facts["host_engine_down"]:
        return Result(CHECK, Status.ERROR, None, expected,
                      f"dcgmi cannot reach the DCGM host engine on {HOST} ({exit_text(facts['exit'])}): "
                      "nv-hostengine is not running", START_DCGM, evidence)
    if facts["timed_out"]:
        return Result(CHECK, Status.ERROR, None, expected,
                      f"dcgmi diag -r {level} did not finish within {facts['seconds']:g} s (killed; the "
                      f"diagnostic {facts['stopped']})",
                      "raise --bench-timeout (level 2 takes about 2 minutes, level 3 about 15, level 4 longer) "
                      "or lower burnin.dcgm_level", evidence)
    if "parsed" not in facts:
        why = facts["parse_error"] + (f" ({facts['failure']})" if facts["failure"] else "")
        return Result(CHECK, Status.ERROR, None, expected, f"no DCGM verdict: {why}",
                      f"run `dcgmi diag -r {level}` by hand and read DCGM's message", evidence)
    return None


def diag(f: dict[str, Any], p: Profile) -> Result:
    facts = f["dcgm"]
    level, required = facts["level"], bool(p.get("burnin", "dcgm_required", False))
    expected = f"every test of dcgmi diag -r {level} passes"
    unavailable = not_run(facts, required, expected)
    if unavailable:
        return unavailable
    parsed = facts["parsed"]
    tests = parsed["tests"]
    counts = Counter(tests.values())
    measured = {"level": level, **{s: counts[s] for s in ("pass", "warn", "fail", "skip")}}
    evidence = evidence_of(facts, parsed)
    failed = [finding(parsed, t, "failed") for t, s in tests.items() if s == "fail"]
    if failed:
        isolate = " DCGM says to isolate the GPU." if facts["exit"] == EXIT_ISOLATE else ""
        return Result(CHECK, Status.FAIL, measured, expected,
                      f"DCGM level {level}: " + "; ".join(failed),
                      f"drain the node; follow DCGM's message for the test and GPU named.{isolate} Reproduce "
                      f"with `dcgmi diag -r {level}` and check gpu.xid", evidence)
    warned = [finding(parsed, t, "warned") for t, s in tests.items() if s == "warn"]
    warned += [f"dcgmi reported an error: {error}" for error in parsed.get("errors") or []]
    if not warned and facts["exit"]:
        warned.append(f"no test failed, but dcgmi ended with {exit_text(facts['exit'])}")
    if warned:
        return Result(CHECK, Status.WARN, measured, expected, f"DCGM level {level}: " + "; ".join(warned),
                      "read DCGM's message for each test named (evidence)", evidence)
    if not counts["pass"]:
        status = Status.ERROR if required else Status.SKIP
        return Result(CHECK, status, measured, expected,
                      f"DCGM level {level} ran no test on this node: every test was skipped", evidence=evidence)
    skipped = f", {counts['skip']} skipped" if counts["skip"] else ""
    return Result(CHECK, Status.PASS, measured, expected,
                  f"DCGM level {level}: {counts['pass']} tests passed{skipped}", evidence=evidence)


CHECKS = [Check(CHECK, ("nvml?", "gpu_users", "dcgm"), diag, "DCGM's diagnostic, dcgmi diag -r N (burnin.dcgm_level)",
                active=True)]
COLLECTORS = {"dcgm": collect}
