"""The image a site deploys, built for real from deploy/kubernetes/Dockerfile and this checkout (with podman, as a
site builds it with docker; buildah's chroot isolation, since crun refuses this machine's hybrid cgroups), on the
lab's Debian 12 base root filesystem in place of debian:bookworm-slim (no registry here), and handed to a lab node's
containerd as its registry would. Squashed into one layer: a lab node's containerd (the native snapshotter in a
systemd-nspawn host) cannot make the whiteout device a later layer's deletion needs, which a real node's overlayfs
snapshotter makes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab import rootfs
from lab.kubernetes import node_host
from labkit import REPO, ssh_argv

BASE = "localhost/gpucheck-lab-base:bookworm"
IMAGE = "localhost/gpucheck-site:test"


def podman(*args: str, stdin: int | None = None, timeout: float = 900) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, stdin=stdin)
    assert done.returncode == 0, f"podman {' '.join(args[:3])}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def build(into: Path) -> Path:
    """The image as a docker-archive tarball (what `docker save` writes); podman's copies removed."""
    tar = subprocess.Popen(["tar", "-C", str(rootfs.ensure_base()), "-c", "."], stdout=subprocess.PIPE)
    try:
        podman("import", "-", BASE, stdin=tar.stdout.fileno() if tar.stdout else None)
    finally:
        tar.wait(timeout=300)
    archive = into / "gpucheck-site.tar"
    try:
        podman("build", "--squash-all", "--isolation", "chroot", "--network", "host", "--build-arg", f"BASE={BASE}",
               "-f", str(REPO / "deploy/kubernetes/Dockerfile"), "-t", IMAGE, str(REPO))
        podman("save", "--format", "docker-archive", "-o", str(archive), IMAGE)
    finally:
        subprocess.run(["podman", "rmi", "--force", IMAGE, BASE], capture_output=True, timeout=300)
    return archive


def load(archive: Path, address: str) -> None:
    """`ctr images import` on the node at `address`, the archive on its standard input."""
    ctr = f"{node_host.KIT}/bin/ctr --address {node_host.SOCKET} -n k8s.io images import -"
    with archive.open("rb") as stream:
        done = subprocess.run([*ssh_argv(address), ctr], stdin=stream, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
