"""The built-in TCP bandwidth test between two processes on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from support import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_send_and_serve_measure_the_same_stream():
    port = str(free_port())
    env = {"PYTHONPATH": str(ROOT / "agent")}
    server = subprocess.Popen([sys.executable, "-m", "gpucheck", "net", "serve", "--port", port, "--timeout", "20"],
                              stdout=subprocess.PIPE, text=True, env=env)
    assert json.loads(server.stdout.readline()) == {"listening": int(port)}
    sent = subprocess.run([sys.executable, "-m", "gpucheck", "net", "send", "127.0.0.1", "--port", port,
                           "--seconds", "0.5"], capture_output=True, text=True, env=env, timeout=30)
    received = json.loads(server.stdout.readline())
    server.wait(timeout=10)
    assert sent.returncode == 0 and server.returncode == 0
    assert received["bytes"] == json.loads(sent.stdout)["bytes"] > 0
    assert received["Gbps"] > 0


def test_nobody_listening_is_one_line_and_exit_3():
    done = subprocess.run([sys.executable, "-m", "gpucheck", "net", "send", "127.0.0.1", "--port", str(free_port()),
                           "--seconds", "0.2"], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "agent")},
                          timeout=60)
    assert done.returncode == 3 and "refused" in done.stdout


@pytest.mark.parametrize("args,line", [
    (["serve", "--port", "70000"], "argument --port: must be at most 65535"),
    (["serve", "--port", "0"], "argument --port: must be greater than 0"),
    (["send", "127.0.0.1", "--port", "http"], "argument --port: 'http' is not a port number"),
    (["send", "127.0.0.1", "--seconds", "inf"], "argument --seconds: 'inf' is not a number of seconds"),
    (["serve", "--timeout", "nan"], "argument --timeout: 'nan' is not a number of seconds"),
])
def test_a_port_or_time_no_socket_takes_is_one_line_and_exit_3(args, line):
    done = subprocess.run([sys.executable, "-m", "gpucheck", "net", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "agent")}, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "", f"gpucheck: error: {line} (see --help)\n")
