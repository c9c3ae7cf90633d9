"""Where profiles and the GPU SKU table are looked up: a site's directory first, the package's own last.

Both profiles.py and skus.py read from here, so neither needs the other to find its files."""

from __future__ import annotations

import os
from pathlib import Path

SKU_TABLE_FILE = "gpus.yaml"  # the GPU SKU table beside the profiles (skus.py), not a profile


def search_dirs(extra: str | os.PathLike | None = None) -> list[Path]:
    """Where profiles are looked up, first match wins."""
    dirs = [Path(extra)] if extra else []
    env = os.environ.get("GPUCHECK_PROFILES_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path("/etc/gpucheck/checks"))
    dirs.append(Path(__file__).resolve().parent / "checks")  # shipped with the package
    return dirs
