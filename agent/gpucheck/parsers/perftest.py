"""perftest output (ib_write_bw, ib_read_lat, ib_send_lat, ...).

Bandwidth rows are reported in Gb/s whatever the run printed: perftest prints MB/sec unless
run with --report_gbits, and MB/sec * 8 / 1000 = Gb/s. A capture may hold both the server's
and the client's output, and --run_infinitely repeats the result row without end; every row
is kept and the summary uses all rows of the largest message size.
"""

from __future__ import annotations

import re
from statistics import mean

from ._common import ParseError, guard, number, strip_prefix, text_lines

KIND = "perftest"

# The banner perftest prints, e.g. "RDMA_Write BW Test", "Send Latency Test",
# "RDMA_Write Post List BW Test", "Atomic FETCH_AND_ADD BW Test", "RDMA_Read Bidirectional BW Test".
# Every pattern here is linear in the line's length: a long line (a binary dump, a wrapped log) must not
# cost seconds. So the banner is matched in two anchored steps, never with two open-ended parts in one.
_BANNER = re.compile(r"^\s*(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic)\b(?P<rest>.*)\bTest\s*$")
_BANNER_TEST = re.compile(r"[A-Za-z_ ]*?\b(?P<test>BW|Latency)\b")
_VERB_TOOL = {"RDMA_Write": "write", "RDMA_Read": "read", "Send": "send", "Atomic": "atomic"}
_COMMAND = re.compile(r"\b(?P<tool>(?:ib_(?:write|read|send|atomic)|raw_ethernet)_(?:bw|lat|burst_lat|fw_lat))\b")
_HEADER_KEYS = {
    "Device": "device",
    "Link type": "link_layer",
    "Transport type": "transport",
    "Connection type": "connection",
    "Mtu": "mtu_B",
    "Number of qps": "qps",
    "TX depth": "tx_depth",
    "Post List": "post_list",
    "GID index": "gid_index",
}
# "Device         : ib0", two to a line ("Dual-port       : OFF\t\tDevice         : ib0"). Only the known
# keys are looked for: a pattern for any key would try every letter of a long line as a key's start.
_KEY_VALUE = re.compile(r"(?<![A-Za-z0-9])(?P<key>" + "|".join(map(re.escape, _HEADER_KEYS))
                        + r")\s*:\s*(?P<value>\S+)")
_COLUMN = re.compile(  # units in brackets are short: a bounded bracket keeps a long line linear
    r"#bytes|#iterations|BW peak\[[^\]]{0,16}\]|BW average\[[^\]]{0,16}\]|MsgRate\[[^\]]{0,16}\]"
    r"|t_(?:min|max|typical|avg|stdev)\[[^\]]{0,16}\]|(?<![\d.])[\d.]{1,8}% percentile\[[^\]]{0,16}\]|tps average"
)
_BW_UNIT = re.compile(r"BW (?:peak|average)\[(?P<unit>[^\]]{0,16})\]")
_TO_GBPS = {"Gb/sec": 1.0, "MB/sec": 8 / 1000}
_NO_PEAK = re.compile(r"BW peak won't be measured", re.IGNORECASE)
# Failure messages perftest prints when it cannot run (device missing, peer unreachable, ...).
_ERROR = re.compile(r"Unable to |Couldn't |Failed to |Completion with error|Problems with|\bERROR\b|Error:")
_FATAL_ERROR = re.compile(r"Unable to find the Infiniband/RoCE device|Couldn't (?:connect to|get device)")
_NUMERIC = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _column_key(column: str) -> str:
    if column == "#bytes":
        return "size_B"
    if column == "#iterations":
        return "iterations"
    if column.startswith("BW peak"):
        return "bw_peak_Gbps"
    if column.startswith("BW average"):
        return "bw_avg_Gbps"
    if column.startswith("MsgRate"):
        return "msg_rate_Mpps"
    if column == "tps average":
        return "tps_avg"
    if "percentile" in column:  # "99% percentile[usec]" -> p99_us, "99.9% ..." -> p99_9_us
        return "p" + column.split("%")[0].replace(".", "_") + "_us"
    return column.split("[")[0] + "_us"  # t_min[usec] -> t_min_us


def _row(tokens: list[str], columns: list[str], factor: float) -> dict | None:
    if len(tokens) != len(columns) or not all(_NUMERIC.fullmatch(t) for t in tokens):
        return None
    row = {}
    for column, token in zip(columns, tokens, strict=True):
        value = number(token)
        if column.startswith("bw_") and value is not None:
            value = round(value * factor, 6)
        row[column] = value
    return row if isinstance(row["size_B"], int) else None


def _test_name(banner: dict | None, command: str | None) -> str | None:
    if banner:
        return f"ib_{_VERB_TOOL[banner['verb']]}_{'bw' if banner['test'] == 'BW' else 'lat'}"
    return command


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    banner = None
    command = None
    header: dict = {}
    columns: list[str] = []
    factor = 1.0
    units = None
    rows: list[dict] = []
    errors: list[str] = []
    truncated = False
    peak_measured = True
    recognised = False
    for raw in lines:
        line = strip_prefix(raw)  # pdsh / mpirun --tag-output prefixes
        if banner is None and (match := _BANNER.match(line)) and (test := _BANNER_TEST.match(match["rest"])):
            banner = {"verb": match["verb"], "test": test["test"]}
            recognised = True
            continue
        if command is None and (match := _COMMAND.search(line)):
            command = match["tool"]
        if _NO_PEAK.search(line):
            peak_measured = False
        if "#bytes" in line:
            columns = [_column_key(c) for c in _COLUMN.findall(line)]
            unit = _BW_UNIT.search(line)
            units = unit["unit"] if unit else "usec"
            if unit and unit["unit"] not in _TO_GBPS:
                raise ParseError(f"{KIND}: unknown bandwidth unit {unit['unit']!r}")
            factor = _TO_GBPS.get(units, 1.0)
            recognised = True
            continue
        if columns and (tokens := line.split()) and _NUMERIC.fullmatch(tokens[0]):
            if row := _row(tokens, columns, factor):
                rows.append(row)
            else:
                truncated = True
            continue
        if _ERROR.search(line):
            errors.append(line.strip())
            recognised = recognised or bool(_FATAL_ERROR.search(line))
        for match in _KEY_VALUE.finditer(line):
            key = _HEADER_KEYS.get(match["key"].strip())
            if key and key not in header:
                header[key] = match["value"]
    if not recognised:
        raise ParseError(f"not {KIND} output: no perftest banner, result table or perftest error")
    return _summarise(banner, command, header, units, rows, errors, truncated, peak_measured)


def _summarise(banner, command, header, units, rows, errors, truncated, peak_measured) -> dict:
    test = _test_name(banner, command)
    mode = None
    if test:
        mode = "lat" if "_lat" in test else "bw"
    elif rows:
        mode = "bw" if "bw_avg_Gbps" in rows[0] else "lat"
    largest = max((r["size_B"] for r in rows), default=None)
    at_largest = [r for r in rows if r["size_B"] == largest]

    def average(key: str) -> float | None:
        values = [r[key] for r in at_largest if r.get(key) is not None]
        return round(mean(values), 6) if values else None

    if mode != "bw":
        peak_measured = None
    elif rows and all(r.get("bw_peak_Gbps") == 0 for r in rows):
        peak_measured = False  # --run_infinitely and duration (-D) runs print peak 0.00
    return {
        "test": test,
        "mode": mode,
        "device": header.get("device"),
        "link_layer": header.get("link_layer"),
        "transport": header.get("transport"),
        "connection": header.get("connection"),
        "mtu_B": number(header.get("mtu_B")),
        "qps": number(header.get("qps")),
        "post_list": number(header.get("post_list")),
        "units": units,
        "rows": rows,
        "largest_size_B": largest,
        "bw_avg_Gbps": average("bw_avg_Gbps") if mode == "bw" else None,
        "bw_peak_Gbps": average("bw_peak_Gbps") if mode == "bw" and peak_measured else None,
        "msg_rate_Mpps": average("msg_rate_Mpps") if mode == "bw" else None,
        "t_typical_us": average("t_typical_us") if mode == "lat" else None,
        "t_avg_us": average("t_avg_us") if mode == "lat" else None,
        "peak_measured": peak_measured,
        "repeats": len(at_largest),  # client+server captures and --run_infinitely repeat the row
        "errors": errors,
        "truncated": truncated,
        "failed": bool(errors) or not rows,
    }
