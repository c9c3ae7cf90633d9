"""ansible-lint, production profile, over all of the repository's Ansible content: zero findings."""

from __future__ import annotations


def test_ansible_lint_production_profile_is_clean(ansible_repo) -> None:
    result = ansible_repo.run("ansible-lint", "--offline", "--profile", "production", *ansible_repo.content)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"ansible-lint findings:\n{output}"
    assert "Profile 'production' was required, and it passed" in output


def test_no_lint_waivers(ansible_repo) -> None:
    """No skip lists: a `# noqa` is allowed only with its reason on the same line."""
    assert not (ansible_repo.repo / ".ansible-lint-ignore").exists()
    for path in (ansible_repo.repo / "roles").rglob("*.yml"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# noqa" in line:
                assert len(line.split("# noqa", 1)[1].split(maxsplit=1)) > 1, f"{path}:{number}: noqa without a reason"
