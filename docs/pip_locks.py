"""Write the hash-locked requirement files the roles install with `pip install --require-hashes`.

    python docs/pip_locks.py              # resolve and rewrite every lock below (needs PyPI)
    python docs/pip_locks.py agent        # only these locks (names: agent, gpu-cupy-cuda12x, ...)
    python docs/pip_locks.py --verify     # rewrite nothing: check each lock resolves, complete, on each python

Each lock is resolved by pip itself (`pip install --dry-run --report`, wheels only, for the lock's
CPython versions on manylinux x86_64), the oldest python first; the other pythons are resolved under
those pins, so one version per package serves them all (a package one python needs and another does
not gets an environment marker). Every wheel PyPI publishes for each pinned release that such a host
can install is listed with its sha256 (from PyPI's JSON simple API), so pip on the node picks the
wheel it would pick anyway and refuses any file whose hash is not here. No sdist is listed (nothing is
built from source), except in the Horovod lock, which is the sdist the frameworks role compiles.

What is locked and why some is not: roles/frameworks/files/locks/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
INDEX = "https://pypi.org/simple"
# x86_64 hosts the roles support: glibc 2.34 (RHEL 9) to 2.39 (Ubuntu 24.04); older manylinux tags
# run there too.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
PIP_TIMEOUT_S = 900
HTTP_TIMEOUT_S = 60


def _catalog_pins(site: str, stack: str) -> list[str]:
    versions = yaml.safe_load((REPO / "inventory" / site / "group_vars" / "all" / "versions.yml").read_text())
    entry = versions["gpu_stack_catalog"][stack]
    # Horovod's own requirements (unpinned in the catalog) go in too: the lock installs them, hashed,
    # before the Horovod build asks for them.
    return list(entry["pip_packages"]) + list((entry.get("horovod") or {}).get("requirements") or [])


def _agent_requirements() -> list[str]:
    """[project] dependencies of pyproject.toml (read without a TOML parser: Python 3.10 has none)."""
    block = re.search(r"^dependencies = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.M | re.S)
    return re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)


def _cupy_pin(wheel: str) -> list[str]:
    """The agent's gpu extra: one CuPy wheel at the gpucheck_agent role's gpucheck_agent_cupy_version."""
    defaults = yaml.safe_load((REPO / "roles" / "gpucheck_agent" / "defaults" / "main.yml").read_text())
    return [f"{wheel}=={defaults['gpucheck_agent_cupy_version']}"]


def _horovod_version() -> str:
    versions = yaml.safe_load((REPO / "inventory" / "prod" / "group_vars" / "all" / "versions.yml").read_text())
    return versions["gpu_stack_catalog"]["tf-horovod"]["horovod"]["version"]


@dataclass
class Lock:
    name: str
    path: Path
    what: str
    requirements: object  # a callable giving the top-level requirements
    pythons: list[str] = field(default_factory=lambda: ["3.10", "3.11"])
    sdist_only: bool = False


LOCKS = [
    Lock("agent", REPO / "roles/gpucheck_agent/files/requirements.lock",
         "the gpucheck agent's runtime dependencies (pyproject.toml [project] dependencies)", _agent_requirements,
         pythons=["3.10", "3.11", "3.12"]),
    # The agent's gpu extra, one lock per CuPy wheel (the role installs the one for the node's CUDA major);
    # CuPy and NumPy only: CuPy loads cuBLAS and NVRTC from the node's CUDA toolkit (the cuda role's).
    *(Lock(f"gpu-{wheel}", REPO / f"roles/gpucheck_agent/files/gpu-{wheel}.lock",
           f"the agent's gpu extra for CUDA {major} nodes ({wheel} at gpucheck_agent_cupy_version)",
           lambda wheel=wheel: _cupy_pin(wheel), pythons=["3.10", "3.11", "3.12"])
      for wheel, major in (("cupy-cuda12x", 12), ("cupy-cuda13x", 13))),
    Lock("tf-horovod", REPO / "roles/frameworks/files/locks/tf-horovod.txt",
         "stack tf-horovod of inventory/prod (pip_packages + horovod.requirements)",
         lambda: _catalog_pins("prod", "tf-horovod")),
    Lock("tf-horovod-cpu", REPO / "roles/frameworks/files/locks/tf-horovod-cpu.txt",
         "stack tf-horovod of inventory/lab (pip_packages + horovod.requirements)",
         lambda: _catalog_pins("lab", "tf-horovod")),
    Lock("horovod", REPO / f"roles/frameworks/files/locks/horovod-{_horovod_version()}.txt",
         "the Horovod source distribution the frameworks role compiles (pip wheel --no-binary horovod)",
         lambda: [f"horovod=={_horovod_version()}"], sdist_only=True),
]


def _pip(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)


def _platform_args(python: str, index: str) -> list[str]:
    return ["--ignore-installed", "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--python-version",
            python, "--implementation", "cp", "--index-url", index, "--cert", "/etc/ssl/certs/ca-certificates.crt"]


def resolve(requirements: list[str], python: str, index: str, constraints: dict[str, str] | None = None
            ) -> dict[str, str]:
    """{canonical name: version} pip installs for these requirements on this python."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        extra = []
        if constraints:
            (Path(tmp) / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in constraints.items()))
            extra = ["-c", str(Path(tmp) / "constraints.txt")]
        done = _pip("install", "--dry-run", "--quiet", "--report", str(report), *_platform_args(python, index),
                    *extra, *requirements)
        if done.returncode != 0:
            raise SystemExit(f"pip cannot resolve {requirements} for python {python}:\n{done.stderr[-3000:]}")
        installs = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def accepted_tags(pythons: list[str]) -> set[Tag]:
    tags: set[Tag] = set()
    for python in pythons:
        version = tuple(int(part) for part in python.split("."))
        tags |= set(cpython_tags(version, platforms=PLATFORMS))
        tags |= set(compatible_tags(version, interpreter=f"cp{version[0]}{version[1]}", platforms=PLATFORMS))
    return tags


def release_files(name: str, version: str, index: str) -> list[dict]:
    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        files = json.load(response)["files"]
    found = []
    for item in files:
        filename = item["filename"]
        try:
            if filename.endswith(".whl"):
                _, file_version, _, tags = parse_wheel_filename(filename)
            elif filename.endswith((".tar.gz", ".zip")):
                _, file_version = parse_sdist_filename(filename)
                tags = frozenset()
            else:
                continue
        except ValueError:
            continue
        if str(file_version) == version and not item.get("yanked"):
            found.append({"filename": filename, "sha256": item["hashes"]["sha256"], "tags": tags})
    return found


def hashes(name: str, version: str, pythons: list[str], index: str, sdist_only: bool) -> list[str]:
    files = release_files(name, version, index)
    if sdist_only:
        chosen = [f for f in files if not f["filename"].endswith(".whl")]
    else:
        tags = accepted_tags(pythons)
        chosen = [f for f in files if f["filename"].endswith(".whl") and f["tags"] & tags]
    if not chosen:
        raise SystemExit(f"{name}=={version}: PyPI has no {'sdist' if sdist_only else 'usable wheel'} for "
                         f"python {', '.join(pythons)} on linux x86_64")
    return sorted({f["sha256"] for f in chosen})


def lock_text(lock: Lock, index: str) -> str:
    requirements = lock.requirements()
    per_python: dict[str, dict[str, str]] = {}
    if lock.sdist_only:
        pins = {canonicalize_name(r.split("==")[0]): r.split("==")[1] for r in requirements}
        per_python = {python: pins for python in lock.pythons}
    else:
        oldest = resolve(requirements, lock.pythons[0], index)
        per_python[lock.pythons[0]] = oldest
        for python in lock.pythons[1:]:
            per_python[python] = resolve(requirements, python, index, constraints=oldest)
    names = sorted({name for pins in per_python.values() for name in pins})
    lines = [
        f"# Hash-locked requirements: {lock.what}.",
        f"# Generated by: `python docs/pip_locks.py {lock.name}` (do not edit by hand)",
        f"# Requirements: {' '.join(requirements)}",
        f"# Resolved: CPython {', '.join(lock.pythons)} on manylinux x86_64, from {index}; "
        + ("the source distribution only." if lock.sdist_only else "wheels only (no sdist: nothing is built)."),
        "# Install: pip install --require-hashes " + ("--no-binary :all: " if lock.sdist_only else
                                                      "--only-binary :all: ") + "-r THIS",
    ]
    for name in names:
        versions = {python: pins[name] for python, pins in per_python.items() if name in pins}
        if len(set(versions.values())) != 1:
            raise SystemExit(f"{name}: a different version per python ({versions}); pin it in the requirements")
        version = next(iter(versions.values()))
        marker = ""
        if len(versions) != len(lock.pythons):
            marker = " ; " + " or ".join(f'python_version == "{python}"' for python in versions)
        digests = hashes(name, version, list(versions), index, lock.sdist_only)
        lines.append(f"{name}=={version}{marker} \\")
        lines += [f"    --hash=sha256:{digest}" + (" \\" if i < len(digests) - 1 else "")
                  for i, digest in enumerate(digests)]
    return "\n".join(lines) + "\n"


def locked_pins(text: str) -> dict[str, tuple[str, str, set[str]]]:
    """{canonical name + marker: (name==version, marker, hashes)} of a lock's requirement lines."""
    pins = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", re.sub(r"(?m)^#.*\n", "", text)):
        entry = entry.replace("\\\n", " ")
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*==[^\s;]+)\s*(?:;\s*([^-\n]*?))?\s*((?:--hash=\S+\s*)*)$",
                         entry.strip())
        if not match:
            raise SystemExit(f"not a hash-locked requirement: {entry.strip()[:200]!r}")
        pin, marker, digests = match.group(1), (match.group(2) or "").strip(), match.group(3)
        name = canonicalize_name(pin.split("==")[0])
        pins[f"{name};{marker}"] = (pin, marker, set(re.findall(r"--hash=sha256:([0-9a-f]{64})", digests)))
    return pins


def verify(lock: Lock, index: str) -> list[str]:
    """Problems with a lock as it is, on each of its pythons: a package pip would install that the lock lacks
    or pins at another version, a wheel pip would pick whose hash is not listed, a requirement not covered.
    Resolved from metadata (no wheel is downloaded); the Horovod sdist is downloaded and hash-checked."""
    problems = []
    pins = locked_pins(lock.path.read_text())
    versions = {key.split(";")[0]: pin.split("==")[1] for key, (pin, _, _) in pins.items()}
    allowed = set().union(*(digests for _, _, digests in pins.values()))
    for requirement in lock.requirements():
        name = canonicalize_name(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        if name not in versions:
            problems.append(f"{lock.path.name}: {requirement} is not in the lock")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "pins.txt"
        plain.write_text("".join(f"{pin}{' ; ' + marker if marker else ''}\n" for pin, marker, _ in pins.values()))
        if lock.sdist_only:
            done = _pip("download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "-d", tmp,
                        "--index-url", index, "-r", str(lock.path))
            if done.returncode != 0:
                problems.append(f"{lock.path.name}: pip download refuses it: {done.stderr.strip()[-500:]}")
            return problems
        for python in lock.pythons:
            report = Path(tmp) / f"report-{python}.json"
            done = _pip("install", "--dry-run", "--quiet", "--report", str(report), *_platform_args(python, index),
                        "-r", str(plain))
            if done.returncode != 0:
                problems.append(f"{lock.path.name} on python {python}: {done.stderr.strip()[-800:]}")
                continue
            for item in json.loads(report.read_text())["install"]:
                name, version = canonicalize_name(item["metadata"]["name"]), item["metadata"]["version"]
                digest = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
                if versions.get(name) != version:
                    problems.append(f"{lock.path.name} on python {python}: pip installs {name}=={version}, "
                                    f"the lock has {versions.get(name, 'nothing')}")
                elif digest not in allowed:
                    problems.append(f"{lock.path.name} on python {python}: pip picks "
                                    f"{item['download_info']['url'].rsplit('/', 1)[-1]}, whose hash is not listed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify", action="store_true", help="check the locks as they are; write nothing")
    parser.add_argument("--index-url", default=INDEX)
    parser.add_argument("locks", nargs="*", help=f"lock names (default all: {', '.join(lk.name for lk in LOCKS)})")
    args = parser.parse_args(argv)
    unknown = set(args.locks) - {lock.name for lock in LOCKS}
    if unknown:
        parser.error(f"unknown lock(s): {', '.join(sorted(unknown))}")
    chosen = [lock for lock in LOCKS if not args.locks or lock.name in args.locks]
    problems = []
    for lock in chosen:
        if args.verify:
            problems += verify(lock, args.index_url)
            continue
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        lock.path.write_text(lock_text(lock, args.index_url))
        print(f"wrote {lock.path.relative_to(REPO)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
