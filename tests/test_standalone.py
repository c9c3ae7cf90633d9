"""The repository stands alone: a fresh clone with nothing beside it has everything its tests read.

The real tool outputs the tests read are in tests/fixtures (its README.md says where they came from). No file
reads or cites the fixtures folder that used to sit beside the clone, and the whole suite collects from a copy
of this working tree (committed or not) with no such folder above it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

# The folder that sat beside the clone. Built from pieces, so that this file does not match its own pattern.
BESIDE = "sha" + "red"
OUTSIDE = re.compile(
    r"\.\./" + BESIDE + r"\b"                             # up one level into it
    + r"|\b" + BESIDE + r"/fixtures\b"                    # its fixtures folder, however reached
    + r"|[/(,]\s*[\"']" + BESIDE + r"[\"']"               # a path built with it as a component: / "x", ("x"
    + r"|[\"']" + BESIDE + r"[\"']\s*[/,)]")
FIXTURES_DIR = "tests/fixtures/"  # outputs reproduced byte for byte: not ours to scan or edit


def working_tree() -> list[str]:
    """Every file of the working tree that a commit could hold: tracked, and untracked but not ignored."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no file list to scan")
    done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                          capture_output=True, text=True, timeout=60, check=True)
    return sorted({name for name in done.stdout.split("\0") if name})


def test_no_file_reads_or_cites_a_folder_beside_the_clone() -> None:
    found: dict[str, set[str]] = {}
    for name in working_tree():
        path = ROOT / name
        if name.startswith(FIXTURES_DIR) or path.is_symlink() or not path.is_file():
            continue
        for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
            if OUTSIDE.search(line):
                found.setdefault(name, set()).add(line.strip())
    assert not found, (
        f"these read or cite a folder beside the clone: a fresh clone has none. The fixtures are in tests/fixtures: "
        f"{found}")


def copy_working_tree(to: Path) -> None:
    for name in working_tree():
        source, target = ROOT / name, to / name
        if not (source.is_symlink() or source.is_file()):
            continue  # deleted in the working tree, not yet in a commit
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


def test_the_suite_collects_from_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    repo = tmp_path / "solo" / "repo"
    copy_working_tree(repo)
    assert (repo / "tests" / "fixtures" / "real" / "SOURCES.md").is_file()
    assert [p.name for p in repo.parent.iterdir()] == ["repo"]  # nothing beside the copy, BESIDE least of all
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    environ["PYTHONPATH"] = str(repo / "agent")  # the copy's agent, not this checkout's
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=repo, env=environ, capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    tail = "\n".join(output.splitlines()[-40:])
    summary = re.findall(r"^(\d+) tests? collected(.*)$", output, re.M)
    assert done.returncode == 0 and summary, tail
    count, rest = summary[-1]
    assert int(count) > 2000, tail
    assert "error" not in rest.lower(), tail
