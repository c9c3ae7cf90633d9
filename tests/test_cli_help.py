"""`gpucheck COMMAND --help` is that command's own help (its usage first, never the overview of every command that
`gpucheck --help` gives), and no help text ever breaks a word across lines, whatever the terminal's width."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter

import pytest

from gpucheck import main
from support import ROOT

COMMANDS = [["node"], ["parse"], ["profiles"], ["checks"], ["net"], ["net", "serve"], ["net", "send"], ["cluster"]]
WIDTHS = [40, 60, 80, 100, 120]


def help_text(argv: list[str], columns: int, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))  # argparse reads the width from it when it formats
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main.build_parser().parse_args([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_command_help_is_its_own(argv: list[str], capsys: pytest.CaptureFixture,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    text = help_text(argv, 100, capsys, monkeypatch)
    assert text.startswith(f"usage: gpucheck {' '.join(argv)} "), text[:200]
    flat = " ".join(text.split())
    assert main.DESCRIPTION not in flat
    assert " ".join(main.EPILOG.split()) not in flat
    assert "gpucheck COMMAND --help" not in flat and "COMMAND ..." not in flat
    # examples, where it has any, are of this command only
    others = {line.split()[1] for line in text.splitlines() if re.match(r"\s+gpucheck \w", line)}
    assert others <= {argv[0]}, others


def test_node_help_is_not_the_overview(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    overview = help_text([], 100, capsys, monkeypatch)
    node = help_text(["node"], 100, capsys, monkeypatch)
    assert "Prove that GPU servers are ready for distributed training." in overview
    assert "Prove that GPU servers are ready" not in node
    for line in ("gpucheck parse nccl-tests all_reduce.log", "gpucheck profiles", "gpucheck checks",
                 "gpucheck cluster -i inventory/prod", "cluster   check every node of an Ansible inventory"):
        assert line in overview and line not in node, line
    assert "Collect facts on this machine" in node and "--burn-seconds SECONDS" in node and "--slurm:" in node


def test_the_overview_lists_every_command_and_its_examples_parse(capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = help_text([], 100, capsys, monkeypatch)
    for command in ("node", "parse", "profiles", "checks", "net", "cluster"):
        assert re.search(rf"^    {command} +\S", text, re.M), command
    examples = [re.split(r"\s{2,}", m)[0] for m in re.findall(r"^  (gpucheck .*)$", main.EPILOG, re.M)]
    assert len(examples) >= 6
    for example in examples:
        main.build_parser().parse_args(shlex.split(example)[1:])


@pytest.mark.parametrize("argv", [[], *COMMANDS], ids=lambda argv: " ".join(argv) or "gpucheck")
def test_no_word_is_broken_at_any_width(argv: list[str], capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same words at every width as on a terminal so wide that nothing wraps: only the spaces between them
    differ (a word split by wrapping would be two other words, `all-` and `reduce`, `netwo` and `rk,mpi`)."""
    wide = Counter(help_text(argv, 1000, capsys, monkeypatch).split())
    for columns in WIDTHS:
        narrow = Counter(help_text(argv, columns, capsys, monkeypatch).split())
        assert narrow == wide, (columns, sorted((narrow - wide).elements()), sorted((wide - narrow).elements()))


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_every_line_fits_the_terminal(columns: int, capsys: pytest.CaptureFixture,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Prose and the example tables too (the terminal would wrap a longer line in the middle of a word): only a
    line holding a word longer than the space it has may be longer, and an option group's title."""
    for argv in [[], *COMMANDS]:
        for line in help_text(argv, columns, capsys, monkeypatch).splitlines():
            if len(line) > columns - 2:  # argparse's width: the terminal's less 2
                title = line.endswith(":") and not line[:1].isspace()
                assert title or max(map(len, line.split())) > 40, (argv, columns, line)


@pytest.mark.parametrize(("argv", "absent"), [
    (["node", "--help"], ["gpucheck.cluster", "gpucheck.history", "gpucheck.rma", "gpucheck.schedule"]),
    (["history", "--help"], ["gpucheck.cli", "gpucheck.rma", "gpucheck.schedule"])])
def test_a_command_imports_only_its_own_group_of_commands(argv: list[str], absent: list[str]) -> None:
    """What `gpucheck node` (a Slurm health check every few minutes on every node) pays at start: the node-side
    commands' modules, not the admin node's."""
    code = ("import json, sys\nfrom gpucheck import main\ntry:\n    main.main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT / "agent"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert argv[0] in done.stdout  # the command's own help was printed
    unwanted = [m for m in loaded if any(m == a or m.startswith(f"{a}.") for a in absent)]
    assert not unwanted, unwanted

