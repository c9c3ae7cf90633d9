"""Writing the archive: one .tar.gz, every file under one folder named like the archive, made in memory and then
written as every file a user names is (files.write_output): its folders made, never half written."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

from ..files import write_output

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
    write_output(path, data.getvalue())
