"""A one-layer container image as a docker-archive tarball (what `docker save` writes and `ctr images import`
reads), packed by hand: the lab has no registry, no docker and no buildah. Deterministic: the same files give the
same layer digest."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

MOUNT_POINTS = ("dev", "etc", "proc", "sys", "tmp")  # what runc mounts over or a container writes


def layer(files: Mapping[str, Path | bytes], links: Mapping[str, str]) -> bytes:
    """A layer tar: files (path in the image -> a file here, with its mode and time, or an executable's bytes) and
    symlinks (path -> target)."""
    buf = io.BytesIO()
    made: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def directory(path: str, mode: int = 0o755) -> None:
            if path and path not in made:
                made.add(path)
                info = tarfile.TarInfo(path)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)

        def parents(path: str) -> None:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory("/".join(parts[:depth]))

        for target, source in sorted(files.items()):
            name = target.strip("/")
            parents(name)
            info = tarfile.TarInfo(name)
            if isinstance(source, bytes):
                data, info.mode = source, 0o755
            else:  # the source's mode and time: Python checks a .pyc against its source's time
                data, stat = source.read_bytes(), source.stat()
                info.mode, info.mtime = stat.st_mode & 0o7777 | 0o444, int(stat.st_mtime)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for target, dest in sorted(links.items()):
            name = target.strip("/")
            parents(name)
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, dest, 0o777
            tar.addfile(info)
        for name in MOUNT_POINTS:
            directory(name, 0o1777 if name == "tmp" else 0o755)
    return buf.getvalue()


def pack(out: Path, ref: str, files: Mapping[str, Path | bytes], links: Mapping[str, str] | None = None,
         entrypoint: Sequence[str] = (), cmd: Sequence[str] = ()) -> str:
    """Write the image REF to OUT; its layer's digest."""
    data = layer(files, links or {})
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    settings: dict = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/"}
    if entrypoint:
        settings["Entrypoint"] = list(entrypoint)
    if cmd:
        settings["Cmd"] = list(cmd)
    config = json.dumps({"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
                         "config": settings, "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                         "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "gpucheck lab"}]},
                        sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = f"{diff_id.split(':')[1]}/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]).encode()
    with tarfile.open(out, "w") as tar:
        for name, blob in ((config_name, config), (layer_name, data), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, io.BytesIO(blob))
    return diff_id
