"""ibstat / ibstatus / ibv_devinfo: the values SOURCES.md lists, then format variations."""

from __future__ import annotations

from gpucheck.parsers import parse
from support import REAL

IBSTAT = "ibstat/ibstat-h100-12hca-8xNDR400-active-3eth-down.txt"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def ports(result: dict) -> list[tuple[str, dict]]:
    return [(ca["name"], port) for ca in result["cas"] for port in ca["ports"]]


def test_ibstat_h100_twelve_cas_eight_ndr_active_three_ethernet_down() -> None:
    r = parse("ibstat", real(IBSTAT))
    assert r["format"] == "ibstat" and r["complete"] is True and r["errors"] == []
    assert [ca["name"] for ca in r["cas"]] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2", "mlx5_3",
                                               "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    ib = [(name, p) for name, p in ports(r) if p["link_layer"] == "InfiniBand"]
    assert len(ib) == 8
    assert all((p["state"], p["physical_state"], p["rate_Gbps"]) == ("Active", "LinkUp", 400) for _, p in ib)
    assert {ca["type"] for ca in r["cas"] if ca["name"] in dict(ib)} == {"MT4129"}
    eth = {name: p for name, p in ports(r) if p["link_layer"] == "Ethernet"}
    assert sorted(eth) == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert (eth["mlx5_1"]["state"], eth["mlx5_1"]["rate_Gbps"]) == ("Active", 100)
    assert all((eth[n]["state"], eth[n]["physical_state"], eth[n]["rate_Gbps"]) == ("Down", "Disabled", 40)
               for n in ("mlx5_2", "mlx5_7", "mlx5_8"))
    assert r["cas"][0]["firmware"] == "28.39.1002" and r["cas"][0]["ports"][0]["port"] == 1


def test_ibstatus_azure_a100_eight_hdr_and_one_ethernet() -> None:
    r = parse("ibstat", real("ibstat/ibstatus-a100-azure-8xHDR200-plus-eth.txt"))
    assert r["format"] == "ibstatus" and r["complete"] is True
    assert [ca["name"] for ca in r["cas"]] == [f"mlx5_{i}" for i in range(9)]
    all_ports = dict(ports(r))
    for i in range(8):
        port = all_ports[f"mlx5_{i}"]
        assert (port["state"], port["physical_state"], port["rate_Gbps"], port["link_layer"]) == (
            "Active", "LinkUp", 200, "InfiniBand")  # "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"
    eth = all_ports["mlx5_8"]
    assert (eth["state"], eth["rate_Gbps"], eth["link_layer"]) == ("Active", 40, "Ethernet")


def test_ibpanic_after_a_ca_header_marks_output_incomplete() -> None:
    text = real(IBSTAT).split("CA 'mlx5_10'")[0] + (
        "CA 'mlx5_10'\n\tCA type: MT4129\n\tNumber of ports: 1\n"
        "ibpanic: [4120] main: stat of IB device 'mlx5_10' failed: No such file or directory\n")
    r = parse("ibstat", text)
    assert r["complete"] is False
    assert r["errors"] == ["ibpanic: [4120] main: stat of IB device 'mlx5_10' failed: No such file or directory"]
    assert [ca["name"] for ca in r["cas"]] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert r["cas"][2]["ports"] == []


def test_ibpanic_after_complete_cas_still_marks_output_incomplete() -> None:
    text = real(IBSTAT).split("CA 'mlx5_10'")[0] + "ibpanic: [4120] main: can't get IB device list\n"
    r = parse("ibstat", text)
    assert [ca["name"] for ca in r["cas"]] == ["mlx5_0", "mlx5_1"]
    assert all(ca["ports"][0]["state"] == "Active" for ca in r["cas"])
    assert r["complete"] is False


def test_ca_header_without_port_block_is_incomplete() -> None:
    r = parse("ibstat", "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n")
    assert r["complete"] is False and r["cas"][0]["ports"] == []


def test_crlf_ibstat() -> None:
    r = parse("ibstat", real(IBSTAT).replace("\n", "\r\n"))
    assert r["complete"] is True
    assert r["cas"][0]["ports"][0] == {"port": 1, "state": "Active", "physical_state": "LinkUp",
                                       "rate_Gbps": 400, "link_layer": "InfiniBand"}


IBV_DEVINFO_V = """\
hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t20.31.1014
\tnode_guid:\t\t\t0c42:a103:0065:8b2a
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4123
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t3
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t50.0 Gbps (64)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t22.38.1002
\tvendor_part_id:\t\t\t4125
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t10.0 Gbps (8)
\t\t\tphys_state:\t\tDISABLED (3)
\t\t\tlink_layer:\t\tEthernet
"""


def test_ibv_devinfo_verbose_rate_is_width_times_lane_speed() -> None:
    r = parse("ibstat", IBV_DEVINFO_V)
    assert r["format"] == "ibv_devinfo" and r["complete"] is True
    (_, hdr), (_, eth) = ports(r)
    assert (hdr["state"], hdr["physical_state"], hdr["rate_Gbps"], hdr["link_layer"]) == (
        "Active", "LinkUp", 200, "InfiniBand")
    assert (eth["state"], eth["physical_state"], eth["rate_Gbps"], eth["link_layer"]) == (
        "Down", "Disabled", 40, "Ethernet")
    assert (r["cas"][0]["type"], r["cas"][0]["firmware"]) == ("4123", "20.31.1014")


def test_ibv_devinfo_without_verbose_has_no_rate() -> None:
    short = "\n".join(line for line in IBV_DEVINFO_V.splitlines()
                      if "active_width" not in line and "active_speed" not in line and "phys_state" not in line)
    port = parse("ibstat", short)["cas"][0]["ports"][0]
    assert (port["state"], port["rate_Gbps"], port["physical_state"]) == ("Active", None, None)


def test_ibv_devinfo_no_devices() -> None:
    r = parse("ibstat", "No IB devices found\n")
    assert (r["format"], r["cas"], r["complete"]) == ("ibv_devinfo", [], True)
