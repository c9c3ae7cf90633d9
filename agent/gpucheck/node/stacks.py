"""The framework stacks as the node checks see them: the framework names, how to configure stacks,
and where a stack's packages live."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

from ..config import HOROVOD, TENSORFLOW, TORCH, Stack
from ..process import run

BINDINGS = (TENSORFLOW, TORCH)  # the frameworks Horovod has a binding for, in the probe's order
NAMES = {TENSORFLOW: "TensorFlow", HOROVOD: "Horovod", TORCH: "PyTorch"}

CONFIG_HINT = ("no framework stacks configured: list each framework virtualenv under `stacks:` in "
               "/etc/gpucheck/node.yaml (written by site.yml's gpucheck_agent role), e.g. "
               "`stacks: {tf-horovod: {python: /opt/stacks/tf-horovod/bin/python, "
               "frameworks: [tensorflow, horovod]}}`")

SITE_SNIPPET = "import json, sys; print(json.dumps([p for p in sys.path if p]))"


def stack_site_packages(stack: Stack, timeout: float) -> tuple[list[str], str | None]:
    """The stack interpreter's own site-packages (its sys.path, PYTHONPATH views included).

    Falls back to globbing under the interpreter's prefix when it cannot be run; the error is returned.
    """
    done = run([stack.python, "-c", SITE_SNIPPET], timeout=min(timeout, 30))
    error = None
    paths: list[str] = []
    if done.ok:
        try:
            paths = [p for p in json.loads(done.stdout.strip().splitlines()[-1])
                     if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
        except (ValueError, IndexError):
            error = f"{stack.python} printed no sys.path"
    else:
        error = done.describe_failure()
    if not paths:
        prefix = Path(stack.python).parent.parent  # not resolved: a venv's python is a symlink
        paths = sorted(glob.glob(str(prefix / "lib*" / "python3*" / "site-packages")))
    seen: list[str] = []
    for path in paths:
        if os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen, error
