"""Fixtures of the workload tests: the framework virtualenvs, built once per machine and cached.

A cold cache builds them here (see tests/workload_helpers.py for what and how long); the timings of the
build that made each venv are printed at the end of the run.
"""

from __future__ import annotations

import json

import pytest

from workload_helpers import TF_HOROVOD, TORCH, Stack

_USED: list[Stack] = []


@pytest.fixture(scope="session")
def tf_horovod() -> Stack:
    """tensorflow-cpu 2.15.1 + horovod 0.28.1 (MPI + Gloo, TF only)."""
    stack = TF_HOROVOD.ensure()
    _USED.append(stack)
    return stack


@pytest.fixture(scope="session")
def torch_stack() -> Stack:
    """torch 2.13.0 (CPU)."""
    stack = TORCH.ensure()
    _USED.append(stack)
    return stack


def pytest_terminal_summary(terminalreporter) -> None:
    for stack in _USED:
        how = "built in this run" if stack.cold else "cached; its build took"
        terminalreporter.write_line(f"workload venv {stack.name} ({stack.dir}): {how} "
                                    f"{json.dumps(stack.timings)}")
