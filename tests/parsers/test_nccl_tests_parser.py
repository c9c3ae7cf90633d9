"""nccl-tests: the values SOURCES.md lists for each real log, then format variations."""

from __future__ import annotations

import pytest

from gpucheck.parsers import ParseError, parse
from support import REAL

GCP = "nccl-tests/h100-2node-16gpu-allreduce-gcp-a3mega.txt"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def nccl(text: str) -> dict:
    return parse("nccl-tests", text)


def row_at(result: dict, size: int) -> dict:
    return next(r for r in result["rows"] if r["size_B"] == size)


def test_gcp_h100_two_nodes_after_markdown_prose() -> None:
    r = nccl(real(GCP))
    assert r["collective"] == "all_reduce"  # from the binary in the quoted mpirun command line
    assert r["nranks"] == 16
    assert r["devices"] == ["NVIDIA H100 80GB HBM3"] * 16
    assert r["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert [row["size_B"] for row in r["rows"]] == [2**n for n in range(3, 34)]  # 8 B .. 8 GiB
    assert r["avg_busbw_GBps"] == 70.742  # footer has a trailing space
    assert (r["max_busbw_GBps"], r["max_busbw_size_B"]) == (338.82, 8589934592)
    assert row_at(r, 8589934592)["busbw_inplace_GBps"] == 337.35
    assert r["wrong_total"] == 0 and r["out_of_bounds"] == 0
    assert (r["failed"], r["errors"], r["complete"]) == (False, [], True)
    assert r["ranks"][8] == {"rank": 8, "group": 0, "pid": 6733, "host": "ztan-mig-gq73", "device": 0,
                             "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3"}


def test_superbench_old_format_no_root_error_column_and_stray_info_line() -> None:
    r = nccl(real("nccl-tests/a100-8gpu-allreduce-oldformat-superbench.txt"))
    assert (r["nthread"], r["ngpus"], r["validation"]) == (1, 8, 0)
    assert r["nranks"] == 8 and set(r["devices"]) == {"A100-SXM4-40GB"}
    assert r["collective"] is None  # no test name anywhere in this log
    assert len(r["rows"]) == 34  # two 0-byte rows, then 4 B .. 8 GiB; the NCCL INFO line is skipped
    first = r["rows"][0]
    assert (first["size_B"], first["type"], first["redop"], first["root"]) == (0, "float", "sum", None)
    assert all(row["wrong"] is None and row["wrong_inplace"] is None for row in r["rows"])  # "N/A"
    assert r["avg_busbw_GBps"] == 68.4048
    assert (r["max_busbw_GBps"], r["max_busbw_size_B"]) == (235.26, 8589934592)
    assert row_at(r, 2147483648)["time_us"] == 16215  # integer-formatted time column
    assert (r["failed"], r["wrong_total"]) == (False, 0)


def test_rtx_failure_before_any_table() -> None:
    r = nccl(real("nccl-tests/rtx2080ti-4gpu-test-nccl-failure-unhandled-system-error-nccl473.txt"))
    assert r["failed"] is True
    assert r["errors"] == ["fastmoe: Test NCCL failure common.cu:777 'unhandled system error'"]
    assert (r["rows"], r["avg_busbw_GBps"], r["max_busbw_GBps"], r["complete"]) == ([], None, None, False)
    assert r["nranks"] == 4 and r["devices"] == ["GeForce RTX 2080 Ti"] * 4
    assert r["ranks"][1]["group"] is None and r["ranks"][1]["bus_id"] == "0x3b"


def test_gh200_wrong_results_fail_even_with_table_and_average() -> None:
    r = nccl(real("nccl-tests/gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt"))
    assert (r["nccl_tests_version"], r["nccl_version_code"]) == ("2.17.8", 22902)
    assert r["collective"] == "all_reduce"  # from "# Collective test starting: all_reduce_perf"
    bad = row_at(r, 1048576)
    assert (bad["wrong"], bad["wrong_inplace"]) == (96, 32)
    assert all(row["wrong"] == 0 for row in r["rows"] if row["size_B"] != 1048576)
    assert r["wrong_total"] == 128 and r["out_of_bounds"] == 4
    assert r["avg_busbw_GBps"] == 4.79995 and r["max_busbw_GBps"] == 22.87
    assert r["failed"] is True
    assert r["errors"] == ["# Out of bounds values : 4 FAILED",
                           ".. gpu-1-1 pid 662195: Test failure common.cu:1189",
                           ".. gpu-1-7 pid 2448661: Test failure common.cu:1189"]
    assert [x["bus_id"] for x in r["ranks"]] == ["0009:01:00", "0009:01:00"]
    assert r["hosts"] == ["gpu-1-1", "gpu-1-7"]


def test_wrong_results_alone_make_the_run_failed() -> None:
    text = real("nccl-tests/gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt")
    quiet = "\n".join(line for line in text.splitlines() if "FAILED" not in line and "Test failure" not in line)
    r = nccl(quiet)
    assert r["errors"] == [] and r["out_of_bounds"] is None
    assert r["wrong_total"] == 128 and r["failed"] is True


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "node01: ", "3: ", " 3: "],
                         ids=["mpirun", "pdsh", "srun", "srun-padded"])
def test_launcher_prefix_on_every_line(prefix: str) -> None:
    text = "".join(prefix + line for line in real(GCP).splitlines(keepends=True))
    r = nccl(text)
    assert (r["avg_busbw_GBps"], r["max_busbw_GBps"], r["nranks"]) == (70.742, 338.82, 16)
    assert len(r["rows"]) == 31


def test_crlf_line_endings() -> None:
    r = nccl(real(GCP).replace("\n", "\r\n"))
    assert (r["avg_busbw_GBps"], len(r["rows"]), r["nranks"]) == (70.742, 31, 16)
    assert r["devices"][0] == "NVIDIA H100 80GB HBM3"  # no stray "\r" in names


def test_output_cut_mid_row() -> None:
    lines = real(GCP).splitlines()
    cut_at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("4294967296"))
    text = "\n".join(lines[:cut_at]) + "\n" + lines[cut_at][:70]  # ends inside the out-of-place group
    r = nccl(text)
    assert r["rows"][-1]["size_B"] == 2147483648  # the partial row is not read as a result
    assert r["truncated"] is True and r["complete"] is False
    assert r["avg_busbw_GBps"] is None


def test_header_but_no_table() -> None:
    header = "\n".join(real(GCP).splitlines()[8:30])  # nThread line and the rank lines only
    r = nccl(header)
    assert (r["rows"], r["nranks"], r["failed"], r["complete"]) == ([], 16, False, False)


NEWEST_ALL_GATHER = """\
# nccl-tests version 2.17.8 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node01 device  0 [0000:18:00] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   1002 on     node01 device  1 [0000:2a:00] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024           128     float    none      -1    10.21    0.10    0.05       0    10.11    0.10    0.05       0
node01:2000:2000 [0] NCCL INFO comm 0x55d0c0 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE
        2048           256     float    none      -1    10.40    0.20    0.10       0    10.30    0.20    0.10       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.075
#
# Collective test concluded: all_gather_perf
"""


def test_newest_format_all_gather_with_interleaved_info_line() -> None:
    r = nccl(NEWEST_ALL_GATHER)
    assert r["collective"] == "all_gather"
    assert [(row["size_B"], row["redop"], row["root"]) for row in r["rows"]] == [(1024, "none", -1),
                                                                               (2048, "none", -1)]
    assert r["avg_busbw_GBps"] == 0.075 and r["failed"] is False and r["nranks"] == 2


OLD_BROADCAST = """\
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  4242 on     dgx1 device  0 [0x06] Tesla V100-SXM2-16GB
#   Rank  1 Pid  4242 on     dgx1 device  1 [0x07] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                       in-place
#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144   float       0    45.12   23.24   23.24  0e+00    44.90   23.35   23.35  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 23.295
"""


def test_old_broadcast_root_column_without_redop() -> None:
    r = nccl(OLD_BROADCAST)
    (row,) = r["rows"]
    assert (row["root"], row["redop"], row["busbw_GBps"], row["busbw_inplace_GBps"]) == (0, None, 23.24, 23.35)
    assert row["wrong"] is None  # old versions print a max deviation here, not a count
    assert r["failed"] is False and r["devices"] == ["Tesla V100-SXM2-16GB"] * 2


def test_cuda_failure_line_alone_is_recognised_and_failed() -> None:
    r = nccl("node07: Test CUDA failure common.cu:891 'out of memory'\n")
    assert r["failed"] is True and r["errors"] == ["node07: Test CUDA failure common.cu:891 'out of memory'"]


def test_perftest_style_numbers_are_not_nccl_rows() -> None:
    with pytest.raises(ParseError):
        nccl(" 65536      882805           0.00               92.57                0.176554\n")


GH200 = "nccl-tests/gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt"


def test_a_later_run_reporting_0_ok_does_not_hide_wrong_values() -> None:
    # Two runs in one capture (a retry, or one run per collective): the first had 4 out-of-bounds values.
    r = nccl(real(GH200) + real(GCP))
    assert r["footers"] == [{"out_of_bounds": 4, "avg_busbw_GBps": 4.79995},
                            {"out_of_bounds": 0, "avg_busbw_GBps": 70.742}]
    assert r["out_of_bounds"] == 4 and r["failed"] is True
    assert r["avg_busbw_GBps"] == 4.79995  # the worst run's average


@pytest.mark.parametrize("name", [GCP, GH200])
def test_without_the_hash_marks_of_older_builds_every_figure_is_still_read(name: str) -> None:
    """Older nccl-tests printed the footers as " Out of bounds values : N OK" and " Avg bus bandwidth : X" (a space,
    no "#"), and a log pasted into a GitHub issue loses every leading "#" (markup): the same run, read the same."""
    marked = nccl(real(name))
    bare = nccl("\n".join(" " + line[1:] if line.startswith("#") else line for line in real(name).splitlines()))
    assert bare["footers"] == marked["footers"] and bare["avg_busbw_GBps"] == marked["avg_busbw_GBps"] is not None
    assert bare["ranks"] == marked["ranks"] and bare["rows"] == marked["rows"]
    assert (bare["nthread"], bare["ngpus"], bare["max_bytes"]) == (marked["nthread"], marked["ngpus"],
                                                                  marked["max_bytes"])
    assert (bare["complete"], bare["failed"], bare["out_of_bounds"]) == (marked["complete"], marked["failed"],
                                                                        marked["out_of_bounds"])


def test_a_rank_line_without_a_pid_as_nccl_tests_1_printed_it() -> None:
    """nccl-tests 1.x: `#   Rank %2d on %10s device %2d [0x%02x] %s` (no group, no pid)."""
    text = real(GCP).replace("#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 [0000:04:00]",
                             "#   Rank  0 on ztan-mig-235z device  0 [0x04]")
    assert nccl(text)["ranks"][0] == {"rank": 0, "group": None, "pid": None, "host": "ztan-mig-235z", "device": 0,
                                      "bus_id": "0x04", "name": "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("joiner", ["\n", "", "\r\n#\n"], ids=["next-line", "same-line", "crlf-and-blank"])
def test_the_average_after_a_failed_out_of_bounds_line_is_kept(joiner: str) -> None:
    text = real(GH200).replace("# Out of bounds values : 4 FAILED\n", "# Out of bounds values : 4 FAILED" + joiner)
    r = nccl(text)
    assert r["footers"] == [{"out_of_bounds": 4, "avg_busbw_GBps": 4.79995}]
    assert (r["out_of_bounds"], r["avg_busbw_GBps"], r["failed"]) == (4, 4.79995, True)


def test_footers_indented_by_a_space_after_a_failed_check_are_read() -> None:
    """Some captures indent the footer lines that follow "# Out of bounds values : N FAILED" by a space."""
    text = (REAL / "nccl-tests" / "gh200-2node-allreduce-wrong-96-32-at-1MB-FAILED-v2.17.8-nccltests369.txt"
            ).read_text()
    indented = text.replace("# Out of bounds values : 4 FAILED\n# Avg bus bandwidth",
                            "# Out of bounds values : 4 FAILED\n # Avg bus bandwidth")
    assert indented != text
    r = parse("nccl-tests", indented)
    assert r["footers"] == [{"out_of_bounds": 4, "avg_busbw_GBps": 4.79995}]
    assert r["out_of_bounds"] == 4 and r["avg_busbw_GBps"] == 4.79995
