"""The gpucheck image the lab's nodes run (deploy/kubernetes's `gpucheck:latest`, here `lab.local/gpucheck:lab`),
packed without a registry or a container builder: this machine's Debian python3.11 with the libraries it and the
packages load (found with ldd), the agent from this checkout, and its dependencies (`gpucheck[kubernetes]`, and
numpy for the lab's fake CuPy) copied from this virtualenv with their compiled bytecode. It stands in for a site's
training image too (deploy/kubernetes/jobs/mpi.yaml's): Debian's OpenMPI, OpenSSH's server and client, and a passwd
naming root and sshd's privilege-separation user. Cached by all of that (the agent's source among it, so a changed
agent makes a new image)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

from lab import config
from lab.kubernetes import image_archive
from lab.kubernetes.build import Progress
from lab.progress import say
from lab.run import run

IMAGE = "lab.local/gpucheck:lab"
PREFIX = "kubernetes-gpucheck-image-"
PYTHON_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib")
# mpirun and its daemons, with the plugins OpenMPI and PMIx load by name (ldd does not see them), and sshd, ssh and
# ssh-keygen: what an MPI job's pods run (cluster/mpi_pods.py)
MPI_PACKAGES = ("openmpi-bin", "libopenmpi3", "openmpi-common", "libpmix2", "openssh-server", "openssh-client")
# the manifests' `sh -c` loops; dmesg, which gpu.xid reads the kernel log with (a privileged container reads the
# host's: the ring buffer is the kernel's)
TOOLS = ("/usr/bin/dash", "/usr/bin/sleep", "/usr/bin/env", "/usr/bin/dmesg", "/usr/bin/hostname", "/usr/bin/mkdir",
         "/usr/bin/mpirun")
ROOTS = (("gpucheck", ("kubernetes",)), ("numpy", ()))  # numpy: the lab's fake CuPy (lab/compute.py)
SITE = "/usr/local/lib/python3.11/dist-packages"  # on Debian's python3.11's path
AGENT = Path(__file__).resolve().parents[2] / "agent" / "gpucheck"
SKIPPED = re.compile(r"^/usr/share/(doc|man|lintian)/")
# the packages' own test suites, and the asyncio client of kubernetes>=35 (66 MB) that gpucheck never imports
NOT_RUN = re.compile(r"(^|/)tests?/|^kubernetes/aio/")
USERS = {"/etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n",
         "/etc/group": b"root:x:0:\nnogroup:x:65534:\n"}
ENTRY = b"#!/usr/bin/python3.11\nimport sys\n\nfrom gpucheck.main import main\n\nsys.exit(main())\n"  # pip's script
MERGED_USR = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}


def distributions() -> list[importlib.metadata.Distribution]:
    """The installed distributions ROOTS need, with their extras, gpucheck's own left out (it is this checkout)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(name, set(extras)) for name, extras in ROOTS]
    while todo:
        name, extras = todo.pop()
        dist = importlib.metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if not req.marker or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                todo.append((req.name, set(req.extras)))
    return [dist for key, dist in sorted(found.items()) if key != "gpucheck"]


def agent_files() -> dict[str, Path]:
    files = {}
    for top, dirs, names in os.walk(AGENT, followlinks=True):  # gpucheck/checks is a link to the profiles
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = Path(top, name)
            if path.suffix in (".py", ".yaml", ".json", ".txt"):
                files[f"{SITE}/gpucheck/{path.relative_to(AGENT)}"] = path.resolve()
    return files


def package_files(packages: Iterable[str]) -> list[str]:
    listed = run(["dpkg-query", "-L", *packages]).stdout.split("\n")
    return [p for p in listed if p.startswith("/") and not SKIPPED.match(p) and os.path.isfile(p)]


def content() -> tuple[dict[str, Path | bytes], dict[str, str]]:
    """(files: image path -> source or content, links: image path -> target) of the whole image."""
    files: dict[str, Path | bytes] = {"/usr/local/bin/gpucheck": ENTRY, **USERS}
    links: dict[str, str] = dict(MERGED_USR)
    for dist in distributions():
        base = Path(dist.locate_file(""))
        for rel in dist.files or []:
            source = base / rel
            if not str(rel).startswith("..") and not NOT_RUN.search(str(rel)) and source.is_file():
                files[f"{SITE}/{rel}"] = source
    files.update(agent_files())
    for path in package_files(PYTHON_PACKAGES + MPI_PACKAGES) + list(TOOLS):
        _add_real(path, files, links)
    paths = [source for source in files.values() if isinstance(source, Path)]
    bundled = {os.path.realpath(source) for source in paths}  # a wheel's own libraries (numpy.libs)
    for library in _libraries([source for source in paths if _is_elf(source)]):
        if os.path.realpath(library) not in bundled:  # as ldd names it: /lib64/ld-linux-x86-64.so.2 too
            _add_real(library, files, links)
    links["/usr/bin/sh"] = "dash"
    links["/usr/bin/python3"] = "python3.11"
    return files, links


def _add_real(path: str, files: dict[str, Path | bytes], links: dict[str, str]) -> None:
    """A file by its real path (merged /usr), and the name it was asked by as a link to it."""
    real = os.path.realpath(path)
    files[real] = Path(real)
    named = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    if named != real:
        links[named] = os.path.relpath(real, os.path.dirname(named))


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _libraries(elves: list[Path]) -> set[str]:
    found = set()
    for start in range(0, len(elves), 200):
        proc = subprocess.run(["ldd", *map(str, elves[start:start + 200])], capture_output=True, text=True,
                              timeout=120)
        found |= set(re.findall(r"(?:=>\s*)?(/\S+)\s+\(0x", proc.stdout))
    return found


def cache_key(files: dict[str, Path | bytes], links: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for target, source in sorted(files.items()):
        if isinstance(source, bytes):
            digest.update(f"{target}\0".encode() + source)
            continue
        stat = source.stat()
        digest.update(f"{target}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
    digest.update(json.dumps(sorted(links.items())).encode())
    return digest.hexdigest()[:16]


def ensure(progress: Progress = say) -> Path:
    """The image's archive (docker-archive tarball), packed again only when something in it changed; the archives
    of earlier agents are removed (a lab still running keeps the one bound into its hosts)."""
    files, links = content()
    out = config.CACHE_DIR / f"{PREFIX}{cache_key(files, links)}.tar"
    if out.is_file():
        progress(f"the gpucheck image: cached in {out}")
        return out
    config.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(f".tmp{os.getpid()}")
    image_archive.pack(partial, IMAGE, files, links, cmd=["gpucheck", "--help"])
    partial.rename(out)
    for old in config.CACHE_DIR.glob(f"{PREFIX}*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    progress(f"the gpucheck image: {len(files)} files, {out.stat().st_size / 2**20:.0f} MiB, in {out}")
    return out
