"""A flat apt repository in NVIDIA's layout: the .debs, Packages, Packages.gz and Release at the top
(`deb [signed-by=KEY] URL /`), written the way NVIDIA's repo-debian.sh (NVIDIA/cuda-repo-management) writes them:
its Packages field order, its Release fields and hash columns."""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import time
from pathlib import Path

# repo-debian.sh deb_pkg_info: the order NVIDIA's Packages file has; other fields follow Description.
PACKAGES_ORDER = ("Package", "Version", "Architecture", "Multi-Arch", "Priority", "Section", "Source", "Origin",
                  "Maintainer", "Original-Maintainer", "Bugs", "Installed-Size", "Provides", "Depends",
                  "Recommends", "Suggests", "Conflicts", "Breaks", "Replaces")
AFTER_HASHES = ("Homepage", "Description")


def stanza(deb: Path, fields: list[tuple[str, str]]) -> str:
    """The Packages entry of DEB, whose control fields are FIELDS."""
    given = dict(fields)
    data = deb.read_bytes()
    lines = [f"{name}: {given.pop(name)}" for name in PACKAGES_ORDER if name in given]
    lines += [f"Filename: ./{deb.name}", f"Size: {len(data)}",
              f"MD5sum: {hashlib.md5(data).hexdigest()}", f"SHA1: {hashlib.sha1(data).hexdigest()}",
              f"SHA256: {hashlib.sha256(data).hexdigest()}", f"SHA512: {hashlib.sha512(data).hexdigest()}"]
    lines += [f"{name}: {given.pop(name)}" for name in AFTER_HASHES if name in given]
    lines += [f"{name}: {value}" for name, value in given.items()]
    return "\n".join(lines) + "\n"


def hash_lines(name: str, width: int, files: list[Path]) -> list[str]:
    """One Release hash section: ' <hash> <size right-aligned in WIDTH> <file>' as repo-debian.sh prints it."""
    algorithm = {"MD5Sum": hashlib.md5, "SHA1": hashlib.sha1, "SHA256": hashlib.sha256}[name]
    return [f"{name}:"] + [f" {algorithm(f.read_bytes()).hexdigest()} {f.stat().st_size:>{width}} {f.name}"
                           for f in files]


def write_indexes(repo: Path, entries: list[tuple[Path, list[tuple[str, str]]]], fields: dict[str, str],
                  now: float | None = None) -> Path:
    """Packages, Packages.gz and Release of REPO for ENTRIES ((deb, control fields), in order); FIELDS are the
    Release's own (Origin, Label, Architecture). -> the Release file, to be signed."""
    packages = repo / "Packages"
    packages.write_text("\n".join(stanza(deb, f) for deb, f in entries))
    with (repo / "Packages.gz").open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(packages.read_bytes())
    indexes = [packages, repo / "Packages.gz"]
    date = email.utils.formatdate(time.time() if now is None else now, usegmt=True)
    lines = [f"{name}: {value}" for name, value in fields.items()] + [f"Date: {date}"]
    lines += hash_lines("MD5Sum", 48, indexes) + hash_lines("SHA1", 40, indexes) + hash_lines("SHA256", 16, indexes)
    lines.append("Acquire-By-Hash: no")
    release = repo / "Release"
    release.write_text("\n".join(lines) + "\n")
    return release
