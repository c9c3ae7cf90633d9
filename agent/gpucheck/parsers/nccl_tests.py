"""nccl-tests output (all_reduce_perf, all_gather_perf, ...).

Handles the old table (no root column, "error" instead of "#wrong"), the 2.17 format with
"# nccl-tests version" and "# Collective test starting" lines, launcher prefixes on every
line, NCCL INFO lines interleaved with the table, prose before the log, and runs that fail
before the table. What algbw/busbw mean: nccl-tests src/common.cu and doc/PERFORMANCE.md.
"""

from __future__ import annotations

import re

from ._common import ParseError, guard, number, strip_prefix, text_lines

KIND = "nccl-tests"

# Every header and footer line starts with "#" since nccl-tests 2.x; older builds (and logs pasted where a leading "#"
# is markup) have a space there instead: each starts at a "#", or at the line's start without one.
_VERSION = re.compile(
    r"(?:#|^)\s*nccl-tests version (?P<version>\S+)(?:.*?nccl-headers=(?P<headers>\d+))?"
    r"(?:.*?nccl-library=(?P<library>\d+))?"
)
_STARTING = re.compile(r"(?:#|^)\s*Collective test starting:\s*(?P<name>\w+)")
_PARAMS = re.compile(
    r"(?:#|^)\s*nThread\s+(?P<nthread>\d+)\s+nGpus\s+(?P<ngpus>\d+)\s+minBytes\s+(?P<min>\d+)"
    r"\s+maxBytes\s+(?P<max>\d+)"
)
_VALIDATION = re.compile(r"validation:\s*(?P<value>\d+)")
_RANK = re.compile(
    r"(?:#|^)\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?(?:Pid\s+(?P<pid>\d+)\s+)?on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*)$"  # name: rstrip (`.*?\s*$` is quadratic)
)
# The binary name, e.g. in the command line quoted before the log.
_BINARY = re.compile(
    r"\b(?P<name>all_reduce|all_gather|alltoall|broadcast|reduce_scatter|reduce|scatter|gather"
    r"|sendrecv|hypercube)_perf\b"
)
_COLUMN_HEADER = re.compile(r"(?:#|^)\s*size\s+count\s+type\b")
_AVG_BUSBW = re.compile(r"(?:#|^)\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)")
_OUT_OF_BOUNDS = re.compile(r"(?:#|^)\s*Out of bounds values\s*:\s*(?P<count>\d+)")
# Lines nccl-tests prints when a run goes wrong (NCCLCHECK/CUDACHECK/testStreamSynchronize).
_TEST_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure|Failed, (?:NCCL|CUDA) error")
_FAILURE = re.compile(_TEST_FAILURE.pattern + r"|\bFAILED\b")
_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_INT = re.compile(r"-?\d+")
_DEVIATION = re.compile(r"\d(?:\.\d+)?e[-+]\d+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _float(token: str) -> int | float | None:
    """A whole-token number ('16215', '0.00'); None for anything else ('N/A', 'sum', '12abc')."""
    return number(token) if _NUMBER.fullmatch(token) else None


def _group(tokens: list[str], suffix: str) -> dict | None:
    """One (time, algbw, busbw, wrong) group; wrong is None when the column says N/A."""
    time_us, algbw, busbw = (_float(t) for t in tokens[:3])
    if time_us is None or algbw is None or busbw is None or time_us < 0:
        return None
    wrong_text = tokens[3]
    if _INT.fullmatch(wrong_text):
        wrong = int(wrong_text)
    elif wrong_text == "N/A" or _DEVIATION.fullmatch(wrong_text):
        wrong = None  # validation off, or very old versions printing a max deviation, not a count
    else:
        return None
    return {
        f"time{suffix}_us": time_us,
        f"algbw{suffix}_GBps": algbw,
        f"busbw{suffix}_GBps": busbw,
        f"wrong{suffix}": wrong,
    }


def _row(tokens: list[str]) -> dict | None:
    """A result row: size count type [redop] [root] then one or two 4-column groups."""
    if len(tokens) < 7 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    groups = 2 if len(tokens) >= 11 else 1
    head, tail = tokens[: len(tokens) - 4 * groups], tokens[len(tokens) - 4 * groups :]
    if not 3 <= len(head) <= 5 or not _TYPE.fullmatch(head[2]):
        return None
    row: dict = {"size_B": int(head[0]), "count": int(head[1]), "type": head[2], "redop": None, "root": None}
    for extra in head[3:]:
        if _INT.fullmatch(extra):
            row["root"] = int(extra)
        elif _TYPE.fullmatch(extra):
            row["redop"] = extra
        else:
            return None
    out_of_place = _group(tail[:4], "")
    in_place = _group(tail[4:], "_inplace") if groups == 2 else None
    if out_of_place is None or (groups == 2 and in_place is None):
        return None
    row.update(out_of_place)
    row.update(in_place or {"time_inplace_us": None, "algbw_inplace_GBps": None,
                            "busbw_inplace_GBps": None, "wrong_inplace": None})
    return row


def _looks_like_row_start(tokens: list[str]) -> bool:
    return len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit() and bool(_TYPE.fullmatch(tokens[2]))


@guard(KIND)
def parse(text: str) -> dict:
    lines = text_lines(text, KIND)
    result: dict = {
        "collective": None,
        "nccl_tests_version": None,
        "nccl_version_code": None,
        "nthread": None,
        "ngpus": None,
        "min_bytes": None,
        "max_bytes": None,
        "validation": None,
        "avg_busbw_GBps": None,
        "out_of_bounds": None,
        "footers": [],
        "rows": [],
        "errors": [],
        "ranks": [],
        "truncated": False,
    }
    recognised = False
    binary_name = None
    for raw in lines:
        line = strip_prefix(raw).rstrip()
        if match := _VERSION.search(line):
            result["nccl_tests_version"] = match["version"]
            code = match["library"] or match["headers"]
            result["nccl_version_code"] = int(code) if code else None
            recognised = True
        if match := _STARTING.search(line):
            result["collective"] = match["name"].removesuffix("_perf")
            recognised = True
        if match := _PARAMS.search(line):
            result.update(nthread=int(match["nthread"]), ngpus=int(match["ngpus"]),
                          min_bytes=int(match["min"]), max_bytes=int(match["max"]))
            if validation := _VALIDATION.search(line):
                result["validation"] = int(validation["value"])
            recognised = True
        if match := _RANK.search(line):
            result["ranks"].append({
                "rank": int(match["rank"]),
                "group": int(match["group"]) if match["group"] else None,
                "pid": int(match["pid"]) if match["pid"] else None,  # nccl-tests 1.x printed none
                "host": match["host"],
                "device": int(match["device"]),
                "bus_id": match["bus"],
                "name": match["name"].rstrip(),
            })
            recognised = True
        if _COLUMN_HEADER.search(line):
            recognised = True
        if match := _OUT_OF_BOUNDS.search(line):
            _footer(result, "out_of_bounds", int(match["count"]))
        if match := _AVG_BUSBW.search(line):
            _footer(result, "avg_busbw_GBps", number(match["value"]))
            recognised = True
        if _FAILURE.search(line):
            result["errors"].append(raw.strip())
            recognised = recognised or bool(_TEST_FAILURE.search(line))
        if binary_name is None and (match := _BINARY.search(line)):
            binary_name = match["name"]
        tokens = line.split()
        if row := _row(tokens):
            result["rows"].append(row)
            recognised = True
        elif _looks_like_row_start(tokens):
            result["truncated"] = True  # a result row cut short (output ended mid-line)
    if not recognised:
        raise ParseError(f"not {KIND} output: no nccl-tests header, result table or failure line")
    return _summarise(result, binary_name)


def _footer(result: dict, key: str, value: int | float | None) -> None:
    """Record one footer figure. Each run ends with "# Out of bounds values : N OK|FAILED" then "# Avg bus
    bandwidth : X"; a capture can hold several runs (retries, one per collective), so every footer is kept
    in `footers`, one entry per run, and no later run's "0 OK" can hide an earlier run's wrong values."""
    footers = result["footers"]
    if key == "out_of_bounds" or not footers or key in footers[-1]:  # the first line of a run's footer
        footers.append({})
    footers[-1][key] = value


def _summarise(result: dict, binary_name: str | None) -> dict:
    footers = result["footers"]
    counts = [f["out_of_bounds"] for f in footers if f.get("out_of_bounds") is not None]
    result["out_of_bounds"] = sum(counts) if counts else None  # wrong values over every run
    averages = [f["avg_busbw_GBps"] for f in footers if f.get("avg_busbw_GBps") is not None]
    result["avg_busbw_GBps"] = min(averages) if averages else None  # the worst run's
    result["footers"] = [{"out_of_bounds": f.get("out_of_bounds"), "avg_busbw_GBps": f.get("avg_busbw_GBps")}
                         for f in footers]
    rows = result["rows"]
    if result["collective"] is None:
        result["collective"] = binary_name
    ranks = sorted({r["rank"]: r for r in result["ranks"]}.values(), key=lambda r: r["rank"])
    result["ranks"] = ranks
    result["nranks"] = len(ranks) or None
    result["devices"] = [r["name"] for r in ranks]
    result["hosts"] = sorted({r["host"] for r in ranks})
    result["wrong_total"] = sum((r["wrong"] or 0) + (r["wrong_inplace"] or 0) for r in rows)
    best = max(rows, key=lambda r: r["busbw_GBps"], default=None)
    result["max_busbw_GBps"] = best["busbw_GBps"] if best else None
    result["max_busbw_size_B"] = best["size_B"] if best else None
    largest = max(rows, key=lambda r: r["size_B"], default=None)
    result["largest_size_B"] = largest["size_B"] if largest else None
    result["busbw_largest_GBps"] = largest["busbw_GBps"] if largest else None
    result["complete"] = result["avg_busbw_GBps"] is not None and not result["truncated"]
    result["failed"] = bool(result["errors"]) or result["wrong_total"] > 0 or bool(result["out_of_bounds"])
    return result
