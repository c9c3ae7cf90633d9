"""cluster/ssh/client.py and the network stage over a real sshd on 127.0.0.1 (tests/cluster's LoopbackSshd):
commands with timeouts that end on the node, background commands waited for and killed, file copies,
and one real pair measured with `gpucheck net`; ssh_background.Background also on a fake channel.
Nothing here touches any address but 127.0.0.1."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster_helpers import LoopbackSshd, alive, running_sshd  # noqa: E402
from cluster_lab_helpers import ROOT, make_ctx  # noqa: E402

from gpucheck.cluster.context import Options  # noqa: E402
from gpucheck.cluster.inventory import Host  # noqa: E402
from gpucheck.cluster.ssh import background as ssh_background  # noqa: E402
from gpucheck.cluster.ssh import client as ssh  # noqa: E402
from gpucheck.cluster.ssh.result import Remote  # noqa: E402
from gpucheck.cluster.stages import network  # noqa: E402
from gpucheck.model import Status  # noqa: E402


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    with running_sshd(tmp_path_factory.mktemp("sshd"), ports=2) as server:
        yield server


def host(sshd: LoopbackSshd, name: str = "n1", index: int = 0) -> Host:
    return Host(name, "127.0.0.1", sshd.ports[index], "root", str(sshd.client_key), (str(sshd.known_hosts),), True)


def test_run_quotes_and_returns_output_and_exit(sshd: LoopbackSshd) -> None:
    done = ssh.run(host(sshd), Options(), ssh.command(["sh", "-c", "echo \"$1\"; exit 4", "-", "a b; $(x)"]), 20)
    assert done.stdout == "a b; $(x)\n" and done.exit == 4 and done.error is None and not done.ok


def test_run_timeout_ends_the_command_on_the_node(sshd: LoopbackSshd, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    began = time.monotonic()
    done = ssh.run(host(sshd), Options(), f"echo $$ > {pidfile}; exec sleep 300", 2)
    assert done.timed_out and "did not finish within 2 s" in done.error
    assert time.monotonic() - began < 15
    time.sleep(0.5)
    assert not alive(int(pidfile.read_text()))


def test_unreachable_host_is_a_result(sshd: LoopbackSshd) -> None:
    gone = Host("gone", "127.0.0.1", 1, "root", str(sshd.client_key), (str(sshd.known_hosts),), True)
    done = ssh.run(gone, Options(), "true", 5)
    assert done.kind == "unreachable" and "gone: unreachable" in done.error
    assert ssh.start(gone, Options(), "true", 5).wait().kind == "unreachable"


def test_stage_commands_meet_the_same_connect_failures_as_the_fan_out(sshd: LoopbackSshd, tmp_path: Path,
                                                                      capfd: pytest.CaptureFixture) -> None:
    """A key file we cannot read, a server that never speaks: the stages' ssh.run/start say so as the
    fan-out does, quietly (no paramiko log line on stderr)."""
    import socket

    nokey = Host("nokey", "127.0.0.1", sshd.ports[0], "root", str(tmp_path / "gone"), (str(sshd.known_hosts),), True)
    done = ssh.run(nokey, Options(), "true", 5)
    assert (done.kind, done.error) == ("auth", f"nokey: cannot read key file {tmp_path / 'gone'}: No such file or "
                                               "directory")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        mute = Host("mute", "127.0.0.1", silent.getsockname()[1], "root", str(sshd.client_key), (), True,
                    connect_timeout=1)
        began = time.monotonic()
        done = ssh.run(mute, Options(), "true", 5)
        assert time.monotonic() - began < 4
        assert done.kind == "unreachable" and "sent no SSH banner within 1 s" in done.error
        assert ssh.start(mute, Options(), "true", 5).wait().kind == "unreachable"
    time.sleep(1.5)  # paramiko's transport thread gives up on the banner now: it must say nothing
    assert capfd.readouterr().err == ""


def test_a_command_that_prints_a_flood_keeps_its_head_and_tail(sshd: LoopbackSshd) -> None:
    from gpucheck.cluster.ssh.output import HEAD_CHARS, STDOUT_TAIL_CHARS

    flood = STDOUT_TAIL_CHARS + 4 * HEAD_CHARS
    done = ssh.run(host(sshd), Options(), f"echo first; head -c {flood} /dev/zero | tr '\\0' x; echo; echo last",
                   60)
    assert done.exit == 0 and done.stdout.startswith("first\n") and done.stdout.endswith("x\nlast\n")
    assert "characters of output cut here]" in done.stdout
    assert len(done.stdout) < STDOUT_TAIL_CHARS + HEAD_CHARS + 2000  # a read (1000 bytes) beyond at most


def test_a_command_that_never_started_answers_as_one_that_ended() -> None:
    why = Remote("n1", "serve", error="n1: cannot start the command: SSHException: boom", kind="ssh")
    bg = ssh_background.Background.not_started(why)
    assert not bg.wait_for("ready", 0.1) and bg.pid() is None and bg.text() == ""
    bg.kill()
    assert bg.wait() is why and bg.wait(1) is why and not bg.killed


def test_kill_waits_for_the_pid_line_that_stderr_brings_after_stdout() -> None:
    class Channel:  # stdout's "ready" is read at once; stderr's pid line only 0.5 s later
        def __init__(self) -> None:
            self.out, self.err = [b"ready\n"], [b"gpucheck-remote-pid 4321\n"]

        def recv(self, _: int) -> bytes:
            return self.out.pop() if self.out else b""

        def recv_stderr(self, _: int) -> bytes:
            time.sleep(0.5)
            return self.err.pop() if self.err else b""

    class Conn:
        def __init__(self) -> None:
            self.ran: list[str] = []

        def run(self, cmd: str, **_: object) -> None:
            self.ran.append(cmd)

    conn = Conn()
    bg = ssh_background.Background(Remote("n1", "serve"), 60, time.monotonic(), 8, conn, Channel())
    assert bg.wait_for("ready", 5)
    bg.kill()
    assert conn.ran and conn.ran[0].startswith("kill -TERM -- -4321")


def test_background_command_waited_for_then_killed_on_the_node(sshd: LoopbackSshd, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    bg = ssh.start(host(sshd), Options(), f"sh -c 'echo $$ > {pidfile}; echo ready; exec sleep 300'", 60)
    assert bg.wait_for("ready", 10)
    began = time.monotonic()
    bg.kill()
    done = bg.wait(10)
    assert time.monotonic() - began < 10 and done.kind == "killed" and done.stdout == "ready\n"
    time.sleep(0.5)
    assert not alive(int(pidfile.read_text()))


def test_background_command_ends_by_itself_and_overruns_are_killed(sshd: LoopbackSshd) -> None:
    done = ssh.start(host(sshd), Options(), "echo out; echo err >&2; exit 3", 30).wait()
    assert (done.stdout, done.stderr.strip(), done.exit, done.error) == ("out\n", "err", 3, None)
    slow = ssh.start(host(sshd), Options(), "sleep 300", 2).wait()
    assert slow.timed_out


def test_put_copies_a_file_into_a_new_directory(sshd: LoopbackSshd, tmp_path: Path) -> None:
    source = tmp_path / "job.py"
    source.write_text("print('hello')\n")
    target = tmp_path / "remote" / "dir"
    done = ssh.put(host(sshd), Options(), source, str(target), 20)
    assert done.ok, done.error
    assert (target / "job.py").read_text() == "print('hello')\n"


def test_network_stage_measures_a_real_pair_with_gpucheck_net(sshd: LoopbackSshd) -> None:
    agent = f"env PYTHONPATH={ROOT / 'agent'} {sys.executable} -m gpucheck"
    ctx = make_ctx(["n1", "n2"], remote_command=agent, pair_seconds=1)
    ctx.inventory.hosts[:] = [host(sshd, "n1", 0), host(sshd, "n2", 1)]
    result = network.network_stage(ctx)[0]
    assert result.status == Status.PASS, result.reason
    assert len(ctx.pairs) == 1 and ctx.pairs[0]["value"] > 0.1 and ctx.pairs[0]["method"] == "tcp"
    assert set(ctx.figures["net_Gbps"]) == {"n1", "n2"}


if os.geteuid() != 0:  # LoopbackSshd logs in as root: the cluster tests' own precondition
    pytestmark = pytest.mark.skip(reason="needs root (sshd as root on 127.0.0.1)")
