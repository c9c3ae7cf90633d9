"""Writing the archive: one .tar.gz, every file under one folder named like the archive, made in memory and then
written the way every gpucheck file is (files.write_atomically): an interrupted run leaves no half archive."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

from ..files import write_atomically

SUFFIX = ".tar.gz"


def folder_name(path: Path) -> str:
    return path.name[:-len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name


def write(path: Path, members: list[tuple[str, bytes]]) -> None:
    """Raises OSError when it cannot be written; nothing is left behind then."""
    top, now, data = folder_name(path), time.time(), io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, content in members:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(content), now, 0o644
            tar.addfile(info, io.BytesIO(content))
    write_atomically(path, data.getvalue())
