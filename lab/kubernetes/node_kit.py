"""The node kit: what a lab host needs to be a Kubernetes node, built from Debian's archive alone and cached by its
inputs as build.py caches the control plane (docs/kubernetes.md, "The lab's nodes").

kubernetes-node-<key>/ holds bin/ (kubelet, built from the same source package, Go and recipe as the control plane;
Debian's containerd, ctr, containerd-shim-runc-v2 and runc), cni/ (Debian's bridge, host-local and loopback
plugins), images/ (the pod sandbox's pause, built from the tree's pause.c, and a busybox image, packed as
docker-archive tarballs that `ctr images import` takes: there is no registry) and meta.json. Nothing is installed on
this machine: the packages are only `dpkg -x`ed. One Go build at a time on this machine (build.py's lock).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from lab import config
from lab.kubernetes import build, image_archive
from lab.kubernetes.build import Progress
from lab.progress import fmt_duration, say
from lab.run import run

RECIPE_VERSION = 1  # bump when anything below changes what gets built
RUNTIME_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "busybox-static")
BINARIES = {"containerd": "usr/bin/containerd", "ctr": "usr/bin/ctr",
            "containerd-shim-runc-v2": "usr/bin/containerd-shim-runc-v2", "runc": "usr/sbin/runc"}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
PAUSE_VERSION = "3.4.1"  # the tree's build/pause/Makefile's TAG
PAUSE_IMAGE = f"lab.local/pause:{PAUSE_VERSION}"
BUSYBOX_IMAGE = "lab.local/busybox:1.35"
IMAGES = {"pause.tar": PAUSE_IMAGE, "busybox.tar": BUSYBOX_IMAGE}


def resolve() -> dict[str, str]:
    return {**build.resolve(), **{package: build.candidate(package) for package in RUNTIME_PACKAGES}}


def cache_key(versions: Mapping[str, str]) -> str:
    material = json.dumps({"recipe": RECIPE_VERSION, "control-plane-recipe": build.RECIPE_VERSION,
                           "source": f"{build.SOURCE_PACKAGE}={build.SOURCE_VERSION}",
                           "packages": dict(sorted(versions.items()))}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cache_dir(key: str) -> Path:
    return config.CACHE_DIR / f"kubernetes-node-{key}"


def ensure(progress: Progress = say) -> Path:
    """The cached kit for the versions apt resolves now, built first if there is none."""
    versions = resolve()
    return build.cached(cache_dir(cache_key(versions)), "kubernetes node kit",
                        lambda out: _build(versions, out, progress), progress)


def _build(versions: Mapping[str, str], out: Path, progress: Progress) -> Path:
    scratch = out.with_name(out.name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)  # an interrupted build's leftovers
    scratch.mkdir(parents=True)
    wall, cpu = time.monotonic(), build.children_cpu()
    root, runtime = scratch / "root", scratch / "runtime"
    tree = scratch / "gopath" / "src" / "k8s.io" / "kubernetes"
    go_versions = {p: v for p, v in versions.items() if p in build.PACKAGES}
    runtime_versions = {p: v for p, v in versions.items() if p in RUNTIME_PACKAGES}
    build.step(progress, f"downloading {len(versions)} Debian packages (Go, containerd "
                         f"{versions['containerd']}, runc {versions['runc']}, CNI plugins, busybox)",
               lambda: (build.fetch_debs(go_versions, scratch / "debs", root),
                        build.fetch_debs(runtime_versions, scratch / "runtime-debs", runtime)))
    build.step(progress, f"downloading and unpacking source package {build.SOURCE_PACKAGE}={build.SOURCE_VERSION}",
               lambda: build.fetch_source(scratch / "apt", tree))
    build.swap_reflect2(root, tree)
    kit = scratch / "out"
    for part in ("bin", "cni", "images"):
        (kit / part).mkdir(parents=True)
    env = build.go_env(root, scratch / "gopath")
    # The kubelet needs no gen_openapi (go list -deps ./cmd/kubelet has no pkg/generated/openapi).
    build.step(progress, "building kubelet with Go (about 400 CPU-s cold)",
               lambda: build.logged(["go", "build", "-v", "-tags", "providerless", "-ldflags", build.ldflags(),
                                     "-o", f"{kit / 'bin'}/", "./cmd/kubelet"], tree, env,
                                    scratch / "go-build.log", "go build kubelet", progress))
    for name, rel in BINARIES.items():
        shutil.copy2(runtime / rel, kit / "bin" / name)
    for name in CNI_PLUGINS:
        shutil.copy2(runtime / "usr/lib/cni" / name, kit / "cni" / name)
    build.step(progress, "packing the pause and busybox images", lambda: _images(tree, runtime, scratch, kit))
    meta = {"recipe": RECIPE_VERSION, "source": f"{build.SOURCE_PACKAGE}={build.SOURCE_VERSION}",
            "packages": dict(versions), "images": IMAGES, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": round(time.monotonic() - wall, 1), "cpu_s": round(build.children_cpu() - cpu, 1)}
    (kit / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    kit.rename(out)  # atomic: the cache dir appears complete or not at all
    shutil.rmtree(scratch, ignore_errors=True)
    progress(f"kubernetes node kit: built in {fmt_duration(meta['wall_s'])} ({meta['cpu_s']:.0f} CPU-s), in {out}")
    return out


def _images(tree: Path, runtime: Path, scratch: Path, kit: Path) -> None:
    pause = scratch / "pause"
    run(["gcc", "-static", "-Os", f"-DVERSION={PAUSE_VERSION}-lab", "-o", str(pause),
         str(tree / "build/pause/linux/pause.c")], timeout=120)
    run(["strip", str(pause)])
    image_archive.pack(kit / "images" / "pause.tar", PAUSE_IMAGE, {"/pause": pause}, entrypoint=["/pause"])
    busybox = runtime / "bin/busybox"
    applets = run([str(busybox), "--list"]).stdout.split()
    image_archive.pack(kit / "images" / "busybox.tar", BUSYBOX_IMAGE, {"/bin/busybox": busybox},
                       {f"/bin/{a}": "busybox" for a in applets if a != "busybox"}, cmd=["/bin/sh"])
