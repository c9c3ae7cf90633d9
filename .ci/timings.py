"""Where a test run's time went, from pytest's JUnit XML (`--junitxml`): the run's wall time against CI's limit,
the time per test directory, and the slowest tests. Standard library only: it runs in CI's plain python3.

    python3 .ci/timings.py REPORT.xml [--wall SECONDS] [--limit SECONDS] [--slowest N] [--markdown]

A test's time is JUnit's: its setup, call and teardown together, so a module or session fixture counts in the
first test that uses it. Under pytest-xdist the directories' times add up to more than the wall time: they are
worker time, spent side by side."""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass

LIMIT_S = 90 * 60  # CI's limit: past it, nothing submitted lands
BUDGET_S = 40 * 60  # what the suite may take of it (issue 34)


@dataclass(frozen=True)
class Case:
    nodeid: str
    seconds: float
    outcome: str  # passed, failed, error, skipped
    cpu_s: float | None = None  # the cpu_s property tests/conftest.py records: this process and its waited children


def cases(path: str) -> list[Case]:
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if name.rfind("@") > name.rfind("]"):  # pytest-xdist's loadgroup appends `@group` to the id
            name = name[:name.rfind("@")]
        # JUnit writes tests.cluster.test_x (and tests.cluster.test_x.TestClass) for tests/cluster/test_x.py
        parts = classname.split(".")
        cut = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
        nodeid = "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name]) if classname else name
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        cpu = next((float(prop.get("value") or 0) for prop in case.iter("property") if prop.get("name") == "cpu_s"),
                   None)
        found.append(Case(nodeid, float(case.get("time") or 0), outcome, cpu))
    return found


def directory_of(nodeid: str) -> str:
    """tests/cluster_lab/test_x.py::t -> tests/cluster_lab; tests/test_x.py::t -> tests (its own files)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def by_directory(found: list[Case]) -> list[tuple[str, int, float, float]]:
    """(directory, tests, test seconds, CPU seconds), the longest first."""
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    for case in found:
        count[directory_of(case.nodeid)] += 1
        total[directory_of(case.nodeid)] += case.seconds
        cpu[directory_of(case.nodeid)] += case.cpu_s or 0
    return sorted(((d, count[d], total[d], cpu[d]) for d in total), key=lambda row: -row[2])


def report(found: list[Case], wall: float | None, limit: float, slowest: int, markdown: bool) -> str:
    lines = []
    if wall is not None:
        share = 100 * wall / limit
        verdict = "over CI's budget" if wall > BUDGET_S else "within CI's budget"
        lines.append(f"CI: the suite took {minutes(wall)} of its {minutes(limit)} limit ({share:.0f} %; "
                     f"{verdict} of {minutes(BUDGET_S)})")
    rows = by_directory(found)
    worker = sum(row[2] for row in rows) or 1e-9
    with_cpu = any(case.cpu_s is not None for case in found)
    cpu_total = sum(row[3] for row in rows)
    lines.append(f"{len(found)} tests, {minutes(worker)} of test time"
                 + (f" ({worker / wall:.1f}x the wall time: workers side by side)" if wall else "")
                 + (f", {minutes(cpu_total)} of CPU" if with_cpu else ""))

    def cpu(seconds: float) -> str:
        return minutes(seconds) if with_cpu else "-"

    if markdown:
        lines += ["", "| directory | tests | time (min:s) | share | CPU (min:s) |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{d}` | {n} | {minutes(t)} | {100 * t / worker:.0f} % | {cpu(c)} |" for d, n, t, c in rows]
    else:
        lines += [f"  {d:<24} {n:>5} tests  {minutes(t):>7}  {100 * t / worker:3.0f} %  CPU {cpu(c):>7}"
                  for d, n, t, c in rows]
    lines.append(f"the {slowest} slowest tests (setup, call and teardown):")
    for case in sorted(found, key=lambda c: -c.seconds)[:slowest]:
        lines.append(f"  {case.seconds:7.1f} s  {case.nodeid}" + ("" if case.outcome == "passed" else
                                                                   f"  [{case.outcome}]"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="pytest's --junitxml file")
    parser.add_argument("--wall", type=float, help="the run's wall time in seconds")
    parser.add_argument("--limit", type=float, default=LIMIT_S, help="CI's limit in seconds (default 5400)")
    parser.add_argument("--slowest", type=int, default=10, help="how many of the slowest tests (default 10)")
    parser.add_argument("--markdown", action="store_true", help="the directory table in Markdown (docs/testing.md)")
    args = parser.parse_args(argv)
    try:
        found = cases(args.report)
    except (OSError, ET.ParseError) as exc:
        print(f"timings: cannot read {args.report}: {exc}", file=sys.stderr)
        return 3
    print(report(found, args.wall, args.limit, args.slowest, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
