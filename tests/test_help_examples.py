"""Every example a newcomer copies runs as written: the `gpucheck` examples of `--help` and the README parse with
the real parser and name profiles, checks, parsers and inventories that exist; the `python3 -m lab` examples parse
with the lab's parser and name scenarios that exist; and every command shown calls `python3`, which Debian 12 has
(`python` it has not)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpucheck import profiles
from gpucheck.cli import EPILOG as NODE_EPILOG
from gpucheck.cluster.cli import EPILOG as CLUSTER_EPILOG
from gpucheck.main import build_parser
from gpucheck.node.pipeline import UsageError, select_checks
from lab import cli as lab_cli
from lab import gpus
from support import ROOT

README = ROOT / "README.md"
EXAMPLE = re.compile(r"^\s*((?:gpucheck|python3 -m lab|ansible-playbook) .*)$")
# `python` (not python3) running a module, code or a script: Debian 12 has no `python` command
BARE_PYTHON = re.compile(r"(?<![\w/.-])python (?:-m|-c|\S+\.py)")


def examples(text: str) -> list[str]:
    """The commands of indented example lines (a comment after two spaces or `#` dropped)."""
    found = []
    for line in text.splitlines():
        match = EXAMPLE.match(line)
        if match:
            found.append(re.split(r"\s{2,}|\s#", match[1])[0].strip())
    return found


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    return [c for block in blocks for c in examples(block)]


GPUCHECK = [c for c in examples(NODE_EPILOG + CLUSTER_EPILOG) + readme_commands() if c.startswith("gpucheck ")]
LAB = [c for c in examples(lab_cli.DESCRIPTION + lab_cli.FAULT_HELP) + readme_commands()
       if c.startswith("python3 -m lab ")]
ANSIBLE = [c for c in examples(lab_cli.DESCRIPTION) + readme_commands() if c.startswith("ansible-playbook ")]


def test_the_examples_were_found() -> None:
    assert len(GPUCHECK) >= 15 and len(LAB) >= 9 and len(ANSIBLE) >= 3, (GPUCHECK, LAB, ANSIBLE)
    assert "gpucheck cluster -i inventory/prod --limit 'node0*' --profile dgx-h100" in GPUCHECK


@pytest.mark.parametrize("command", GPUCHECK)
def test_a_gpucheck_example_parses_and_names_what_exists(command: str, capsys: pytest.CaptureFixture) -> None:
    try:
        args = build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit:
        pytest.fail(f"`{command}` does not parse: {capsys.readouterr().err.strip()}")
    if getattr(args, "profile", None):
        assert args.profile in profiles.available(), f"`{command}`: no profile {args.profile} in checks/"
    if args.command == "node":
        try:
            select_checks(args.only or [], args.skip or [], args.full)
        except UsageError as exc:
            pytest.fail(f"`{command}`: {exc}")
    for inventory in getattr(args, "inventory", None) or []:
        assert (ROOT / inventory).exists(), f"`{command}`: no {inventory} in the repository"


@pytest.mark.parametrize("command", LAB)
def test_a_lab_example_parses_and_names_what_exists(command: str, capsys: pytest.CaptureFixture) -> None:
    try:
        args = lab_cli.build_parser().parse_args(shlex.split(command)[3:])
    except SystemExit:
        pytest.fail(f"`{command}` does not parse: {capsys.readouterr().err.strip()}")
    if args.command == "fault" and args.kind == "scenario":
        gpus.scenario_file(args.arg)  # LabError when lab/scenarios has no such scenario


@pytest.mark.parametrize("command", ANSIBLE)
def test_an_ansible_example_names_an_inventory_and_playbook_that_exist(command: str) -> None:
    argv = shlex.split(command)
    inventory = argv[argv.index("-i") + 1]
    assert (ROOT / inventory).exists(), f"`{command}`: no {inventory}"
    playbooks = [arg for arg in argv if arg.endswith(".yml") and not arg.startswith("@")]
    assert playbooks and all((ROOT / playbook).is_file() for playbook in playbooks), f"`{command}`: {playbooks}"


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "lab" / "cli.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_call_python3(path: Path) -> None:
    bare = [line.strip() for line in path.read_text().splitlines() if BARE_PYTHON.search(line)]
    assert bare == [], f"{path.relative_to(ROOT)}: `python` is not a command on Debian 12: {bare}"
