"""Build the stand-in repository: every package of the model as a .deb, the indexes, the signature, the key.

Layout of OUT:
  nvidia/                  the flat repository served as NVIDIA's (`deb [signed-by=KEY] file:OUT/nvidia /`)
  debian-archive/          stand-ins of the Debian packages its relations reach (for apt in tests, never served)
  nvidia-standin.asc       the public key both are signed with
  fingerprint              its fingerprint, for the inventory (as NVIDIA's is in inventory/prod)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .apt_repo import write_indexes
from .debs import build_deb
from .model import MODEL, Model, NvidiaRepoError, Package, load
from .payloads import files_for
from .signing import Signer

KEY_FILE = "nvidia-standin.asc"


@dataclass
class RepoBuild:
    root: Path
    nvidia: Path
    debian: Path
    key: Path
    fingerprint: str
    model: Model
    packages: list[Package] = field(default_factory=list)  # what nvidia/ carries
    left_out: list[Package] = field(default_factory=list)  # strict: what NVIDIA's debian12 repository lacks

    def unpack(self, name: str, version: str, dest: Path) -> Path:
        """The files of package NAME at VERSION, unpacked under DEST as dpkg would install them (no scripts)."""
        deb = self.nvidia / self.model.find(name, version).filename
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True, timeout=60)
        return dest

    def source_line(self, repo: Path | None = None) -> str:
        """The one-line sources.list entry for REPO (default nvidia/), as NVIDIA's install guide writes it."""
        return f"deb [signed-by={self.key}] file:{repo or self.nvidia} /"


def build_repository(repo: Path, packages: list[Package], release_fields: dict[str, str], cache: Path | None,
                     signer: Signer, fingerprint: str) -> None:
    """REPO emptied, then filled with PACKAGES as .debs and its signed indexes."""
    if repo.exists():
        shutil.rmtree(repo)
    work = repo / ".staging"
    work.mkdir(parents=True)
    trees = [(pkg, files_for(pkg, cache)) for pkg in packages]  # compiles first, once per library

    def one(item: tuple[Package, list]) -> tuple[Path, list[tuple[str, str]]]:
        return build_deb(item[0], item[1], repo, work)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        entries = list(pool.map(one, trees))
    shutil.rmtree(work)
    signer.sign_release(fingerprint, write_indexes(repo, entries, release_fields))


def build(out: Path, *, strict: bool = False, key_home: Path | None = None, cache_dir: Path | None = None,
          model_path: Path = MODEL) -> RepoBuild:
    """Build the repositories into OUT (see the module's docstring); -> what was built.

    strict: leave out what NVIDIA's debian12 repository is known not to carry (packages.yaml `contradicted`).
    key_home: a GnuPG home to keep the key in (made there on first use; the fingerprint then stays the same
    build after build); default a temporary one, so each build has a new key.
    """
    out = Path(out).resolve()
    model = load(model_path)
    carried = [p for p in model.packages if not (strict and p.status == "contradicted")]
    left_out = [p for p in model.packages if p not in carried]
    out.mkdir(parents=True, exist_ok=True)
    temporary = key_home is None
    home = Path(tempfile.mkdtemp(prefix="gpucheck-gpg-")) if temporary else Path(key_home)
    signer = Signer(home)
    try:
        fingerprint = signer.ensure_key()
        build_repository(out / "nvidia", carried, model.repository, cache_dir, signer, fingerprint)
        build_repository(out / "debian-archive", model.debian_archive,
                         {"Origin": "gpucheck lab", "Label": "Debian archive stand-in", "Architecture": "x86_64"},
                         cache_dir, signer, fingerprint)
        key = signer.export(fingerprint, out / KEY_FILE)
    finally:
        signer.close()
        if temporary:
            shutil.rmtree(home, ignore_errors=True)
    (out / "fingerprint").write_text(fingerprint + "\n")
    return RepoBuild(root=out, nvidia=out / "nvidia", debian=out / "debian-archive", key=key,
                     fingerprint=fingerprint, model=model, packages=carried, left_out=left_out)


def resign(repo: Path, key_home: Path) -> str:
    """Sign REPO's Release again with the key in KEY_HOME (made there if need be); -> its fingerprint.
    What a test uses to show that apt refuses a repository signed by another key."""
    release = Path(repo) / "Release"
    if not release.is_file():
        raise NvidiaRepoError(f"{repo} has no Release file to sign")
    signer = Signer(Path(key_home))
    try:
        fingerprint = signer.ensure_key()
        signer.sign_release(fingerprint, release)
    finally:
        signer.close()
    return fingerprint
