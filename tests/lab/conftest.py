"""Fixtures of the lab's tests: a 3-host lab shared by the session (always torn down), and a
machine with no lab for the lifecycle tests. The lab needs root; without it these tests are skipped, and
fail under CI (labkit.lab_unavailable)."""

from __future__ import annotations

import pytest

from labkit import Lab, LabSession, lab_cli, require_root


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: integration tests that bring up the lab (root, network namespaces)")


@pytest.fixture(scope="session")
def lab_session():
    require_root()
    session = LabSession()
    try:
        yield session
    finally:
        lab_cli("down", check=False)


@pytest.fixture
def lab3(lab_session: LabSession) -> Lab:
    """The session's 3-host lab (node01..node03, scenarios as in SCENARIOS), up."""
    return lab_session.ensure_up()


@pytest.fixture
def no_lab(lab_session: LabSession) -> LabSession:
    """This machine with no lab up (the session lab is taken down first if it was up)."""
    lab_session.ensure_down()
    yield lab_session
    lab_cli("down", check=False)
