"""What the jobs' own image holds where the jobs do not run on the nodes' own stacks (--launcher kubernetes: the job
template's image, one for every node): its python and the frameworks that python imports. Asked once per run by
one probe (a shell command in that image on one node), read into the shape a node report's facts
give the same answers in (`frameworks`, `stacks`), so the stages judge and start their jobs the same way."""

from __future__ import annotations

import shlex
from typing import Any

from ..parsers import marked_records
from .frameworks import FRAMEWORKS

MARK = "GPUCHECK_IMAGE "
PYTHON_ANNOTATION = "gpucheck/python"  # on the job template: the python the jobs run (else python3 on PATH)
DEFAULT_PYTHON = "python3"
# Each framework the stages run, imported when the image has it (find_spec: an absent one costs nothing); the
# version, or the import's error. Python 3.6+, standard library only: it runs in the image's python.
PROBE = """import importlib, importlib.util, json, sys
MARK = "@MARK@"
print(MARK + json.dumps({"python": sys.executable}), flush=True)
for name in sys.argv[1].split(","):
    record = {"framework": name, "version": None}
    try:
        if importlib.util.find_spec(name) is not None:
            record["version"] = str(getattr(importlib.import_module(name), "__version__", "") or "unknown")
    except Exception as exc:
        record["error"] = (type(exc).__name__ + ": " + str(exc))[:300]
    print(MARK + json.dumps(record), flush=True)
""".replace("@MARK@", MARK)


def stacks() -> dict[str, tuple[str, ...]]:
    """stack -> the frameworks a job on it imports (frameworks.FRAMEWORKS)."""
    found: dict[str, tuple[str, ...]] = {}
    for framework in FRAMEWORKS.values():
        found[framework.stack] = tuple(dict.fromkeys((*found.get(framework.stack, ()), *framework.needs)))
    return found


def python_of(template: dict[str, Any]) -> str:
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(PYTHON_ANNOTATION) or DEFAULT_PYTHON)


def command(python: str) -> str:
    """The probe, a shell command (`python` may be a name on the image's PATH)."""
    names = ",".join(sorted({name for needs in stacks().values() for name in needs}))
    return f"exec {shlex.quote(python)} -c {shlex.quote(PROBE)} {names}"


def read(output: str) -> dict[str, Any]:
    """The probe's output -> {"python", "frameworks": {stack: {framework: version}}, "stacks": {stack: {"python",
    "frameworks"}}, "errors": {framework: error}}; {"error"} when the python never answered."""
    python: str | None = None
    versions: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for record in marked_records(output, MARK):
        if "python" in record:
            python = record["python"]
        elif "framework" in record:
            versions[record["framework"]] = record.get("version")
            if record.get("error"):
                errors[record["framework"]] = record["error"]
    if python is None:
        return {"error": "its python did not answer"}
    return {"python": python, "errors": errors,
            "frameworks": {stack: {name: versions.get(name) for name in needs} for stack, needs in stacks().items()},
            "stacks": {stack: {"python": python, "frameworks": list(needs)} for stack, needs in stacks().items()}}
