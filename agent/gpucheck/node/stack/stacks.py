"""The framework stacks as the node checks see them: the framework names, how to configure stacks,
where a stack's packages live, and which stack interpreters stopped answering in this run."""

from __future__ import annotations

import glob
import json
import os
import threading
from pathlib import Path

from ...config import HOROVOD, TENSORFLOW, TORCH, Stack
from ...process import Completed, run

BINDINGS = (TENSORFLOW, TORCH)  # the frameworks Horovod has a binding for, in the probe's order
NAMES = {TENSORFLOW: "TensorFlow", HOROVOD: "Horovod", TORCH: "PyTorch"}

CONFIG_HINT = ("no framework stacks configured: list each framework virtualenv under `stacks:` in "
               "/etc/gpucheck/node.yaml (written by site.yml's gpucheck_agent role), e.g. "
               "`stacks: {tf-horovod: {python: /opt/stacks/tf-horovod/bin/python, "
               "frameworks: [tensorflow, horovod]}}`")

SITE_SNIPPET = "import json, sys; print(json.dumps([p for p in sys.path if p]))"


def site_packages_from(stack: Stack, done: Completed | None, error: str | None = None) -> tuple[list[str], str | None]:
    """The stack interpreter's own site-packages, from its sys.path as it printed it (SITE_SNIPPET; PYTHONPATH
    views included). When it could not be run or was not asked (done None, error says why): the folders
    under its prefix, and the error."""
    paths: list[str] = []
    if done is not None and done.ok:
        try:
            paths = [p for p in json.loads(done.stdout.strip().splitlines()[-1])
                     if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
        except (ValueError, IndexError):
            error = f"{stack.python} printed no sys.path"
    elif done is not None:
        error = done.describe_failure()
    if not paths:
        prefix = Path(stack.python).parent.parent  # not resolved: a venv's python is a symlink
        paths = sorted(glob.glob(str(prefix / "lib*" / "python3*" / "site-packages")))
    seen: list[str] = []
    for path in paths:
        if os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen, error


class Interpreters:
    """What one run learnt about the stacks' interpreters, shared by the collectors that run them (the library
    search, libs.ldd, the framework probe): each one's site-packages, asked once, and the ones that did not
    answer within their limit. Such an interpreter is not run again in this run: one hung python costs
    one limit, not one per use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hung: dict[str, float] = {}  # python -> the limit it did not answer within
        self.sites: dict[str, tuple[list[str], str | None]] = {}  # python -> site_packages's answer

    def refusal(self, python: str) -> str | None:
        """Why `python` is not run again, or None when it may be."""
        with self.lock:
            limit = self.hung.get(python)
        return None if limit is None else f"not asked: {python} did not answer within {limit:g} s earlier in this run"

    def did_not_answer(self, python: str, limit: float) -> None:
        with self.lock:
            self.hung.setdefault(python, limit)

    def site_packages(self, stack: Stack, timeout: float) -> tuple[list[str], str | None]:
        """The stack's site-packages (site_packages_from), asked once per interpreter and run, and not of one
        that did not answer before."""
        refusal = self.refusal(stack.python)
        if refusal:
            return site_packages_from(stack, None, refusal)
        with self.lock:
            known = self.sites.get(stack.python)
        if known is not None:
            return known
        limit = min(timeout, 30)
        done = run([stack.python, "-c", SITE_SNIPPET], timeout=limit)
        if done.timed_out:
            self.did_not_answer(stack.python, limit)
            answer = site_packages_from(stack, None, f"{stack.python} did not answer within {limit:g} s (killed)")
        else:
            answer = site_packages_from(stack, done)
        with self.lock:
            self.sites.setdefault(stack.python, answer)
        return answer
