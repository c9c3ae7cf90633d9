"""Repository signing keys are installed only when their OpenPGP fingerprint is the published one.

roles/signing_key runs for real here (ansible-playbook on localhost, file:// URLs) against keys made
by gpg in the test: the right key is installed (ASCII-armored, idempotently), a wrong key, a file with
an extra key, a file with no key, a checksum mismatch and a key without a fingerprint to check are
refused with a message naming the URL and the fingerprints, and nothing is written. A static test
holds every key download in roles/ to that role.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GPG = shutil.which("gpg")
needs_gpg = pytest.mark.skipif(GPG is None or os.geteuid() != 0, reason="needs gpg and root (keys are owned by root)")


def gpg(home: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([GPG, "--batch", "--no-tty", "--homedir", str(home), *args], capture_output=True,
                          timeout=60, check=True, **kwargs)


def make_key(tmp_path: Path, name: str) -> tuple[str, bytes]:
    """A fresh ed25519 key: (fingerprint, armored public key)."""
    home = tmp_path / f"gnupg-{name}"
    home.mkdir(mode=0o700)
    try:
        gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.org>", "ed25519", "sign", "never")
        listing = gpg(home, "--with-colons", "--list-keys", text=True).stdout
        armored = gpg(home, "--armor", "--export").stdout
    finally:  # key generation starts a gpg-agent for that home: end it
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, timeout=30,
                       check=False)
    fingerprint = re.search(r"^fpr:(?:[^:]*:){8}([0-9A-F]+):", listing, re.MULTILINE).group(1)
    return fingerprint, armored


def spaced(fingerprint: str) -> str:
    """The way vendors print a fingerprint: groups of four, lower case here to test normalising."""
    return " ".join(fingerprint[i:i + 4] for i in range(0, len(fingerprint), 4)).lower()


def case(name: str, **role_vars) -> dict:
    """Include the role; record 'ok' or the failure message under results[name]."""
    return {
        "name": f"Case {name}",
        "block": [
            {"ansible.builtin.include_role": {"name": "signing_key"}, "vars": role_vars},
            {"ansible.builtin.set_fact": {"results": f"{{{{ results | combine({{'{name}': 'ok'}}) }}}}"}},
        ],
        "rescue": [
            {"ansible.builtin.set_fact": {"results": (
                f"{{{{ results | combine({{'{name}': ansible_failed_result.msg | default('failed') }}) }}}}")}},
        ],
    }


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    if GPG is None:
        pytest.skip("needs gpg")
    tmp = tmp_path_factory.mktemp("keys")
    good_fpr, good = make_key(tmp, "good")
    bad_fpr, bad = make_key(tmp, "bad")
    files = {"good.asc": good, "bad.asc": bad, "both.asc": good + bad, "junk.html": b"<html>404 Not Found</html>\n"}
    home = tmp / "gnupg-dearmor"
    home.mkdir(mode=0o700)
    files["good.gpg"] = gpg(home, "--dearmor", input=good).stdout
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return {"dir": tmp, "good": good_fpr, "bad": bad_fpr, "good_armored": good}


def run_play(ansible_repo, tasks: list, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    play = [{"name": "Signing keys", "hosts": "localhost", "gather_facts": False,
             "vars": {"results": {}}, "tasks": tasks}]
    playbook = ansible_repo.tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = ansible_repo.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    done = ansible_repo.run("ansible-playbook", "-i", str(inventory), str(playbook), *args, timeout=600)
    return done, done.stdout + done.stderr


@needs_gpg
def test_only_a_key_with_the_published_fingerprint_is_installed(ansible_repo, keys) -> None:
    src, out = keys["dir"], ansible_repo.tmp_path / "keyrings"
    out.mkdir()
    good, bad = keys["good"], keys["bad"]
    url = f"file://{src}"
    results = ansible_repo.tmp_path / "results.json"
    tasks = [
        case("right", signing_key_url=f"{url}/good.asc", signing_key_dest=f"{out}/right.asc",
             signing_key_fingerprints=[spaced(good)]),
        case("again", signing_key_url=f"{url}/good.asc", signing_key_dest=f"{out}/right.asc",
             signing_key_fingerprints=[good]),
        case("binary", signing_key_url=f"{url}/good.gpg", signing_key_dest=f"{out}/binary.asc",
             signing_key_fingerprints=[good]),
        case("wrong", signing_key_url=f"{url}/bad.asc", signing_key_dest=f"{out}/wrong.asc",
             signing_key_fingerprints=[good], signing_key_fingerprints_option="site_key_fingerprints"),
        case("extra", signing_key_url=f"{url}/both.asc", signing_key_dest=f"{out}/extra.asc",
             signing_key_fingerprints=[good]),
        case("junk", signing_key_url=f"{url}/junk.html", signing_key_dest=f"{out}/junk.asc",
             signing_key_fingerprints=[good]),
        case("checksum", signing_key_url=f"{url}/good.asc", signing_key_dest=f"{out}/checksum.asc",
             signing_key_fingerprints=[good], signing_key_checksum="sha256:" + "0" * 64),
        case("none", signing_key_url=f"{url}/good.asc", signing_key_dest=f"{out}/none.asc",
             signing_key_fingerprints=[], signing_key_fingerprints_option="site_key_fingerprints",
             signing_key_unverified_ok_option="site_key_unverified_ok"),
        case("unverified", signing_key_url=f"{url}/bad.asc", signing_key_dest=f"{out}/unverified.asc",
             signing_key_fingerprints=[], signing_key_unverified_ok=True),
        case("malformed", signing_key_url=f"{url}/good.asc", signing_key_dest=f"{out}/malformed.asc",
             signing_key_fingerprints=[good[:16]]),
        {"name": "Write the results", "ansible.builtin.copy": {
            "content": "{{ results | to_json }}", "dest": str(results), "mode": "0644"}},
    ]
    done, output = run_play(ansible_repo, tasks)
    assert done.returncode == 0, output[-4000:]
    got = json.loads(results.read_text())

    # accepted: the right key, given with spaces and in lower case, armored or binary
    assert got["right"] == got["again"] == got["binary"] == "ok", got
    assert (out / "right.asc").read_bytes() == keys["good_armored"]
    assert (out / "binary.asc").read_bytes() == keys["good_armored"]  # written ASCII-armored for apt's .asc
    assert (out / "right.asc").stat().st_mode & 0o777 == 0o644
    # refused, naming the URL, what was found and what was expected; nothing written
    assert got["wrong"].startswith(f"The signing key at {url}/bad.asc is not the expected one"), got["wrong"]
    assert f"its fingerprint is {bad}; expected {good} (site_key_fingerprints)" in got["wrong"]
    assert bad in got["extra"] and good in got["extra"] and "not the expected one" in got["extra"]
    assert "holds no OpenPGP public key" in got["junk"], got["junk"]
    assert "checksum" in got["checksum"].lower(), got["checksum"]
    assert got["none"].startswith(f"No fingerprint to check the signing key at {url}/good.asc against: set "
                                  "site_key_fingerprints"), got["none"]
    assert "site_key_unverified_ok: true" in got["none"]
    assert "40 hex digits" in got["malformed"], got["malformed"]
    # unverified only when asked for, and said loudly
    assert got["unverified"] == "ok"
    assert f"UNVERIFIED (signing_key_unverified_ok: true); its fingerprint is {bad}" in " ".join(output.split())
    assert sorted(p.name for p in out.iterdir()) == ["binary.asc", "right.asc", "unverified.asc"]
    # idempotent: the three first installs and the results file are the only changes (the scratch
    # directory and the download into it never count; installing the same key again changes nothing)
    assert ansible_repo.recap(output)["localhost"]["changed"] == 4, output[-3000:]


@needs_gpg
def test_check_mode_downloads_nothing_and_says_what_it_would_install(ansible_repo, keys) -> None:
    dest = ansible_repo.tmp_path / "never.asc"
    url = f"file://{keys['dir']}/bad.asc"
    done, output = run_play(ansible_repo, [
        {"ansible.builtin.include_role": {"name": "signing_key"},
         "vars": {"signing_key_url": url, "signing_key_dest": str(dest), "signing_key_fingerprints": [keys["good"]]}},
    ], "--check")
    assert done.returncode == 0, output[-3000:]
    flat = " ".join(output.split())
    assert f"Check mode: a real run downloads {url} and installs it as {dest} only if its fingerprint is " \
           f"{keys['good']}" in flat
    assert not dest.exists()


# ---------------------------------------------------------------------------------------------- static
def tasks_in(path: Path):
    """Every task of a tasks file, blocks opened."""
    def walk(items):
        for task in items or []:
            if not isinstance(task, dict):
                continue
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key))
    yield from walk(yaml.safe_load(path.read_text()))


def module(task: dict) -> str:
    for key in task:
        if key.startswith("ansible.builtin.") or key in ("get_url", "apt_key", "rpm_key", "uri", "include_role"):
            return key.removeprefix("ansible.builtin.")
    return ""


TASK_FILES = sorted(p for p in (REPO / "roles").glob("*/*/*.yml") if p.parent.name in ("tasks", "handlers"))
# a key file path, templated parts ({{ ... }}) included
KEY_PATH = re.compile(r"/etc/(?:apt/keyrings|pki/rpm-gpg)/(?:\{\{.*?\}\}|[^\s\"',{])+")


def signing_key_includes() -> list[tuple[Path, dict]]:
    return [(path, task.get("vars") or {}) for path in TASK_FILES for task in tasks_in(path)
            if module(task) == "include_role" and task[next(k for k in task if k.endswith("include_role"))]
            .get("name") == "signing_key"]


# Downloads that are not keys, each verified by a pinned sha256 the role refuses to go without (and the test
# that shows it): (role, tasks file) -> the test.
CHECKSUMMED = {
    ("nccl_tests", "build.yml"): "test_burnin_roles.py::test_nccl_tests_without_a_checksum_stops_before_downloading",
}


def test_every_key_download_goes_through_the_fingerprint_check() -> None:
    for path in TASK_FILES:
        if path.is_relative_to(REPO / "roles" / "signing_key"):
            continue
        for task in tasks_in(path):
            kind = module(task)
            if kind == "get_url" and (path.parent.parent.name, path.name) in CHECKSUMMED:
                checksum = task["ansible.builtin.get_url"].get("checksum", "")
                assert re.fullmatch(r"sha256:\{\{ \w+ \}\}", checksum), f"{path}: {task.get('name')}: {checksum!r}"
                continue
            assert kind not in ("get_url", "apt_key", "rpm_key"), f"{path}: {task.get('name')}: downloads outside " \
                "roles/signing_key (keys go through it; anything else needs its own verification and a test)"
            if kind == "yum_repository":
                key = task["ansible.builtin.yum_repository"].get("gpgkey", "")
                assert key.startswith("file:///etc/pki/rpm-gpg/"), f"{path}: {task['name']}: dnf would import {key} " \
                    "unverified; verify it with signing_key and point gpgkey at the file"
    includes = signing_key_includes()
    assert {path.parent.parent.name for path, _ in includes} >= {"nvidia_repo", "infiniband", "frameworks"}
    for path, role_vars in includes:
        assert "signing_key_fingerprints" in role_vars, f"{path}: signing_key without fingerprints"
        assert role_vars.get("signing_key_unverified_ok") is not True, f"{path}: unverified keys hard-wired"


def test_every_installed_key_file_is_a_verified_one() -> None:
    """A repository may only trust a key file that signing_key wrote (or the distribution's own keyring)."""
    verified = {str(role_vars["signing_key_dest"]) for _, role_vars in signing_key_includes()}
    sources = TASK_FILES + sorted((REPO / "roles").glob("*/templates/*.j2"))
    for path in sources:
        if path.is_relative_to(REPO / "roles" / "signing_key"):
            continue
        for used in KEY_PATH.findall(path.read_text()):
            if used == "/etc/apt/keyrings":
                continue
            assert used in verified or used.rstrip("/") in ("/etc/apt/keyrings", "/etc/pki/rpm-gpg"), (
                f"{path}: trusts {used}, which no signing_key include writes")


CUDA_DEB = ["EB693B3035CD5710E231E123A4B469963BF863CC"]  # github.com/NVIDIA/cuda-repo-management, SIGNATURES.md
CUDA_RPM = ["610C7B14E068A878070DA4E99CD0A493D42D0685"]  # same page
EPEL_9 = ["FF8AD1344597106ECE813B918A3872BF3228467C"]  # fedoraproject.org/security
PUBLISHED = {
    ("nvidia_repo", "vars/Debian.yml", "__nvidia_repo_key_fingerprints"): CUDA_DEB,
    ("nvidia_repo", "vars/Ubuntu.yml", "__nvidia_repo_key_fingerprints"): CUDA_DEB,
    ("nvidia_repo", "vars/RedHat.yml", "__nvidia_repo_key_fingerprints"): CUDA_RPM,
    ("nvidia_repo", "defaults/main.yml", "nvidia_repo_epel_key_fingerprints"): EPEL_9,
}


@pytest.mark.parametrize(("role", "file", "name"), list(PUBLISHED))
def test_default_fingerprints_are_the_published_ones_with_their_source(role, file, name) -> None:
    path = REPO / "roles" / role / file
    assert yaml.safe_load(path.read_text())[name] == PUBLISHED[(role, file, name)]
    text = path.read_text()
    before = text[:text.index(f"{name}:")].rstrip().splitlines()[-4:]
    assert any("https://" in line for line in before), f"{path}: {name} needs its source URL in a comment above it"


def test_deadsnakes_key_is_checked_against_launchpads_fingerprint() -> None:
    path = REPO / "roles" / "frameworks" / "vars" / "Ubuntu-24.yml"
    [repo] = yaml.safe_load(path.read_text())["__frameworks_apt_repositories"]
    assert repo["name"] == "deadsnakes"
    assert repo["key_fingerprints"] == ["F23C5A6CF475977595C89F51BA6932366A755776"]
    assert "https://launchpad.net/~deadsnakes/+archive/ubuntu/ppa" in path.read_text()


def test_vendor_ofed_without_a_fingerprint_fails_before_anything_is_installed(ansible_repo) -> None:
    playbook = ansible_repo.tmp_path / "ofed.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "OFED", "hosts": "localhost", "gather_facts": True,
        "roles": [{"role": "infiniband", "vars": {
            "infiniband_stack": "ofed", "infiniband_ofed_repo_url": "https://mirror.example.org/doca/",
            "infiniband_ofed_key_url": "https://mirror.example.org/doca/GPG-KEY-Mellanox.pub"}}]}]))
    inventory = ansible_repo.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    done = ansible_repo.run("ansible-playbook", "--check", "-i", str(inventory), str(playbook))
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert "infiniband_stack=ofed needs infiniband_ofed_key_fingerprints" in output, output[-3000:]
    assert "infiniband_ofed_key_unverified_ok: true" in output
    assert "TASK [infiniband : Install the RDMA" not in output
