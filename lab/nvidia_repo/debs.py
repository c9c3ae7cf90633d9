"""One real .deb per modelled package, built with dpkg-deb from its control fields and its stand-in files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .model import NvidiaRepoError, Package
from .standin_sources import Entry

# Every file and the archive members get this time, so an unchanged model builds the same bytes.
SOURCE_DATE_EPOCH = 1700000000
DPKG_DEB_TIMEOUT_S = 60
STANDIN_MAINTAINER = "gpucheck lab stand-in <lab@gpucheck.invalid>"
# Fields of the model that dpkg-deb writes into DEBIAN/control after Package, Version and Architecture.
CONTROL_ORDER = ("Multi-Arch", "Priority", "Section", "Source", "Maintainer", "Installed-Size", "Provides",
                 "Pre-Depends", "Depends", "Recommends", "Suggests", "Conflicts", "Breaks", "Replaces")


def description(pkg: Package) -> str:
    kind = pkg.payload.get("kind", "placeholder")
    what = (f"control data only (see /usr/share/doc/{pkg.name}/STAND-IN)" if kind == "placeholder"
            else f"holds a working stand-in ({kind})")
    return f"{pkg.name} (gpucheck lab stand-in)\n Stand-in for NVIDIA's {pkg.name} {pkg.version}: {what}."


def installed_size_kib(files: list[Entry]) -> int:
    return sum((len(e.data) + 1023) // 1024 for e in files if e.data is not None) or 1


def control_fields(pkg: Package, files: list[Entry]) -> list[tuple[str, str]]:
    """DEBIAN/control of PKG, in order; unknown fields of the model come after the known ones."""
    given = dict(pkg.control)
    given.setdefault("Maintainer", STANDIN_MAINTAINER)
    given["Installed-Size"] = str(installed_size_kib(files))
    fields = [("Package", pkg.name), ("Version", pkg.version), ("Architecture", pkg.architecture)]
    fields += [(name, given.pop(name)) for name in CONTROL_ORDER if name in given]
    fields += sorted(given.items())
    return [*fields, ("Description", description(pkg))]


def stage(root: Path, files: list[Entry]) -> None:
    for entry in files:
        path = root / entry.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.path.endswith("/"):  # a directory the package ships empty
            path.mkdir(exist_ok=True)
        elif entry.link is not None:
            path.symlink_to(entry.link)
        else:
            path.write_bytes(entry.data or b"")
            path.chmod(entry.mode)


def clamp_times(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)


def build_deb(pkg: Package, files: list[Entry], out_dir: Path, work_dir: Path) -> tuple[Path, list[tuple[str, str]]]:
    """PKG as OUT_DIR/<name>_<version>_<arch>.deb (staged under WORK_DIR); -> (path, its control fields)."""
    fields = control_fields(pkg, files)
    root = work_dir / pkg.filename.removesuffix(".deb")
    if root.exists():
        shutil.rmtree(root)
    (root / "DEBIAN").mkdir(parents=True)
    stage(root, files)
    (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields))
    clamp_times(root)
    deb = out_dir / pkg.filename
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(SOURCE_DATE_EPOCH))
    cmd = ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=DPKG_DEB_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NvidiaRepoError(f"dpkg-deb could not build {pkg.filename}: {exc}") from exc
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise NvidiaRepoError(f"dpkg-deb could not build {pkg.filename} (exit {done.returncode}): {first}")
    shutil.rmtree(root)
    return deb, fields
