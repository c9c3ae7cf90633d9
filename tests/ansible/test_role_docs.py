"""Every role documents its options where ansible-doc and the README read them.

- defaults/main.yml and meta/argument_specs.yml agree: every default has a spec option, and a literal
  default is the spec's `default:` (a template over inventory variables has none: ansible validates a
  spec default's type, and the description says what it amounts to);
- every spec option has a type and a description;
- each README's generated sections ("Role Variables", "Example Playbook") match the spec
  (`python docs/role_readmes.py --check`), and the generator keeps hand-written text.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(path.parent.parent.name for path in (REPO / "roles").glob("*/meta/argument_specs.yml"))


def load_generator():
    """docs/role_readmes.py, the one place that says what a templated default is."""
    spec = importlib.util.spec_from_file_location("role_readmes", REPO / "docs" / "role_readmes.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


templated = load_generator().templated


def load_role(role: str) -> tuple[dict, dict]:
    base = REPO / "roles" / role
    options = yaml.safe_load((base / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {}
    return options, defaults


def description(spec: dict) -> str:
    text = spec.get("description") or ""
    return " ".join(text) if isinstance(text, list) else str(text)


def test_every_role_is_found() -> None:
    assert {"preflight", "fabric_manager", "openmpi", "cluster_ssh", "gpucheck_validate"} <= set(ROLES)
    for role in ROLES:
        assert (REPO / "roles" / role / "defaults" / "main.yml").is_file(), role
        assert (REPO / "roles" / role / "README.md").is_file(), role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_in_the_argument_spec(role) -> None:
    options, defaults = load_role(role)
    for name, value in defaults.items():
        assert name in options, f"{role}: {name} is in defaults/main.yml but not in meta/argument_specs.yml"
        spec = options[name]
        if templated(value):
            assert "default" not in spec, f"{role}: {name} defaults to a template; the spec must not give a literal"
            assert "Defaults to" in description(spec), (
                f"{role}: {name} defaults to {value!r}: its description must say so ('Defaults to ...')"
            )
        else:
            assert "default" in spec, f"{role}: {name} has no `default:` in the spec (defaults/main.yml: {value!r})"
            assert spec["default"] == value, f"{role}: {name}: spec default {spec['default']!r} != defaults {value!r}"


@pytest.mark.parametrize("role", ROLES)
def test_every_spec_option_is_typed_described_and_backed_by_a_default(role) -> None:
    options, defaults = load_role(role)
    for name, spec in options.items():
        assert spec.get("type"), f"{role}: {name} has no type"
        assert description(spec).strip(), f"{role}: {name} has no description"
        if "default" in spec:
            # ansible takes a role's defaults from defaults/main.yml, never from the spec.
            assert name in defaults, f"{role}: {name} has a spec default but none in defaults/main.yml"


def test_ansible_doc_shows_the_defaults(ansible_repo) -> None:
    result = ansible_repo.run("ansible-doc", "-t", "role", "-r", "roles", "--json", "fabric_manager", "preflight")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = yaml.safe_load(result.stdout)
    fm = doc["fabric_manager"]["entry_points"]["main"]["options"]
    assert fm["fabric_manager_mode"]["default"] == "auto"
    assert fm["fabric_manager_hold"]["default"] is True
    pf = doc["preflight"]["entry_points"]["main"]["options"]
    assert pf["preflight_check_mode_bootstrap"]["default"] is False


def test_readmes_are_up_to_date_with_the_specs() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "role_readmes.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (
        "README sections out of date; run `python docs/role_readmes.py`\n" + result.stdout + result.stderr
    )


@pytest.fixture(scope="module")
def generator():
    return load_generator()


def test_generated_sections_name_every_option(generator) -> None:
    for role in ROLES:
        options, _ = load_role(role)
        block = generator.generated(REPO / "roles" / role)
        assert "## Role Variables" in block and "## Example Playbook" in block, role
        assert f"- role: {role}" in block, role
        for name in options:
            assert f"| `{name}` |" in block, f"{role}: {name} missing from the generated table"


def test_generator_keeps_hand_written_text(generator) -> None:
    block = generator.generated(REPO / "roles" / "fabric_manager")
    fresh = generator.updated("# fabric_manager\n\nHand-written above.\n", block)
    assert fresh.startswith("# fabric_manager\n\nHand-written above.\n\n" + generator.BEGIN)
    edited = fresh.replace(generator.END, generator.END + "\n\nHand-written below.") + "\n"
    stale = edited.replace("| `fabric_manager_hold` |", "| `fabric_manager_old` |")
    again = generator.updated(stale, block)
    assert again == edited
    assert "Hand-written above." in again and again.rstrip().endswith("Hand-written below.")
    assert generator.updated(again, block) == again
