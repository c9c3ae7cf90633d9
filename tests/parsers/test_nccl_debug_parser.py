"""NCCL_DEBUG=INFO logs: the values SOURCES.md lists, then a fuller log."""

from __future__ import annotations

import pytest

from gpucheck.parsers import ParseError, parse
from support import REAL


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_multinode_ib_with_direct_pointer_p2p() -> None:
    name = "horovod-nccl/nccl-info-multinode-ib-p2p-direct-pointer-channels-FRAGMENT-nccl1412.txt"
    r = parse("nccl-debug", real(name))
    assert r["transports"] == ["NET/IB", "P2P", "P2P/direct pointer"]
    assert r["gdrdma"] is False  # "via NET/IB/3" with no /GDRDMA suffix
    assert (r["nccl_version"], r["ib_devices"], r["warnings"]) == (None, [], [])
    assert r["hosts"] == ["swat1-04"]


def test_socket_fallback_between_nodes() -> None:
    r = parse("nccl-debug", real("horovod-nccl/nccl-info-socket-fallback-no-ib-device-FRAGMENT-nccl952.txt"))
    assert r["transports"] == ["NET/Socket", "P2P", "P2P/IPC"]
    assert "NET/IB" not in r["transports"] and r["gdrdma"] is False
    assert r["hosts"] == ["<cluster_name>"]


FULL = """\
node01:1201:1201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>
node01:1201:1201 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
node01:1201:1201 [0] NCCL INFO cudaDriverVersion 12020
NCCL version 2.18.5+cuda12.2
node01:1201:1288 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE ; OOB eth0:10.0.0.11<0>
node01:1201:1288 [0] NCCL INFO Using network IB
node01:1201:1288 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
node01:1201:1288 [0] NCCL INFO Channel 01/0 : 1[1] -> 2[2] via SHM/direct/direct
node01:1201:1289 [1] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
node01:1201:1289 [1] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
node02:2201:2288 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE ; OOB eth0:10.0.0.12<0>
node02:2201:2290 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.11<46112> with error 12, opcode 0, len 0
"""


def test_full_log_with_version_devices_gdrdma_and_a_warning() -> None:
    r = parse("nccl-debug", FULL.replace("\n", "\r\n"))
    assert (r["nccl_version"], r["cuda_version"], r["network"]) == ("2.18.5", "12.2", "IB")
    assert r["transports"] == ["NET/IB", "P2P", "P2P/IPC", "SHM", "SHM/direct"]
    assert r["ib_devices"] == [
        {"index": 0, "device": "mlx5_0", "port": 1, "link_layer": "IB"},
        {"index": 1, "device": "mlx5_1", "port": 1, "link_layer": "IB"},
        {"index": 2, "device": "mlx5_2", "port": 1, "link_layer": "RoCE"},
    ]
    assert r["gdrdma"] is True
    assert r["warnings"] == ["node02:2201:2290 [3] NCCL WARN NET/IB : Got completion from peer "
                             "10.0.0.11<46112> with error 12, opcode 0, len 0"]
    assert r["hosts"] == ["node01", "node02"]


def test_mpirun_tagged_socket_devices() -> None:
    text = ("[1,0]<stdout>:node01:1201:1288 [0] NCCL INFO NET/IB : No device found.\n"
            "[1,0]<stdout>:node01:1201:1288 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0> "
            "[1]ib0:10.1.0.11<0>\n"
            "[1,0]<stdout>:node01:1201:1288 [0] NCCL INFO Using network Socket\n")
    r = parse("nccl-debug", text)
    assert (r["socket_devices"], r["network"], r["ib_devices"]) == (["eth0", "ib0"], "Socket", [])
    assert r["hosts"] == ["node01"]


def test_info_lines_with_nothing_to_report_are_rejected() -> None:
    with pytest.raises(ParseError, match="nccl-debug"):
        parse("nccl-debug", "hostname:3442:3442 [0] NCCL INFO Launch mode Parallel\n")


# The network NCCL took is among the transports, named as the channel lines name it, even where no
# channel line crosses the network (one node, or a log cut after init).
NET_CASES = {
    "socket-selected": ("node01:1201:1288 [0] NCCL INFO NET/IB : No device found.\n"
                        "node01:1201:1288 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>\n"
                        "node01:1201:1288 [0] NCCL INFO Using network Socket\n", ["NET/Socket"]),
    "ib-selected": ("node01:1201:1288 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.11<0>\n"
                    "node01:1201:1288 [0] NCCL INFO Using network IB\n"
                    "node01:1201:1288 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n",
                    ["NET/IB", "P2P", "P2P/IPC"]),
    "init-line-only": ("[1,0]<stdout>:node01:1201:1288 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>\n",
                       ["NET/Socket"]),
    "sharp-plugin": ("node01:1201:1288 [0] NCCL INFO NET/IBext : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.11<0>\n",
                     ["NET/IBext"]),
    "ofi-plugin": ("node01:1201:1288 [0] NCCL INFO NET/OFI Using Libfabric version 1.22\n"
                   "node01:1201:1288 [0] NCCL INFO Using network AWS Libfabric\n", ["NET/AWS Libfabric"]),
}


@pytest.mark.parametrize("case", list(NET_CASES))
def test_the_network_nccl_selected_is_a_transport(case: str) -> None:
    text, transports = NET_CASES[case]
    assert parse("nccl-debug", text)["transports"] == transports


def test_the_selected_network_wins_over_another_that_initialised() -> None:
    text = ("node01:1201:1288 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.11<0>\n"
            "node01:1201:1288 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.11<0>\n"
            "node01:1201:1288 [0] NCCL INFO Using network Socket\n")
    assert parse("nccl-debug", text)["transports"] == ["NET/Socket"]


@pytest.mark.parametrize("line", [
    "gpu1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
    "gpu1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
])
def test_the_ib_selection_line_alone_names_the_network_nccl_uses(line):
    """NCCL's `NET/IB : Using [0]mlx5_0:1/IB` line, with no "Using network" line after it (a log cut early)."""
    r = parse("nccl-debug", line + "\n")
    assert r["transports"] == ["NET/IB"]
    assert r["ib_devices"] == [{"index": 0, "device": "mlx5_0", "port": 1, "link_layer": "IB"}]
