"""`pip install .` in a fresh virtualenv gives a working `gpucheck` with its profiles."""

from __future__ import annotations

import subprocess
import venv

from support import ROOT


def test_pip_install_in_a_fresh_venv(tmp_path):
    venv.create(tmp_path / "venv", with_pip=True)
    pip = tmp_path / "venv" / "bin" / "pip"
    installed = subprocess.run([str(pip), "install", "-q", str(ROOT)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    gpucheck = tmp_path / "venv" / "bin" / "gpucheck"
    version = subprocess.run([str(gpucheck), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("gpucheck 0.")
    profiles = subprocess.run([str(gpucheck), "profiles", "--no-detect"], capture_output=True, text=True, timeout=60)
    listed = {line.split()[0] for line in profiles.stdout.splitlines() if line.strip()}
    assert {"dgx-h100", "hgx-h200", "dgx-a100", "dgx1-v100", "pcie-1gpu", "legacy-kepler-pascal", "generic",
            "lab"} <= listed
    node = subprocess.run([str(gpucheck), "node", "--only", "host", "--profile", "dgx-h100", "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert node.returncode in (0, 1, 2), node.stderr
    assert '"profile": "dgx-h100"' in node.stdout
