"""node.yaml's prometheus_textfile: every `gpucheck node` run (Slurm's health check included) also writes its
metrics there for node_exporter's textfile collector, replaced whole; a textfile that cannot be written is a note,
never a changed verdict; a path node_exporter would not read is bad input (one line, exit 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.fakenvml import build_library, env_for, scenario_path
from support import run_gpucheck


@pytest.fixture
def node(fake_bin, tmp_path):
    fake_bin.add("dmesg", "[    0.000000] Linux version 6.1.0-18-amd64\n")
    libdir = build_library()

    def run(scenario: str, textfile: str, state: Path | None = None, fmt: str = "json"):
        config = tmp_path / "node.yaml"
        config.write_text("profile: generic\n" + (f"prometheus_textfile: {textfile}\n" if textfile else ""))
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config))
        if state is not None:
            env["GPUCHECK_STATE_DIR"] = str(state)
        return run_gpucheck(["node", "--only", "gpu.count", "gpu.ecc_errors", "--format", fmt], env)

    return run


def test_each_run_replaces_the_textfile_with_its_metrics(node, tmp_path):
    textfile = tmp_path / "node-exporter" / "gpucheck.prom"
    textfile.parent.mkdir()
    textfile.write_text("stale\n")
    done = node("ecc-uncorrected", str(textfile))
    assert done.returncode == 2, done.stderr
    text = textfile.read_text()
    assert "stale" not in text
    assert 'check="gpu.ecc_errors",status="fail"} 1' in text and "gpucheck_exit_code{" in text
    assert [p.name for p in textfile.parent.iterdir()] == ["gpucheck.prom"]  # no temporary file left for the collector


def test_a_textfile_that_cannot_be_written_is_a_note_and_the_verdict_stands(node, tmp_path):
    done = node("dgx-h100", str(tmp_path / "no-such-dir" / "gpucheck.prom"))
    assert done.returncode == 0, done.stderr
    assert f"gpucheck: note: the Prometheus textfile {tmp_path}/no-such-dir/gpucheck.prom is not written: No such " \
           "file or directory" in done.stderr


@pytest.mark.parametrize("value", ["gpucheck.prom", "/var/lib/prometheus/node-exporter/gpucheck.txt"])
def test_a_path_node_exporter_would_not_read_is_one_line_and_exit_3(node, value):
    done = node("dgx-h100", value)
    assert done.returncode == 3
    assert done.stderr.strip().endswith(f"'prometheus_textfile' is {value!r}: an absolute path ending in .prom, in "
                                        "the directory node_exporter's --collector.textfile.directory names")


def test_a_passive_run_carries_the_figures_of_the_last_active_pass(node, tmp_path, fake_bin):
    """Between two runs of active checks, the health check's textfile still says what the GPUs measured, and when."""
    import json

    state = tmp_path / "state"
    (state / "reports").mkdir(parents=True)
    kept = {"host": "n", "started": "2026-11-20T03:00:00Z", "exit_code": 0, "results": [
        {"check": "gpu.gemm", "status": "pass", "measured": {"GPU0": {"bf16_TFLOPS": 790.5}}},
        {"check": "gpu.count", "status": "pass", "measured": 8}]}
    (state / "reports" / "20261120T030000Z-pass-full.json").write_text(json.dumps(kept))
    (state / "reports" / "20261121T030000Z-fail-full.json").write_text(json.dumps(
        {**kept, "results": [{"check": "gpu.gemm", "status": "fail", "measured": {"GPU0": {"bf16_TFLOPS": 1.0}}}]}))
    textfile = tmp_path / "gpucheck.prom"
    done = node("dgx-h100", str(textfile), state=state)
    assert done.returncode == 0, done.stderr
    text = textfile.read_text()
    assert ('gpucheck_last_active_gpu_figure{host="' in text
            and 'check="gpu.gemm",gpu="GPU0",figure="bf16_TFLOPS"} 790.5' in text)  # the pass, not the later failure
    assert "gpucheck_last_active_pass_timestamp_seconds" in text
    assert not [line for line in text.splitlines()  # this run measured no GEMM: none is said to be its own
                if line.startswith("gpucheck_gpu_figure{") and 'check="gpu.gemm"' in line]
    printed = node("dgx-h100", "", state=state, fmt="prometheus").stdout  # --format prometheus carries them too
    assert 'check="gpu.gemm",gpu="GPU0",figure="bf16_TFLOPS"} 790.5' in printed
