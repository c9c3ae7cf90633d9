"""`dcgmi diag` results, from the text table or from `dcgmi diag -j` JSON.

JSON may be preceded by non-JSON lines (warnings) and hold `null` entries in its test lists.
The text table has one row per test and continuation rows (empty name) for per-GPU results
("Fail - GPU: 3", DCGM 4's "GPU1: Fail") and for the Warning/Info detail of a test, which dcgmi cuts
into 45-character pieces, mid-word, one row each (dcgmi/Diag.cpp DisplayVerboseInfo). A fragment of
the table (rows without the header or the borders) is read as well.
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
# A whole continuation cell that is a result: "Fail - GPU: 2", "Pass - GPUs: 0, 1, 2" (DCGM 2/3), "GPU1: Fail"
# (DCGM 4: entity, then result), "Skip - GPUs: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1..." (dcgmi cut it at 46).
# Only a whole cell: a piece of a wrapped message that starts with "failed" is text, not a verdict.
_RESULT = re.compile(
    r"^(?:[A-Za-z_ ]*\d+\s*:\s*)?(?P<word>Pass(?:ed)?|Fail(?:ed)?|Warn(?:ing)?|Skip(?:ped)?|Not[ _]Run)"
    r"(?:\s*-\s*(?:All|GPUs?\s*:[\d, ]*(?:\.\.\.)?))?$", re.IGNORECASE)
# The patterns below are matched against stripped lines, so that none has two ways to take the same
# whitespace: each is linear in the length of the line, whatever is in it.
# A table row: "| name | result |"; a fragment may have lost the outer borders.
_ROW = re.compile(r"^\|?(?P<name>[^|]*)\|(?P<result>[^|]*)\|?$")
_CELL_WIDTH = 48  # between the inner "|" and the last: " " + 46 characters + " "
_SECTION = re.compile(r"^[|+]-+ *(?P<section>[A-Za-z]\w*(?: \w+)*) *-+\+")
_DETAIL = re.compile(r"^(?:Warning|Info|Error)\b", re.IGNORECASE)
_DETAIL_STATUS = {"error": "fail", "warning": "warn", "info": "skip"}  # a detail row that belongs to no test
_JSON_START = re.compile(r"^[ \t]*\{", re.MULTILINE)
_ERROR_LINE = re.compile(r"^Error *: *(?P<message>.+)$", re.IGNORECASE)


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


def _row(line: str) -> tuple[str, str, str] | None:
    """(name, result, raw result cell) of a table row; borders optional, one inner "|" required."""
    match = _ROW.match(line)
    if not match:
        return None
    return match["name"].strip(), match["result"].strip(), match["result"]


def _chunk(raw: str) -> str:
    """The text of a continuation cell. dcgmi cuts messages every 45 characters, mid-word, and pads the
    cell to 46 between "| " and " |": from an unaltered table the 45 characters are taken as they are,
    so the pieces join into the message; from a reflowed one, the words are joined with a space."""
    return raw[1:46] if len(raw) == _CELL_WIDTH else f" {raw.strip()} "


def _from_table(lines: list[str]) -> dict:
    tests: dict[str, str] = {}
    messages: dict[str, list[list[str]]] = {}  # test -> its Warning/Info/Error texts, in 45-character pieces
    errors: list[str] = []
    metadata: dict[str, str] = {}
    section = None
    current = None  # the test the rows below belong to
    message: list[str] | None = None  # the message being read
    seen_table = False
    for line in map(str.strip, lines):
        if match := _SECTION.match(line):
            section, current, message, seen_table = match["section"], None, None, True
            continue
        if match := _ERROR_LINE.match(line):
            errors.append(match["message"])
            continue
        row = _row(line)
        if not row:
            continue
        name, result, raw = row
        if name == "Diagnostic" and result == "Result":
            seen_table, message = True, None
        elif section == "Metadata":
            metadata[name] = result
        elif name and not _DETAIL.match(name):
            current, message = name, None
            status = _STATUS.match(result)
            tests[current] = _status(status["word"]) if status else "skip"
            seen_table = seen_table or bool(status)  # a fragment: rows without the header or borders
        elif current is None and not (name and _DETAIL.match(name)):
            continue
        elif current is None:  # an Error row before any test's: the diagnostic stopped there; its section fails
            current = section or "Diagnostic"
            tests[current] = _worst([tests.get(current, "skip"), _DETAIL_STATUS[_DETAIL.match(name)[0].lower()]])
            message = [f"{name}: ", _chunk(raw)]
            messages.setdefault(current, []).append(message)
        elif not name and (status := _RESULT.match(result)):  # per GPU: "Fail - GPU: 3", "GPU1: Fail"
            tests[current] = _worst([tests[current], _status(status["word"])])
            message = None
        elif name or message is None:  # "Warning", "Warning: GPU0", "Info", or a text row of the test
            message = [f"{name}: " if name else "", _chunk(raw)]
            messages.setdefault(current, []).append(message)
        else:  # the next 45 characters of the message above
            message.append(_chunk(raw))
    if not tests or not seen_table:
        if errors:
            raise ParseError(f"{KIND}: dcgmi reported an error: {errors[0]}")
        if seen_table:
            raise ParseError(f"{KIND}: the diagnostic's table holds no result (it ended before any test)")
        raise ParseError(f"not {KIND} output: no dcgmi diag result table or JSON")
    details = {test: [" ".join("".join(pieces).split()) for pieces in texts] for test, texts in messages.items()}
    return _result("text", tests, details, metadata.get("DCGM Version"),
                   metadata.get("Driver Version Detected"), _gpu_count(metadata), errors)


def _gpu_count(metadata: dict[str, str]) -> int | None:
    """From "GPU Device IDs Detected"; None when dcgmi cut the list short ("20b2, 20b2, 2...")."""
    ids = metadata.get("GPU Device IDs Detected")
    if not ids or ids.endswith("..."):
        return None
    return len([i for i in ids.split(",") if i.strip()])


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
