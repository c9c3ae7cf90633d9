"""The command line under faults, run as a user runs it (a separate `python -m gpucheck` process): bad
numbers, a node.yaml of the wrong shape, --output at special files, endless input, a reader that goes away,
an ASCII-only terminal, an internal error. Each gives its exit code and its exact one line, never a
traceback; --output leaves each kind of file as it was (a device a device, a link a link, a mode its mode)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpucheck import files
from gpucheck.report.cluster import writer
from support import ROOT, run_gpucheck

HOST_ONLY = ["node", "--only", "host", "--profile", "generic"]  # no GPU, no NVML, always runs
ERR = "gpucheck: error: "


def node_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment where the agent finds no node.yaml of this machine and no NVML."""
    (tmp_path / "node.yaml").write_text("{}\n")
    return dict(os.environ, GPUCHECK_CONFIG=str(tmp_path / "node.yaml"), LD_LIBRARY_PATH=str(tmp_path), **extra)


def one_line(done: subprocess.CompletedProcess, code: int = 3) -> str:
    """The one line on stderr of a run that exited `code`, with nothing on stdout."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == "", done.stdout
    return lines[0]


# ---------------------------------------------------------------- numbers: one place reads them (cli_types)

WEEK = "must be at most 604800 (one week)"
SECONDS = "is not a number of seconds"


@pytest.mark.parametrize("args,line", [
    (["node", "--timeout", "inf"], f"argument --timeout: 'inf' {SECONDS}"),
    (["node", "--timeout", "nan"], f"argument --timeout: 'nan' {SECONDS}"),
    (["node", "--timeout=-inf"], f"argument --timeout: '-inf' {SECONDS}"),
    (["node", "--bench-timeout", "inf"], f"argument --bench-timeout: 'inf' {SECONDS}"),
    (["node", "--timeout", "1e999"], f"argument --timeout: {WEEK}"),
    (["node", "--timeout", "604801"], f"argument --timeout: {WEEK}"),
    (["node", "--timeout", "-1"], "argument --timeout: must be greater than 0"),
    (["node", "--timeout", "0.0001"], "argument --timeout: must be at least 0.001"),
    (["node", "--timeout", "1_0"], f"argument --timeout: '1_0' {SECONDS}"),
    (["node", "--timeout", " 5"], f"argument --timeout: ' 5' {SECONDS}"),
    (["net", "serve", "--port", "70000"], "argument --port: must be at most 65535"),
    (["net", "serve", "--port", "0"], "argument --port: must be greater than 0"),
    (["net", "serve", "--timeout", "nan"], f"argument --timeout: 'nan' {SECONDS}"),
    (["net", "send", "h", "--port", "1.5"], "argument --port: '1.5' is not a port number"),
    (["net", "send", "h", "--seconds", "inf"], f"argument --seconds: 'inf' {SECONDS}"),
    (["cluster", "--timeout", "inf"], f"argument --timeout: 'inf' {SECONDS}"),
    (["cluster", "--host-timeout", "inf"], f"argument --host-timeout: 'inf' {SECONDS}"),
    (["cluster", "--host-timeout", "1e6"], f"argument --host-timeout: {WEEK}"),
    (["cluster", "--stage-timeout", "inf"], f"argument --stage-timeout: 'inf' {SECONDS}"),
    (["cluster", "--pair-seconds", "inf"], f"argument --pair-seconds: 'inf' {SECONDS}"),
    (["cluster", "--connect-timeout", "nan"], f"argument --connect-timeout: 'nan' {SECONDS}"),
    (["cluster", "--forks", "2.5"], "argument --forks: '2.5' is not a whole number"),
    (["cluster", "--forks", "1" + "0" * 40], "argument --forks: must be at most 1000000"),
    (["cluster", "--forks", "9" * 5000], "argument --forks: must be at most 1000000"),
    (["cluster", "--smoke-steps", "1e3"], "argument --smoke-steps: '1e3' is not a whole number"),
    (["cluster", "--network-sample", "-3"], "argument --network-sample: must be greater than 0"),
    (["cluster", "--straggler-fraction", "1.5"], "argument --straggler-fraction: must be at most 1"),
    (["cluster", "--straggler-fraction", "inf"], "argument --straggler-fraction: 'inf' is not a number"),
    (["cluster", "--pair-fraction", "nan"], "argument --pair-fraction: 'nan' is not a number"),
    (["cluster", "--scaling-efficiency-min", "0"], "argument --scaling-efficiency-min: must be greater than 0"),
    (["cluster", "--allreduce-size", "2000G"], "argument --allreduce-size: must be at most 1T (1024G)"),
], ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_a_number_out_of_bounds_is_one_line_and_exit_3(args, line):
    assert one_line(run_gpucheck(args)) == f"{ERR}{line} (see --help)"


def test_help_says_the_bounds():
    node = run_gpucheck(["node", "--help"]).stdout
    assert "604800 = one week" in " ".join(node.split())
    serve = run_gpucheck(["net", "serve", "--help"]).stdout
    assert "(1 to 65535)" in serve
    cluster = " ".join(run_gpucheck(["cluster", "--help"]).stdout.split())
    assert "--host-timeout SECONDS a host with no report after this is timed out (default: 300) (seconds, 0.001 " \
           "to 604800 = one week)" in cluster
    assert "--forks N hosts checked at once (default: 50) (1 to 1000000)" in cluster


# ---------------------------------------------------------------- node.yaml of the wrong shape

@pytest.mark.parametrize("yaml_text,reason", [
    ("stacks: [a]\n", "'stacks' must be a mapping of name to {python, frameworks}, not a list"),
    ("profiles_dir: 123\n", "'profiles_dir' must be a string, not a number"),
    ("profile: [x]\n", "'profile' must be a string, not a list"),
    ("stacks: {s: {python: p, frameworks: tensorflow}}\n",
     "stack 's': 'frameworks' must be a list like [tensorflow, horovod], not a string"),
    ("stacks: {s: {python: p, framework: [torch]}}\n", "stack 's' has unknown key(s) framework"),
    ("1: a\nprofile: auto\n", "unknown key(s) 1"),
    (b"profile: \xff\xfe\n", "is not UTF-8 text (byte 0xff at offset 9)"),
])
def test_node_yaml_of_the_wrong_shape_is_one_line(tmp_path, yaml_text, reason):
    env = node_env(tmp_path)
    bad = tmp_path / "bad.yaml"
    if isinstance(yaml_text, bytes):
        bad.write_bytes(yaml_text)
        expected = f"{ERR}{bad} {reason}"
    else:
        bad.write_text(yaml_text)
        expected = f"{ERR}{bad}: {reason}"
    assert one_line(run_gpucheck([*HOST_ONLY, "--config", str(bad)], env)) == expected


# ---------------------------------------------------------------- --output: what the path names stays what it is

def write_report(tmp_path: Path, output: Path | str, umask: int = 0o022, stdout=subprocess.PIPE
                 ) -> subprocess.CompletedProcess:
    env = node_env(tmp_path)
    env["PYTHONPATH"] = str(ROOT / "agent")
    code = f"import os, sys, runpy; os.umask({umask}); sys.argv = ['gpucheck', *sys.argv[1:]]; " \
           "runpy.run_module('gpucheck', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *HOST_ONLY, "--format", "prometheus", "--output", str(output)],
                          stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=60)


def written(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "report in" in done.stderr


def test_an_existing_file_keeps_its_mode(tmp_path):
    prom = tmp_path / "gpucheck.prom"
    prom.write_text("old\n")
    prom.chmod(0o644)  # node_exporter reads it as another user
    written(write_report(tmp_path, prom, umask=0o077))
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert "gpucheck_exit_code" in prom.read_text()


def test_a_new_file_is_0666_less_the_umask(tmp_path):
    new = tmp_path / "sub" / "new.prom"
    written(write_report(tmp_path, new, umask=0o027))
    assert stat.S_IMODE(new.stat().st_mode) == 0o640 and stat.S_ISREG(new.stat().st_mode)


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "node.prom"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "node.prom"
    link.symlink_to(Path("real") / "node.prom")
    written(write_report(tmp_path, link))
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "node.prom")
    assert "gpucheck_exit_code" in target.read_text() and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["node.prom"]  # no temporary file left


OTHER_UID = 4242  # a user who is not us: os.lchown gives the planted link to them (the tests run as root)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root (lchown)")
@pytest.mark.parametrize("planted", ["the-file", "the-directory"])
def test_a_link_another_user_planted_in_a_shared_directory_is_not_followed(tmp_path, planted):
    """A shared, world-writable report directory: root's --output followed another user's link and overwrote
    its target (gpucheck resolves links itself, so the kernel's protected_symlinks guard never applied)."""
    common = tmp_path / "common"
    common.mkdir()
    common.chmod(0o1777)
    victim = tmp_path / "etc-shadow"
    victim.write_text("root:secret\n")
    if planted == "the-file":
        link, output = common / "node.prom", common / "node.prom"
        link.symlink_to(victim)
    else:  # a link to a directory on the way: the report directory itself
        (tmp_path / "etc").mkdir()
        link, output = common / "reports", common / "reports" / "node.prom"
        link.symlink_to(tmp_path / "etc")
        victim = tmp_path / "etc" / "node.prom"
        victim.write_text("root:secret\n")
    os.lchown(link, OTHER_UID, OTHER_UID)
    done = write_report(tmp_path, output)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr == (f"gpucheck: error: cannot write {output}: {link} is a link another user made in a "
                           "directory others can write: not followed\n")
    assert victim.read_text() == "root:secret\n"
    os.lchown(link, os.geteuid(), os.getegid())  # our own link there is followed as before
    written(write_report(tmp_path, output))
    assert "gpucheck_exit_code" in victim.read_text()


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "node.prom"
    link.symlink_to("made.prom")
    written(write_report(tmp_path, link))
    assert link.is_symlink() and "gpucheck_exit_code" in (tmp_path / "made.prom").read_text()


def device(tmp_path: Path, kind: int, major: int, minor: int) -> Path:
    path = tmp_path / f"dev{major}-{minor}"
    try:
        os.mknod(path, kind | 0o666, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_a_character_device_is_written_not_replaced(tmp_path):
    null = device(tmp_path, stat.S_IFCHR, 1, 3)  # a /dev/null of our own: the real one is not ours to risk
    done = write_report(tmp_path, null)
    if "Permission denied" in done.stderr:
        pytest.skip("this filesystem is mounted nodev")
    written(done)
    mode = null.stat().st_mode
    assert stat.S_ISCHR(mode) and null.stat().st_rdev == os.makedev(1, 3)


def test_a_block_device_is_refused(tmp_path):
    loop = device(tmp_path, stat.S_IFBLK, 7, 0)
    done = write_report(tmp_path, loop)
    assert one_line(done) == f"{ERR}cannot write {loop}: a block device, not written"
    assert stat.S_ISBLK(loop.stat().st_mode)


def test_a_fifo_with_a_reader_gets_the_report(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    done = write_report(tmp_path, fifo)
    while done.returncode == 3 and "no reader" in done.stderr and time.monotonic() < deadline:
        done = write_report(tmp_path, fifo)  # the reader thread had not opened it yet
    written(done)
    reader.join(10)
    assert b"gpucheck_exit_code" in got[0] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    assert one_line(write_report(tmp_path, fifo)) == f"{ERR}cannot write {fifo}: a FIFO with no reader"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_link_into_proc_appends_to_the_callers_file(tmp_path):
    """--output /dev/stdout >> log: /dev/stdout -> /proc/self/fd/1 is the caller's open file, to be appended to,
    not replaced. A link of our own to /proc/self/fd/1 stands in for /dev/stdout (a regression must not be
    able to replace the machine's /dev/stdout)."""
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    log = tmp_path / "log.txt"
    log.write_text("before\n")
    with log.open("a") as out:
        done = write_report(tmp_path, stdout, stdout=out)
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text.startswith("before\n") and "gpucheck_exit_code" in text and stdout.is_symlink()


@pytest.mark.parametrize("name,reason", [
    ("a-directory", "Is a directory"),
    ("missing-dir/", "Is a directory"),
    ("a-file/below", "Not a directory"),
])
def test_an_output_that_is_no_file_is_one_line(tmp_path, name, reason):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("")
    target = f"{tmp_path}/{name}"
    assert one_line(write_report(tmp_path, target)) == f"{ERR}cannot write {target}: {reason}"
    assert not (tmp_path / "missing-dir").exists()


def test_an_empty_output_name_is_a_usage_error(tmp_path):
    done = write_report(tmp_path, "")
    assert one_line(done) == f"{ERR}argument --output: needs a file name (see --help)"


def test_the_cluster_report_keeps_a_mode_set_between_stages(tmp_path):
    report = writer.ReportWriter(tmp_path / "r")
    node = tmp_path / "r" / "nodes" / "node01.json"
    report.node("node01", {"host": "node01", "stage": 1})
    assert stat.S_IMODE(node.stat().st_mode) == 0o666 & ~files.UMASK
    node.chmod(0o640)  # the site narrowed it: the next stage's rewrite keeps that
    report.node("node01", {"host": "node01", "stage": 2})
    assert stat.S_IMODE(node.stat().st_mode) == 0o640 and json.loads(node.read_text())["stage"] == 2


# ---------------------------------------------------------------- parse: bounded input, a reader that goes away

def test_parse_reads_at_most_64_mib(tmp_path):
    assert one_line(run_gpucheck(["parse", "xid", "/dev/zero"])) == (
        f"{ERR}/dev/zero: more than 64 MiB; gpucheck parse reads a tool's output, not this")
    sparse = tmp_path / "huge.log"
    with sparse.open("wb") as out:
        out.truncate(64 * 1024 * 1024 + 1)
    assert one_line(run_gpucheck(["parse", "xid", str(sparse)])) == (
        f"{ERR}{sparse}: more than 64 MiB; gpucheck parse reads a tool's output, not this")


def test_parse_into_a_reader_that_goes_away_is_quiet(tmp_path):
    log = tmp_path / "kern.log"
    line = "[ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    log.write_text(line * 5000)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
    shell = f"'{sys.executable}' -m gpucheck parse xid '{log}' | head -1; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=60)
    assert done.stderr == "" and done.stdout.strip() in ("{", "[")
    assert done.returncode == 3


def test_a_reader_that_goes_away_before_the_last_flush_is_quiet(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"))
    proc = subprocess.Popen([sys.executable, "-m", "gpucheck", "checks"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before it writes anything: its whole output is in the buffer at exit
    _, err = proc.communicate(timeout=60)
    assert err == b"" and proc.returncode == 3


# ---------------------------------------------------------------- a terminal that cannot show "—" and "…"

@pytest.mark.parametrize("fmt", ["text", "prometheus"])
def test_an_ascii_terminal_gets_ascii(tmp_path, fmt):
    env = node_env(tmp_path, PYTHONIOENCODING="ascii", LC_ALL="C")
    done = run_gpucheck([*HOST_ONLY, "--format", fmt], env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    if fmt == "text":
        assert done.stdout.startswith("gpucheck node on ") and " - profile generic" in done.stdout
        assert " - exit code 0" in done.stdout


def test_an_ascii_terminal_gets_the_summary_line(tmp_path):
    env = node_env(tmp_path, PYTHONIOENCODING="ascii", LC_ALL="C")
    done = run_gpucheck([*HOST_ONLY, "--output", str(tmp_path / "r.txt")], env)
    assert done.returncode == 0 and done.stderr.startswith("gpucheck node: 1 pass, 2 skip - exit 0; report in ")
    assert "\u2014" in (tmp_path / "r.txt").read_text(encoding="utf-8")  # the file is UTF-8 whatever the terminal


# ---------------------------------------------------------------- whatever else escapes: exit 3, not 1

BOOM = ("import sys\nfrom gpucheck import cli, main\n"
        "def boom(args):\n    raise RuntimeError('disk on fire\\nsecond line')\n"
        "cli.HANDLERS['checks'] = boom\nsys.exit(main.main(['checks']))\n")


@pytest.mark.parametrize("debug", ["", "1"])
def test_an_internal_error_is_one_line_and_exit_3(debug):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"), GPUCHECK_DEBUG=debug)
    done = subprocess.run([sys.executable, "-c", BOOM], capture_output=True, text=True, env=env, timeout=60)
    line = "gpucheck: internal error: RuntimeError: disk on fire second line (please report)"
    if debug:
        assert done.returncode == 3 and "Traceback" in done.stderr and done.stderr.splitlines()[-1] == line
    else:
        assert one_line(done) == line


def test_config_errors_are_refused_before_the_backstop(tmp_path):
    """The shapes above are ConfigErrors (`gpucheck: error:`), not caught as internal errors."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("stacks: [a]\n")
    done = run_gpucheck([*HOST_ONLY, "--config", str(bad), "--format", "json"], node_env(tmp_path))
    assert one_line(done).startswith(ERR) and "internal error" not in done.stderr  # and nothing on stdout


@pytest.mark.parametrize(("args", "line"), [
    (["node", "--profile", "{fifo}", "--only", "host"], "cannot read profile {fifo}: a FIFO, not a regular file"),
    (["node", "--config", "{fifo}", "--only", "host"], "cannot read {fifo}: a FIFO, not a regular file"),
    (["node", "--profile", "{dir}/", "--only", "host"], "cannot read profile {dir}: a directory, not a regular file"),
    (["parse", "xid", "{fifo}"], "{fifo}: not xid output: empty input"),  # a FIFO nobody feeds reads as empty
    (["cluster", "-i", "{fifo}"], "inventory {fifo} is a FIFO, not a file or a directory"),
])
def test_a_named_file_that_is_not_a_file_is_one_line_never_a_hang(tmp_path, args, line):
    """A FIFO where a file should be: `--config FIFO`, `parse xid FIFO` and `cluster -i FIFO` waited forever for a
    writer; a FIFO or a directory as --profile was "does not exist"."""
    fifo, folder = tmp_path / "fifo", tmp_path / "dir"
    os.mkfifo(fifo)
    folder.mkdir()
    fill = {"fifo": str(fifo), "dir": str(folder)}
    done = run_gpucheck([a.format(**fill) for a in args], node_env(tmp_path), timeout=60)  # a hang: TimeoutExpired
    assert (done.returncode, done.stdout) == (3, "") and "Traceback" not in done.stderr
    assert done.stderr == f"gpucheck: error: {line.format(**fill)}\n"


def test_parse_reads_a_process_substitution(tmp_path):
    """`gpucheck parse xid <(journalctl -k)`: a pipe with a writer is read, not refused."""
    done = subprocess.run(["bash", "-c", f"PYTHONPATH={ROOT / 'agent'} {sys.executable} -m gpucheck parse xid "
                           "<(printf '[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, off the bus\\n')"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"] == {"79": 1}
