"""One control plane for every test here (tests/kubekit.py): they make Nodes of their own names."""

from __future__ import annotations

import pytest

import kubekit


@pytest.fixture(scope="session")
def kube(tmp_path_factory):
    with kubekit.running(tmp_path_factory.mktemp("kube")) as plane:
        yield plane
