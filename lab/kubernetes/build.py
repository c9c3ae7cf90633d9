"""Build the control plane's binaries from Debian's archive alone, cached by the exact versions used.

The cache directory kubernetes-<key>/ holds bin/ and meta.json. It is assembled in kubernetes-<key>.tmp/ and
renamed into place only once complete, so a half-built one is never taken for a hit; the scratch dir of an
interrupted build is removed by the next one. One build at a time (a lock beside the cache): a second waits for the
first, then finds its result. The Go build cache is kept apart (kubernetes-gocache) so a
rebuild after a recipe change is warm.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lab import config
from lab.errors import LabError
from lab.progress import fmt_duration, say
from lab.run import run

RECIPE_VERSION = 2  # bump when anything below changes what gets built
SOURCE_PACKAGE = "kubernetes"
SOURCE_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"  # bookworm's; the binaries report it as v1.20.2
GIT_VERSION = "v1.20.2"
GO = "golang-1.19"
PACKAGES = (f"{GO}-go", f"{GO}-src", "etcd-server", "etcd-client", "kubernetes-client",
            "golang-github-modern-go-reflect2-dev")  # and rsync, installed: lab/apt-packages.txt
COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
FROM_DEBS = {"etcd": "usr/bin/etcd", "etcdctl": "usr/bin/etcdctl", "kubectl": "usr/bin/kubectl"}
GO_CACHE = config.CACHE_DIR / "kubernetes-gocache"
HEARTBEAT_S = 30
Progress = Callable[[str], None]


def candidate(package: str) -> str:
    """The version apt would install of package; LabError when it has none."""
    out = run(["apt-cache", "policy", package]).stdout
    match = re.search(r"^\s*Candidate:\s*(\S+)", out, re.M)
    if not match or match.group(1) == "(none)":
        raise LabError(f"package {package} cannot be had: apt knows no candidate for it (run `apt-get update`?)")
    return match.group(1)


def resolve() -> dict[str, str]:
    return {package: candidate(package) for package in PACKAGES}


def cache_key(versions: Mapping[str, str]) -> str:
    material = json.dumps({"recipe": RECIPE_VERSION, "source": f"{SOURCE_PACKAGE}={SOURCE_VERSION}",
                           "packages": dict(sorted(versions.items()))}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cache_dir(key: str) -> Path:
    return config.CACHE_DIR / f"kubernetes-{key}"


def find() -> Path | None:
    """The complete cache dir for the versions apt resolves now, if one was built."""
    out = cache_dir(cache_key(resolve()))
    return out if (out / "meta.json").is_file() else None


def build(progress: Progress = say) -> Path:
    versions = resolve()
    return cached(cache_dir(cache_key(versions)), "kubernetes binaries", lambda out: _build(versions, out, progress),
                  progress)


def cached(out: Path, what: str, make: Callable[[Path], Path], progress: Progress) -> Path:
    """OUT if a complete build is there (its meta.json), else `make(out)`: one build at a time on this machine."""
    with one_build(progress):
        if (out / "meta.json").is_file():
            progress(f"{what}: cached in {out}")
            return out
        return make(out)


@contextlib.contextmanager
def one_build(progress: Progress):
    config.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(config.CACHE_DIR / "kubernetes.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("kubernetes binaries: another build is under way; waiting for it ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(versions: Mapping[str, str], out: Path, progress: Progress) -> Path:
    scratch = out.with_name(out.name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)  # an interrupted build's leftovers
    scratch.mkdir(parents=True)
    wall, cpu = time.monotonic(), children_cpu()
    root, tree = scratch / "root", scratch / "gopath" / "src" / "k8s.io" / "kubernetes"
    step(progress, f"downloading {len(PACKAGES)} Debian packages (Go {versions[f'{GO}-go']}, "
                   f"etcd {versions['etcd-server']}, kubectl)", lambda: fetch_debs(versions, scratch / "debs", root))
    step(progress, f"downloading and unpacking source package {SOURCE_PACKAGE}={SOURCE_VERSION} (34 MB)",
         lambda: fetch_source(scratch / "apt", tree))
    swap_reflect2(root, tree)
    env = go_env(root, scratch / "gopath")
    step(progress, "generating OpenAPI definitions (make gen_openapi)",
         lambda: logged(["make", "gen_openapi"], tree, env, scratch / "gen_openapi.log", "make gen_openapi",
                        progress))
    bin_dir = scratch / "out" / "bin"
    bin_dir.mkdir(parents=True)
    step(progress, f"building {', '.join(COMMANDS)} with Go (about 500 CPU-s cold, 850 MB Go cache; warm: 1 min)",
         lambda: logged(["go", "build", "-v", "-tags", "providerless", "-ldflags", ldflags(), "-o", f"{bin_dir}/",
                         *(f"./cmd/{c}" for c in COMMANDS)], tree, env, scratch / "go-build.log", "go build",
                        progress))
    for name, rel in FROM_DEBS.items():
        shutil.copy2(root / rel, bin_dir / name)
    meta = {"recipe": RECIPE_VERSION, "source": f"{SOURCE_PACKAGE}={SOURCE_VERSION}", "packages": versions,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_s": round(time.monotonic() - wall, 1),
            "cpu_s": round(children_cpu() - cpu, 1)}
    (scratch / "out" / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (scratch / "out").rename(out)  # atomic: the cache dir appears complete or not at all
    shutil.rmtree(scratch, ignore_errors=True)
    progress(f"kubernetes binaries: built in {fmt_duration(meta['wall_s'])} ({meta['cpu_s']:.0f} CPU-s), in {out}")
    return out


def ldflags() -> str:
    """Stripped, and reporting the release the source package is (v1.20.2) instead of a git describe of no tree."""
    return "-s -w " + " ".join(f"-X k8s.io/kubernetes/vendor/k8s.io/{pkg}.{var}"
                               for pkg in ("component-base/version", "client-go/pkg/version")
                               for var in (f"gitVersion={GIT_VERSION}", "gitMajor=1", "gitMinor=20"))


def step(progress: Progress, what: str, action: Callable[[], object]) -> None:
    progress(f"{what} ...")
    start = time.monotonic()
    action()
    progress(f"{what}: done in {fmt_duration(time.monotonic() - start)}")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fetch_debs(versions: Mapping[str, str], debs: Path, root: Path) -> None:
    debs.mkdir()
    for package, version in versions.items():
        proc = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs, capture_output=True,
                              text=True, timeout=600, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise LabError(f"package {package}={version} cannot be had: {last_line(proc.stderr)}")
    for deb in sorted(debs.glob("*.deb")):
        run(["dpkg-deb", "-x", str(deb), str(root)], timeout=300)


def _apt_source_options(apt: Path) -> list[str]:
    """apt options for a private deb-src list made from the system's deb sources (which may have no deb-src)."""
    (apt / "lists" / "partial").mkdir(parents=True)
    lines = [f"deb-src [signed-by={signed}] {uri} {suite} {components}" if signed else
             f"deb-src {uri} {suite} {components}" for uri, suite, components, signed in _deb_sources()]
    if not lines:
        raise LabError("source package cannot be had: no Debian archive in /etc/apt/sources.list{,.d}")
    (apt / "sources.list").write_text("\n".join(lines) + "\n")
    return ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", "Dir::Cache::pkgcache=",
            "-o", "Dir::Cache::srcpkgcache="]


def _deb_sources() -> list[tuple[str, str, str, str]]:
    """(uri, suite, components, signed-by) of every enabled `deb` source, one-line or deb822."""
    found = []
    etc = Path("/etc/apt")
    for path in [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]:
        for line in path.read_text().splitlines() if path.is_file() else []:
            match = re.match(r"deb\s+(?:\[([^]]*)\]\s+)?(\S+)\s+(\S+)\s+(.+)", line.strip())
            if match:
                signed = re.search(r"signed-by=(\S+)", match.group(1) or "")
                found.append((match.group(2), match.group(3), match.group(4), signed.group(1) if signed else ""))
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
            if "deb" not in fields.get("Types", "").split() or fields.get("Enabled", "yes") == "no":
                continue
            for uri in fields.get("URIs", "").split():
                for suite in fields.get("Suites", "").split():
                    found.append((uri, suite, fields.get("Components", "main"), fields.get("Signed-By", "")))
    return found


def fetch_source(apt: Path, tree: Path) -> None:
    options = _apt_source_options(apt)
    proc = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise LabError(f"source package {SOURCE_PACKAGE} cannot be had: apt-get update of deb-src failed: "
                       f"{last_line(proc.stderr)}")
    proc = subprocess.run(["apt-get", *options, "source", "--download-only", f"{SOURCE_PACKAGE}={SOURCE_VERSION}"],
                          cwd=apt, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise LabError(f"source package {SOURCE_PACKAGE}={SOURCE_VERSION} cannot be had: {last_line(proc.stderr)}")
    dsc = next(apt.glob(f"{SOURCE_PACKAGE}_*.dsc"))
    tree.parent.mkdir(parents=True)
    run(["dpkg-source", "--no-check", "-x", str(dsc), str(tree)], timeout=600)  # applies debian/patches


def swap_reflect2(root: Path, tree: Path) -> None:
    # The vendored reflect2 1.0.1 crashes the apiserver under Go 1.19 (UnsafeMapType.UnsafeIterate); 1.0.2 does not.
    debian = root / "usr/share/gocode/src/github.com/modern-go/reflect2"
    vendored = tree / "vendor/github.com/modern-go/reflect2"
    if not debian.is_dir():
        raise LabError(f"golang-github-modern-go-reflect2-dev has no {debian.relative_to(root)}")
    shutil.rmtree(vendored)
    shutil.copytree(debian, vendored)


def go_env(root: Path, gopath: Path) -> dict[str, str]:
    goroot = root / f"usr/lib/go-{GO.removeprefix('golang-')}"
    GO_CACHE.mkdir(parents=True, exist_ok=True)
    # GOPATH mode, as the tree's hack/lib/init.sh sets it; nothing may come from the network.
    return {**os.environ, "GO111MODULE": "off", "GOROOT": str(goroot), "GOPATH": str(gopath), "GOPROXY": "off",
            "GOFLAGS": "", "GOCACHE": str(GO_CACHE), "PATH": f"{goroot}/bin:{root}/usr/bin:{os.environ['PATH']}"}


def logged(cmd: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path, what: str, progress: Progress) -> None:
    """Run cmd with its output in log, saying every HEARTBEAT_S that it is alive (and what it is at). At the lowest
    CPU priority: alone on a machine it runs as fast, and beside the tests (make test builds it on a worker of its
    own) it takes only the CPU they leave, instead of slowing the lab's chain of tests, the suite's longest."""
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(["nice", "-n", "19", *cmd], cwd=cwd, env=dict(env), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                lines = log.read_text(errors="replace").splitlines()
                progress(f"  {what}: still running after {fmt_duration(time.monotonic() - start)}, "
                         f"{len(lines)} lines of output, last: {lines[-1][:80] if lines else '-'}")
    finally:
        if proc.poll() is None:  # interrupted: do not leave the build running
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise LabError(f"{what} failed (exit {proc.returncode}): {last_line(log.read_text(errors='replace'))}; "
                       f"see {log}")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
