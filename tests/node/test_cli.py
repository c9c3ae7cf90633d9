"""The command line as a user meets it: bad input is one line and exit 3, never a traceback."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from gpucheck.model import Result, Status, exit_code
from support import REAL, run_gpucheck


def one_line_error(done) -> str:
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("args,words", [
    (["node", "--profile", "no-such-profile"], "unknown profile 'no-such-profile'"),
    (["node", "--profile", "/nonexistent/p.yaml"], "does not exist"),
    (["node", "--only", "gpu.nonsense"], "no check matches 'gpu.nonsense'"),
    (["node", "--only", "bw"], "need --full"),
    (["node", "--timeout", "soon"], "is not a number of seconds"),
    (["node", "--format", "pdf"], "invalid choice"),
    (["node", "--frobnicate"], "unrecognized arguments"),
    (["parse", "nccl-tests", "/nonexistent.log"], "cannot read /nonexistent.log"),
    (["parse", "no-such-kind", "-"], "invalid choice"),
    (["node", "--config", "/nonexistent/node.yaml"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_3(args, words):
    assert words in one_line_error(run_gpucheck(args))


def test_garbage_to_parse_is_rejected(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(4096))
    assert "garbage.bin" in one_line_error(run_gpucheck(["parse", "ibstat", str(garbage)]))
    done = run_gpucheck(["parse", "perftest", "-"], stdin="hello\nworld\n")
    one_line_error(done)


def test_broken_profile_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu:\n  count: eight\n")
    assert "'gpu.count' must be int" in one_line_error(run_gpucheck(["node", "--profile", str(bad)]))
    typo = tmp_path / "typo.yaml"
    typo.write_text("gpu:\n  cuont: 8\n")
    assert "unknown key 'gpu.cuont'" in one_line_error(run_gpucheck(["node", "--profile", str(typo)]))


def test_parse_prints_json_from_a_real_capture():
    done = run_gpucheck(["parse", "nccl-tests", str(REAL / "nccl-tests" / "h100-2node-16gpu-allreduce-gcp-a3mega.txt")])
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["avg_busbw_GBps"] == pytest.approx(70.742)
    assert data["max_busbw_GBps"] == pytest.approx(338.82)


def test_help_and_version():
    done = run_gpucheck(["--help"])
    assert done.returncode == 0 and "exit codes" in done.stdout and "gpucheck node --full" in done.stdout
    node_help = run_gpucheck(["node", "--help"])
    assert "--only" in node_help.stdout and "--timeout" in node_help.stdout
    version = run_gpucheck(["--version"])
    assert version.returncode == 0 and version.stdout.startswith("gpucheck ")


def test_checks_lists_every_check_id():
    done = run_gpucheck(["checks"])
    ids = {line.split()[0] for line in done.stdout.splitlines()}
    assert {"gpu.count", "gpu.xid", "ib.ports", "bw.nccl_allreduce", "host.memory", "libs.nccl",
            "frameworks.horovod"} <= ids


def test_exit_code_convention():
    def results(*statuses):
        return [Result(f"c{i}", s) for i, s in enumerate(statuses)]
    assert exit_code(results(Status.PASS, Status.SKIP)) == 0
    assert exit_code(results(Status.PASS, Status.WARN)) == 1
    assert exit_code(results(Status.WARN, Status.FAIL, Status.ERROR)) == 2
    assert exit_code(results(Status.PASS, Status.ERROR)) == 3


def test_output_formats_render_the_same_results(tmp_path):
    env = dict(os.environ, GPUCHECK_CONFIG=str(tmp_path / "node.yaml"), LD_LIBRARY_PATH=str(tmp_path))
    (tmp_path / "node.yaml").write_text("{}\n")
    args = ["node", "--only", "host", "--profile", "generic"]
    junit_file = tmp_path / "out" / "junit.xml"
    done = run_gpucheck([*args, "--format", "junit", "--output", str(junit_file)], env)
    assert done.returncode == 0 and "report in" in done.stderr
    suite = ET.parse(junit_file).getroot()
    assert suite.tag == "testsuite" and {c.get("name") for c in suite} == {"host.memory", "host.cpu", "host.disk"}
    prom = run_gpucheck([*args, "--format", "prometheus"], env).stdout
    assert 'check="host.disk",status="pass"} 1' in prom and "gpucheck_exit_code" in prom
    text = run_gpucheck([*args], env).stdout
    assert "host.disk" in text and "exit code 0" in text
