"""Every NVML symbol the agent asks nvidia-ml-py for is implemented by the fake, and is really called.

The agent's NVML collector runs in a child process against the healthy scenario, with pynvml's
symbol lookup wrapped to record each name; the fake's own trace shows which calls reached it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.fakenvml import build_library, env_for, scenario_path
from support import ROOT

CHILD = """
import json, sys
import pynvml
asked = []
real = pynvml._nvmlGetFunctionPointer
def recording(name):
    asked.append(name)
    return real(name)
pynvml._nvmlGetFunctionPointer = recording
from gpucheck.node import Context, nvml
facts = nvml.collect(Context(timeout=30))
errors = {g["index"]: g["errors"] for g in facts["gpus"] if g["errors"]}
print(json.dumps({"asked": sorted(set(asked)), "errors": errors, "gpus": len(facts["gpus"])}))
"""


def exported(library: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}


def test_agent_calls_only_implemented_nvml_symbols_and_each_reaches_the_fake(tmp_path):
    libdir = build_library()
    trace = tmp_path / "trace"
    env = env_for(scenario_path("dgx-h100"), libdir, trace)
    env["PYTHONPATH"] = str(ROOT / "agent")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    asked = set(result["asked"])
    missing = asked - exported(libdir / "libnvidia-ml.so.1")
    assert not missing, f"the agent calls NVML functions the fake does not implement: {sorted(missing)}"
    traced = {line.split()[0] for line in trace.read_text().splitlines() if line.strip()}
    assert asked <= traced | {"nvmlShutdown"}, f"asked but never called: {sorted(asked - traced)}"
    assert result["gpus"] == 8 and result["errors"] == {}
    assert {"nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetTotalEccErrors"} <= asked
