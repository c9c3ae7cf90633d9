"""The lab's simulated GPU compute (lab/compute.py) reaches the agent on a GPU host and nowhere else (no root, no lab
needed): the agent's environment file names the fake CuPy, the lab's `gpucheck` reads that file before the agent
starts, and no golden image keeps either."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab import compute, config, golden, host


def env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_gpu_hosts_agent_environment_names_the_fake_cupy_and_an_admin_nodes_does_not() -> None:
    gpu_host, admin = env_lines(host.agent_env_file(True)), env_lines(host.agent_env_file(False))
    assert gpu_host["PYTHONPATH"] == compute.HOST_DIR and float(gpu_host["FAKECUPY_TFLOPS"]) == compute.TFLOPS
    assert gpu_host[config.SYSFS_ENV] == admin[config.SYSFS_ENV] == config.FAKE_SYSFS_DIR
    assert not any(name.startswith(("FAKECUPY_", "PYTHON")) for name in admin), admin
    assert (compute.SOURCE / "cupy" / "__init__.py").is_file()  # what the host binds at HOST_DIR


def test_the_labs_gpucheck_starts_the_agent_with_that_environment_and_the_arguments_intact(tmp_path: Path) -> None:
    env_file, agent = tmp_path / "default-gpucheck", tmp_path / "agent"
    env_file.write_text(host.agent_env_file(True))
    agent.write_text('#!/bin/sh\necho "PYTHONPATH=$PYTHONPATH TFLOPS=$FAKECUPY_TFLOPS"\nprintf "[%s]" "$@"\n')
    agent.chmod(0o755)
    shim = tmp_path / "gpucheck"
    shim.write_text(compute.agent_shim().replace(compute.AGENT_ENV_FILE, str(env_file))
                    .replace(compute.AGENT_LINK, str(agent)))
    shim.chmod(0o755)
    done = subprocess.run([str(shim), "node", "--only", "gpu.gemm gpu.burn"], capture_output=True, text=True,
                          timeout=30, check=True, env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.splitlines() == [f"PYTHONPATH={compute.HOST_DIR} TFLOPS={compute.TFLOPS}",
                                        "[node][--only][gpu.gemm gpu.burn]"]


def test_no_golden_image_keeps_the_labs_gpucheck_or_the_mount_point(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    shim = upper / compute.AGENT_SHIM.lstrip("/")
    shim.parent.mkdir(parents=True)
    shim.write_text(compute.agent_shim())
    mount_point = upper / compute.HOST_DIR.lstrip("/")
    mount_point.mkdir(parents=True)
    golden.clean_layer(upper)
    assert not shim.exists() and not mount_point.exists() and not mount_point.parent.exists()
