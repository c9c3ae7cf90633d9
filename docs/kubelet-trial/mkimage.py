#!/usr/bin/env python3
"""Pack a one-layer image as a docker-archive tarball (what `docker save` writes, what `ctr images import` reads),
by hand: no registry, no docker, no buildah.

  mkimage.py OUT.tar NAME:TAG --entrypoint /pause --file /pause=./pause [--file /bin/busybox=./busybox]
             [--link /bin/sh=busybox ...]
"""
import argparse
import hashlib
import io
import json
import tarfile
import time


def layer_bytes(files, links):
    buf = io.BytesIO()
    dirs = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add_dirs(path):
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
        for target, source in files:
            add_dirs(target)
            data = open(source, "rb").read()
            info = tarfile.TarInfo(target.strip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
        for target, dest in links:
            add_dirs(target)
            info = tarfile.TarInfo(target.strip("/"))
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, dest, 0o777, 0
            tar.addfile(info)
        for d in ("tmp", "etc", "proc", "sys", "dev"):  # mount points and a writable /tmp
            if d not in dirs:
                info = tarfile.TarInfo(d)
                info.type, info.mtime = tarfile.DIRTYPE, 0
                info.mode = 0o1777 if d == "tmp" else 0o755
                tar.addfile(info)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("ref")
    ap.add_argument("--entrypoint", nargs="*", default=None)
    ap.add_argument("--cmd", nargs="*", default=None)
    ap.add_argument("--file", action="append", default=[], help="TARGET=SOURCE")
    ap.add_argument("--link", action="append", default=[], help="TARGET=LINKNAME")
    args = ap.parse_args()
    files = [tuple(f.split("=", 1)) for f in args.file]
    links = [tuple(f.split("=", 1)) for f in args.link]
    layer = layer_bytes(files, links)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                         **({"Entrypoint": args.entrypoint} if args.entrypoint else {}),
                         **({"Cmd": args.cmd} if args.cmd else {}), "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "mkimage.py"}]}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_dir = diff_id.split(":")[1]
    manifest = [{"Config": config_name, "RepoTags": [args.ref], "Layers": [f"{layer_dir}/layer.tar"]}]
    with tarfile.open(args.out, "w") as tar:
        for name, data in ((config_name, config_bytes), (f"{layer_dir}/layer.tar", layer),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    print(f"{args.out}: {args.ref} layer {diff_id[:19]}... {len(layer)} bytes")


if __name__ == "__main__":
    main()
