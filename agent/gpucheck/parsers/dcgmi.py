"""`dcgmi diag` results, from the text table or from `dcgmi diag -j` JSON.

JSON may be preceded by non-JSON lines (warnings) and hold `null` entries in its test lists.
The text table has one row per test and continuation rows (empty name) for per-GPU results
and for the Warning/Info detail of a failed test.
"""

from __future__ import annotations

import json
import re

from ._common import ParseError, guard, text_lines

KIND = "dcgmi"

_WORST_FIRST = ("fail", "warn", "pass", "skip")
_STATUS_WORDS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "warn": "warn",
                 "warning": "warn", "skip": "skip", "skipped": "skip", "not run": "skip", "not_run": "skip"}
_STATUS = re.compile(r"^(?:GPU\s*\d+\s*:\s*)?(?P<word>Pass(?:ed)?|Fail(?:ed)?|Warn(?:ing)?|Skip(?:ped)?|Not[ _]Run)\b",
                     re.IGNORECASE)
_ROW = re.compile(r"^\s*\|(?P<name>[^|]*)\|(?P<result>[^|]*)\|\s*$")
_SECTION = re.compile(r"^\s*[|+]-+\s*(?P<section>[A-Za-z][\w ]*?)\s*-+\+")
_DETAIL = re.compile(r"^(?:Warning|Info|Error)\b", re.IGNORECASE)
_JSON_START = re.compile(r"^\s*\{", re.MULTILINE)
_ERROR_LINE = re.compile(r"^\s*Error\s*:\s*(?P<message>.+?)\s*$", re.IGNORECASE)


def _worst(statuses: list[str]) -> str:
    return next((s for s in _WORST_FIRST if s in statuses), "skip")


def _status(word: str | None) -> str | None:
    return _STATUS_WORDS.get(str(word).strip().lower()) if word is not None else None


@guard(KIND)
def parse(text: str) -> dict:
    text_lines(text, KIND)  # rejects empty and binary input
    start = _JSON_START.search(text)
    if start:
        try:
            document, _ = json.JSONDecoder().raw_decode(text[start.start():].lstrip())
        except json.JSONDecodeError as exc:
            if "|" not in text:
                raise ParseError(f"not {KIND} output: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
        else:
            return _from_json(document)
    return _from_table(text_lines(text, KIND))


def _find_key(node: object, key: str) -> dict | None:
    """The first dict (depth first) that has `key`, or None."""
    if isinstance(node, dict):
        if key in node:
            return node
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    return next((found for child in children if (found := _find_key(child, key)) is not None), None)


def _gpu_ids(result: dict) -> set[str]:
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None and str(result.get("entity_group", "GPU")).upper() == "GPU":
        ids = result.get("entity_id")
    if ids is None:
        return set()
    return {part.strip() for part in str(ids).split(",") if part.strip()}


def _messages(result: dict) -> list[str]:
    """Warning/error/info text of one result: a string, a list of strings or of {"warning": ...}."""
    messages = []
    for key in ("warnings", "errors", "info"):
        value = result.get(key) or []
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                item = item.get("warning") or item.get("message") or item.get("error")
            if item:
                messages.append(str(item))
    return messages


def _from_json(document: object) -> dict:
    diagnostic = _find_key(document, "test_categories")
    if diagnostic is None:
        error = _find_key(document, "runtime_error")
        reason = f"dcgmi diag did not run: {error['runtime_error']}" if error else "no test_categories in JSON"
        raise ParseError(f"{KIND}: {reason}")
    tests: dict[str, str] = {}
    details: dict[str, list[str]] = {}
    gpus: set[str] = set()
    for category in diagnostic["test_categories"] or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict) or not test.get("name"):
                continue  # DCGM 3.x writes null entries between tests
            results = [r for r in test.get("results") or [] if isinstance(r, dict)]
            summary = test.get("test_summary")
            statuses = [_status(r.get("status")) for r in results]
            if isinstance(summary, dict):
                statuses.append(_status(summary.get("status")))
            name = str(test["name"])
            tests[name] = _worst([s for s in statuses if s])
            for result in results:
                gpus |= _gpu_ids(result)
                if messages := _messages(result):
                    details.setdefault(name, []).extend(messages)
    version = diagnostic.get("version")
    metadata = _find_key(document, "DCGM Version")
    if version is None and metadata:
        version = metadata["DCGM Version"]
    if version is None and isinstance(document, dict):
        version = document.get("version")
    return _result("json", tests, details, version, None, len(gpus) or None, [])


def _from_table(lines: list[str]) -> dict:
    tests: dict[str, str] = {}
    details: dict[str, list[str]] = {}
    errors: list[str] = []
    metadata: dict[str, str] = {}
    section = None
    current = None
    seen_table = False
    for line in lines:
        if match := _SECTION.match(line):
            section, current, seen_table = match["section"], None, True
            continue
        if match := _ERROR_LINE.match(line):
            errors.append(match["message"])
            continue
        row = _ROW.match(line)
        if not row:
            continue
        name, result = row["name"].strip(), row["result"].strip()
        if name == "Diagnostic" and result == "Result":
            seen_table = True
        elif section == "Metadata":
            metadata[name] = result
        elif name and not _DETAIL.match(name):
            current = name
            status = _STATUS.match(result)
            tests[current] = _status(status["word"]) if status else "skip"
        elif current is not None:
            status = _STATUS.match(result) if not name else None
            if status:  # continuation row: a per-GPU result of the same test
                tests[current] = _worst([tests[current], _status(status["word"])])
            elif result:
                details.setdefault(current, []).append(f"{name}: {result}" if name else result)
    if not seen_table or not tests:
        if errors:
            raise ParseError(f"{KIND}: dcgmi reported an error: {errors[0]}")
        raise ParseError(f"not {KIND} output: no dcgmi diag result table or JSON")
    ids = metadata.get("GPU Device IDs Detected")
    gpu_count = len([i for i in ids.split(",") if i.strip()]) if ids else None
    return _result("text", tests, details, metadata.get("DCGM Version"),
                   metadata.get("Driver Version Detected"), gpu_count, errors)


def _result(fmt, tests, details, version, driver, gpu_count, errors) -> dict:
    return {
        "format": fmt,
        "version": version,
        "driver_version": driver,
        "gpu_count": gpu_count,
        "tests": tests,
        "details": details,
        "errors": errors,
        "failed": any(s == "fail" for s in tests.values()),
    }
