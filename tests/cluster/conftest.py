"""Fixtures of the cluster tests: one real sshd on 127.0.0.1 per module (several ports, one per
simulated host), fake agents per port. Nothing here touches any address but 127.0.0.1."""

from __future__ import annotations

import pytest
from cluster_helpers import LoopbackSshd, kill_strays


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = LoopbackSshd(tmp_path_factory.mktemp("sshd"), ports=6)
    try:
        yield server
    finally:
        server.stop()
        kill_strays(server)  # hung fake agents, by the pids they recorded
