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
    (["node", "--kubernetes", "--slurm"], "--kubernetes and --slurm each tell a scheduler"),
    (["node", "--kubeconfig", "/etc/kubernetes/admin.conf"], "--kubernetes-node and --kubeconfig need --kubernetes"),
    (["watch", "--kubernetes", "--slurm"], "--kubernetes and --slurm each tell a scheduler"),
    (["watch", "--kubernetes-node", "gpu-7"], "--kubernetes-node and --kubeconfig need --kubernetes"),
    (["node", "--kubernetes", "--scheduled", "weekly"], "or with --kubernetes in a Job's pod"),
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


# ---------------------------------------------------------------- the option types, the config shapes, the guard

@pytest.mark.parametrize("kind,text,value", [
    ("seconds", "60", 60.0), ("seconds", "0.5", 0.5), ("seconds", "1e3", 1000.0), ("seconds", "604800", 604800.0),
    ("seconds", ".25", 0.25), ("whole_number", "50", 50), ("whole_number", "+7", 7), ("port", "65535", 65535),
    ("port", "1", 1), ("fraction", "1", 1.0), ("fraction", "0.9", 0.9),
])
def test_option_types_take_ordinary_values(kind, text, value):
    from gpucheck import cli_types

    parsed = getattr(cli_types, kind)(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("kind,text,message", [
    ("seconds", "inf", "'inf' is not a number of seconds"), ("seconds", "NaN", "'NaN' is not a number of seconds"),
    ("seconds", "infinity", "'infinity' is not a number of seconds"),
    ("seconds", "1e309", "must be at most 604800 (one week)"), ("seconds", "0", "must be greater than 0"),
    ("seconds", "1e-320", "must be at least 0.001"), ("whole_number", "1.0", "'1.0' is not a whole number"),
    ("whole_number", "\u0663", "'\u0663' is not a whole number"),  # int() would take an Arabic-Indic 3
    ("whole_number", "1000001", "must be at most 1000000"), ("port", "65536", "must be at most 65535"),
    ("port", "-0", "must be greater than 0"), ("fraction", "0", "must be greater than 0"),
    ("fraction", "1.0000001", "must be at most 1"), ("size", "1025G", "must be at most 1T (1024G)"),
    ("size", "0M", "'0M' is not a size like 64M, 1G or 1048576"), ("size", "9" * 5000, "must be at most 1T (1024G)"),
])
def test_option_types_refuse_what_no_option_means(kind, text, message):
    import argparse

    from gpucheck import cli_types

    with pytest.raises(argparse.ArgumentTypeError) as refused:
        getattr(cli_types, kind)(text)
    assert str(refused.value) == message


@pytest.mark.parametrize("text,words", [
    ("stacks: [a]\n", "'stacks' must be a mapping"),
    ("profiles_dir: 123\n", "'profiles_dir' must be a string, not a number"),
    ("profile: [x]\n", "'profile' must be a string, not a list"),
    ("profile: {a: 1}\n", "'profile' must be a string, not a mapping"),
    ("stacks: {s: {python: p, frameworks: tensorflow}}\n", "'frameworks' must be a list"),
    ("stacks: {s: {python: p, frameworks: [{a: 1}]}}\n", "unknown framework(s) {'a': 1}"),
    ("stacks: {s: {python: p, frameworks: [torch], extra: 1}}\n", "stack 's' has unknown key(s) extra"),
    ("stacks: {s: [python]}\n", "stack 's' needs a 'python' path"),
    ("true: 1\n", "unknown key(s) True"),
    ("cluster_name: [lab]\n", "'cluster_name' must be a string, not a list"),
])
def test_node_yaml_shapes_are_config_errors(tmp_path, text, words):
    from gpucheck import config

    path = tmp_path / "node.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as refused:
        config.load(path)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_node_yaml_as_the_role_writes_it_loads(tmp_path):
    from gpucheck import config

    path = tmp_path / "node.yaml"
    path.write_text("profile: auto\nprofiles_dir: /etc/gpucheck/checks\nstacks:\n  tf-horovod:\n"
                    "    python: /opt/stacks/tf-horovod/bin/python\n    frameworks: [tensorflow, horovod]\n")
    site = config.load(path)
    assert site.profile == "auto" and site.profiles_dir == "/etc/gpucheck/checks"
    assert site.stacks == [config.Stack("tf-horovod", "/opt/stacks/tf-horovod/bin/python", ["tensorflow", "horovod"])]
    (tmp_path / "empty.yaml").write_text("profile:\nstacks:\n")
    assert config.load(tmp_path / "empty.yaml").stacks == [] and config.load(tmp_path / "empty.yaml").profile == "auto"
    assert site.cluster_name is None


def test_a_node_report_says_the_cluster_node_yaml_names(tmp_path):
    """The role writes the inventory's cluster_name into node.yaml; the report carries it, so the admin node's
    history records it in that cluster's store only (a report that names none says nothing)."""
    path = tmp_path / "node.yaml"
    path.write_text('cluster_name: "west-gpu"\nprofile: generic\n')
    env = {**os.environ, "GPUCHECK_CONFIG": str(path)}
    done = run_gpucheck(["node", "--only", "host.cpu", "--format", "json"], env)
    assert json.loads(done.stdout)["cluster_name"] == "west-gpu", done.stderr
    path.write_text("profile: generic\n")
    assert "cluster_name" not in json.loads(run_gpucheck(["node", "--only", "host.cpu", "--format", "json"],
                                                         env).stdout)


def test_whatever_escapes_a_command_is_one_line_and_exit_3(monkeypatch, capsys):
    from gpucheck import cli, main

    def boom(args):
        raise KeyError("gpu")
    monkeypatch.setitem(cli.HANDLERS, "checks", boom)
    monkeypatch.delenv("GPUCHECK_DEBUG", raising=False)
    assert main.main(["checks"]) == 3
    assert capsys.readouterr().err == "gpucheck: internal error: KeyError: 'gpu' (please report)\n"
    monkeypatch.setitem(cli.HANDLERS, "checks", lambda args: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert main.main(["checks"]) == 3 and capsys.readouterr().err == "gpucheck: interrupted\n"


# ---------------------------------------------------------------- the burn-in's options

@pytest.mark.parametrize("args,words", [
    (["node", "--burn-seconds", "0.5"], "must be at least 1"),
    (["node", "--burn-seconds", "0"], "must be greater than 0"),
    (["node", "--burn-seconds", "90000"], "must be at most 86400 (one day)"),
    (["node", "--burn-seconds", "soon"], "'soon' is not a number of seconds"),
    (["node", "--only", "gpu.burn", "--burn-seconds", "600"],
     "--burn-seconds (600) must be shorter than --bench-timeout (600)"),
    (["node", "--only", "gpu.memtest*"], "the GPU burn-in gpu.gemm"),
])
def test_bad_burn_in_options_are_one_line_and_exit_3(args, words):
    assert words in one_line_error(run_gpucheck(args))


def test_help_says_which_checks_are_active_and_how_long_the_burn_takes():
    text = " ".join(run_gpucheck(["node", "--help"]).stdout.split())
    for check in ("gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.p2p_bandwidth", "gpu.memtest",
                  "gpu.burn", "gpu.sdc", "bw.nccl_allreduce"):
        assert check in text
    assert "--burn-seconds SECONDS" in text and "default 60 s" in text and "(seconds, 1 to 86400 = one day)" in text


def test_checks_lists_the_burn_in_checks_as_active():
    lines = {line.split()[0]: line for line in run_gpucheck(["checks"]).stdout.splitlines()}
    for check in ("gpu.gemm", "gpu.memory_bandwidth", "gpu.host_bandwidth", "gpu.p2p_bandwidth", "gpu.memtest",
                  "gpu.burn", "gpu.sdc"):
        assert lines[check].endswith("[--full]"), lines.get(check)
