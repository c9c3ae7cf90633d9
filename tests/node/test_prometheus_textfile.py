"""node.yaml's prometheus_textfile: every `gpucheck node` run (Slurm's health check included) also writes its
metrics there for node_exporter's textfile collector, replaced whole; a textfile that cannot be written is a note,
never a changed verdict; a path node_exporter would not read is bad input (one line, exit 3)."""

from __future__ import annotations

import pytest

from lab.fakenvml import build_library, env_for, scenario_path
from support import run_gpucheck


@pytest.fixture
def node(fake_bin, tmp_path):
    fake_bin.add("dmesg", "[    0.000000] Linux version 6.1.0-18-amd64\n")
    libdir = build_library()

    def run(scenario: str, textfile: str):
        config = tmp_path / "node.yaml"
        config.write_text(f"profile: generic\nprometheus_textfile: {textfile}\n")
        env = env_for(scenario_path(scenario), libdir)
        env.update(PATH=fake_bin.path(), GPUCHECK_CONFIG=str(config))
        return run_gpucheck(["node", "--only", "gpu.count", "gpu.ecc_errors", "--format", "json"], env)

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
