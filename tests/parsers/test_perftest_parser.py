"""perftest: the values SOURCES.md lists for each real capture, then format variations."""

from __future__ import annotations

import time

import pytest

from gpucheck.parsers import ParseError, parse
from support import REAL

SUPERBENCH = "perftest/ib_write_bw-loopback-8M-MBsec-client+server-superbench.txt"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def perftest(text: str) -> dict:
    return parse("perftest", text)


def test_loopback_client_and_server_in_mb_per_sec() -> None:
    r = perftest(real(SUPERBENCH))
    assert (r["test"], r["mode"], r["device"], r["link_layer"], r["mtu_B"]) == ("ib_write_bw", "bw", "ib0",
                                                                                  "IB", 4096)
    assert r["units"] == "MB/sec"
    assert len(r["rows"]) == 2 and r["repeats"] == 2  # the server's and the client's copy of the result
    row = r["rows"][0]
    assert (row["size_B"], row["iterations"]) == (8388608, 20000)
    assert row["bw_avg_Gbps"] == pytest.approx(24056.72 * 8 / 1000)  # 192.45 Gb/s: HDR 200G
    assert row["bw_peak_Gbps"] == pytest.approx(24056.74 * 8 / 1000)
    assert row["msg_rate_Mpps"] == 0.003007
    assert r["bw_avg_Gbps"] == pytest.approx(192.45376)
    assert (r["failed"], r["errors"], r["truncated"]) == (False, [], False)


def test_dgx_spark_roce_client_run_infinitely() -> None:
    r = perftest(real("perftest/ib_write_bw-client-roce-dgx-spark-run_infinitely-rail1.txt"))
    assert (r["test"], r["device"], r["link_layer"], r["mtu_B"]) == ("ib_write_bw", "rocep1s0f0", "Ethernet", 1024)
    assert r["units"] == "Gb/sec"
    assert len(r["rows"]) == 5 and {row["size_B"] for row in r["rows"]} == {65536}
    assert all(row["bw_peak_Gbps"] == 0.0 for row in r["rows"])  # "BW peak won't be measured"
    assert r["peak_measured"] is False and r["bw_peak_Gbps"] is None
    assert r["bw_avg_Gbps"] == pytest.approx(92.568)  # mean of 92.57 x4 and 92.56
    assert r["failed"] is False


def test_post_list_duration_run_with_peak_zero() -> None:
    r = perftest(real("perftest/ib_write_bw-post-list-8B-duration-60s-peak0-perftest273.txt"))
    assert (r["test"], r["device"], r["link_layer"], r["post_list"]) == ("ib_write_bw", "ib0", "Ethernet", 128)
    assert r["rows"] == [{"size_B": 8, "iterations": 224958464, "bw_peak_Gbps": 0.0, "bw_avg_Gbps": 0.48,
                          "msg_rate_Mpps": 7.498617}]
    assert r["bw_avg_Gbps"] == 0.48 and r["peak_measured"] is False
    assert r["errors"] == []  # "PCIe relax order: Unsupported" is a setting, not an error


def test_same_result_in_gbits_and_mbytes_reads_the_same() -> None:
    mb = perftest(real(SUPERBENCH))
    gb = perftest(real(SUPERBENCH).replace("BW peak[MB/sec]", "BW peak[Gb/sec]")
                  .replace("BW average[MB/sec]", "BW average[Gb/sec]")
                  .replace("24056.74", "192.45").replace("24056.72", "192.45"))
    assert gb["units"] == "Gb/sec" and gb["bw_avg_Gbps"] == 192.45
    assert mb["bw_avg_Gbps"] == pytest.approx(gb["bw_avg_Gbps"], abs=0.01)


LATENCY = """\
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 1
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 220[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x01 QPN 0x0089 PSN 0x9a1c2f RKey 0x1fff00 VAddr 0x005612ebcf5000
 remote address: LID 0x02 QPN 0x0089 PSN 0x1e8b8b RKey 0x1fff00 VAddr 0x0055f12bd31000
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
99% percentile[usec]   99.9% percentile[usec] \n\
 2       1000          1.04           3.86         1.07     \t       1.08        \t0.05   \t\t1.22    \t\t3.86   \n\
---------------------------------------------------------------------------------------
"""


def test_latency_test_columns() -> None:
    r = perftest(LATENCY)
    assert (r["test"], r["mode"], r["units"], r["device"]) == ("ib_write_lat", "lat", "usec", "mlx5_0")
    assert r["rows"] == [{"size_B": 2, "iterations": 1000, "t_min_us": 1.04, "t_max_us": 3.86,
                          "t_typical_us": 1.07, "t_avg_us": 1.08, "t_stdev_us": 0.05, "p99_us": 1.22,
                          "p99_9_us": 3.86}]
    assert (r["t_typical_us"], r["t_avg_us"], r["bw_avg_Gbps"], r["peak_measured"]) == (1.07, 1.08, None, None)


def test_pdsh_prefixed_and_crlf() -> None:
    text = "".join(f"node01: {line}" for line in real(SUPERBENCH).splitlines(keepends=True))
    r = perftest(text.replace("\n", "\r\n"))
    assert (r["device"], r["units"]) == ("ib0", "MB/sec")
    assert r["bw_avg_Gbps"] == pytest.approx(192.45376)


def test_output_cut_mid_row() -> None:
    text = real(SUPERBENCH)
    cut = text.index(" 8388608    20000            24056.74") + 30
    r = perftest(text[:cut])
    assert r["rows"] == [] and r["truncated"] is True and r["failed"] is True
    assert r["bw_avg_Gbps"] is None


def test_device_missing_is_perftest_output_that_failed() -> None:
    r = perftest(" Unable to find the Infiniband/RoCE device\n")
    assert r["failed"] is True and r["rows"] == [] and r["test"] is None
    assert r["errors"] == ["Unable to find the Infiniband/RoCE device"]


def test_unknown_bandwidth_unit_is_refused_not_guessed() -> None:
    with pytest.raises(ParseError, match="unknown bandwidth unit"):
        perftest(real(SUPERBENCH).replace("[MB/sec]", "[KiB/s]"))


# A long line costs what its length costs. Before, the header pattern tried every letter of a line as the
# start of a "Key : value", and the banner and column patterns had two open-ended parts: a 40 kB line took
# seconds. Measured against the same number of bytes in ordinary lines, in the same run: no wall-clock limit.
LONG_LINES = {
    "letters": "a" * 40_000,
    "words": "Device " * 6_000,
    "banner": "RDMA_Write " + "BW " * 13_000,
    "columns": " #bytes " + "BW peak[" * 5_000,
    "percentiles": " #bytes " + "9" * 40_000,
}


def best_of(runs: int, text: str) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        perftest(text)
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.mark.parametrize("kind", list(LONG_LINES))
def test_a_long_line_costs_no_more_than_as_many_ordinary_lines(kind: str) -> None:
    base = real(SUPERBENCH)
    line = LONG_LINES[kind]
    ordinary = base * (len(line) // len(base) + 1)  # the same bytes, in ordinary lines
    with_long_line = base + line + "\n"
    assert perftest(with_long_line)["bw_avg_Gbps"] == pytest.approx(192.45376)  # the long line changes nothing
    assert best_of(3, with_long_line) < 10 * best_of(3, ordinary)
