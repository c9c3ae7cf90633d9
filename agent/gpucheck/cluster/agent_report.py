"""What a node's agent printed: its JSON report found in the output, and the report's shape checked
at the boundary. Everything after the fan-out (the comparison, the drain list, the report files)
reads node reports; a report that is not the shape `Report.to_dict()` gives is refused here, as
that node's error, so nothing later meets a result without a check or facts that are a list.

Finding the report is linear in the output: the report is the JSON object that runs to the end of
it, starting at the beginning or at a line that starts with `{` (lines before it: a login banner, a
warning). At most MAX_TRIES such starts are tried, from the last one back, each parsed in place
(no copy of the rest of the output)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..model import Result, Status, exit_code

MAX_TRIES = 16
REPORT_KEYS = ("results", "exit_code")  # a JSON object with either is meant as a node report
EXIT_CODES = (0, 1, 2, 3)
STATUSES = tuple(s.value for s in Status)
TEXT_FIELDS = ("reason", "remediation", "evidence")
TOP_TEXT = ("host", "profile", "started", "gpucheck_version")
FACT_MAPPINGS = ("libraries", "frameworks", "stacks")  # each a mapping of mappings (consistency, nodes)
FIRST = re.compile(r"\S")
DECODER = json.JSONDecoder()


def find(stdout: str) -> dict[str, Any] | None:
    """The JSON object that ends the output and looks like a node report (has results or an
    exit_code); None when there is none."""
    end = len(stdout.rstrip())
    tries: list[int] = []
    before = end
    while len(tries) < MAX_TRIES:
        line = stdout.rfind("\n{", 0, before)
        if line < 0:
            break
        tries.append(line + 1)
        before = line
    first = FIRST.search(stdout)
    if first and first.start() < end and stdout[first.start()] == "{" and first.start() not in tries:
        tries.append(first.start())  # the output is the report alone (its inner lines may start with `{`)
    for start in tries:
        try:
            value, stop = DECODER.raw_decode(stdout, start)
        except (ValueError, RecursionError):  # not JSON; nested deeper than Python parses
            continue
        if stop == end and isinstance(value, dict) and any(k in value for k in REPORT_KEYS):
            return value
    return None


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "a number", float: "a number", list: "a list", dict: "a mapping"}
    return names.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def mapping_problem(where: str, value: Any, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    return None if isinstance(value, dict) else f"{where} is {kind_of(value)}, not a mapping"


def result_problem(index: int, result: Any) -> str | None:
    where = f"results[{index}]"
    if not isinstance(result, dict):
        return f"{where} is {kind_of(result)}, not a mapping"
    check = result.get("check")
    if check is None:
        return f"{where} has no 'check'"
    if not isinstance(check, str) or not check.strip():
        return f"{where}.check is {shown(check)}, not a check name"
    status = result.get("status")
    if status not in STATUSES:
        return f"{where}.status is {shown(status)}, not one of {', '.join(STATUSES)}"
    for name in TEXT_FIELDS:
        if result.get(name) is not None and not isinstance(result[name], str):
            return f"{where}.{name} is {kind_of(result[name])}, not text"
    duration = result.get("duration_s")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)):
        return f"{where}.duration_s is {kind_of(duration)}, not a number"
    return None


def facts_problem(facts: Any) -> str | None:
    problem = mapping_problem("facts", facts)
    if problem or not facts:
        return problem
    for name in FACT_MAPPINGS:
        value = facts.get(name)
        problem = mapping_problem(f"facts.{name}", value)
        if problem:
            return problem
        for key, inner in (value or {}).items():
            problem = mapping_problem(f"facts.{name}.{key}", inner)
            if problem:
                return problem
    return None


def problem(report: dict[str, Any]) -> str | None:
    """What makes `report` (a JSON object) not a node report, in a few words; None when it is one."""
    code = report.get("exit_code")
    if isinstance(code, bool) or code not in EXIT_CODES:
        what = f"is {kind_of(code)} ({shown(code)})" if code is not None else "is missing"
        return f"exit_code {what}, not 0, 1, 2 or 3"
    results = report.get("results")
    if not isinstance(results, list):
        return f"results is {kind_of(results)}, not a list" if "results" in report else "results is missing"
    if not results:  # an agent that judged nothing proved nothing: never a passing node
        return "results is empty: the agent judged no check"
    for index, result in enumerate(results):
        found = result_problem(index, result)
        if found:
            return found
    for name in ("facts", "thresholds", "counts"):
        found = facts_problem(report.get(name)) if name == "facts" else mapping_problem(name, report.get(name))
        if found:
            return found
    for name in TOP_TEXT:
        if report.get(name) is not None and not isinstance(report[name], str):
            return f"{name} is {kind_of(report[name])}, not text"
    said = exit_code([Result(str(r["check"]), Status(r["status"]), observed=r.get("observed") is True)
                      for r in results])
    if said != code:
        return f"exit_code {code} but its results say {said}"
    return None
