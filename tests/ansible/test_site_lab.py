"""site.yml in check mode on a fresh lab host (Debian 12 in a network namespace, from the bare base, packages
through the lab's proxy): what a user sees before the first real run. site.yml's real runs are the golden image's
(`python3 -m lab build`, on a fresh host) and the cluster lab's, on hosts from it (tests/cluster_lab/
test_a_site_yml.py: what it changes, the result on a host, a wrong package)."""

from __future__ import annotations

import re

import pytest

from labkit import INVENTORY, lab_cli, require_root

pytestmark = pytest.mark.lab
RECAP_RE = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(output: str) -> dict[str, int]:
    return {m[0]: int(m[2]) + 1000 * (int(m[3]) + int(m[4])) for m in RECAP_RE.findall(output)}


def test_check_mode_on_a_fresh_host(ansible_repo):
    require_root()
    lab_cli("down", check=False)
    try:
        lab_cli("up", "--hosts", "1", "--no-golden", timeout=600)
        done = ansible_repo.run("ansible-playbook", "-i", str(INVENTORY), "site.yml", "--check", "--skip-tags",
                                "validate", timeout=2400)
        assert "PLAY RECAP" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
        assert done.returncode == 0, done.stdout[-4000:]
        assert recap(done.stdout)["node01"] < 1000  # no failed or unreachable task
    finally:
        lab_cli("down", check=False)
