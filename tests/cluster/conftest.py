"""Fixtures of the cluster tests: one real sshd on 127.0.0.1 per module (several ports, one per
simulated host), fake agents per port. Nothing here touches any address but 127.0.0.1."""

from __future__ import annotations

import pytest
from cluster_helpers import running_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    with running_sshd(tmp_path_factory.mktemp("sshd"), ports=6) as server:
        yield server
